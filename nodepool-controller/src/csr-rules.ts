/**
 * The vocabulary of the CSR approver's decisions (csr-decision.ts, csr-node.ts): what a decision is, its typed
 * reasons, and what a kubelet's Machine is (the names it may register under, whether it is live).
 */
import type * as k8s from '#k8s';
import type { Machine } from '../../api/src/capi.js';
import { LABELS } from '../../api/src/keys.js';
import type { RequestProblem } from './csr-request.js';

/**
 * A bootstrap client CSR is approved only when created after its Machine (less this clock skew between the
 * guest's apiserver and the management cluster's) and at most JOIN_WINDOW_MS after it: a request made before
 * the Machine existed was made for a name, not by its host, and a host that has not asked within the window
 * is not the one booting now.
 */
export const CLOCK_SKEW_MS = 10_000;
export const JOIN_WINDOW_MS = 2 * 3600_000;

/** Why a CSR was approved (a label of kindling_csr_decisions_total and the Approved condition's reason). */
type ApproveReason = 'KubeletClientForMachine' | 'KubeletClientRenewal' | 'KubeletServingForMachine';

/** Why a CSR was denied (a label of the metric and the Denied condition's reason). */
export type DenyReason =
  | RequestProblem
  /** In the Kindling group but in no pool group, or in one that does not parse. */
  | 'NoPoolGroup'
  /** In the groups of two pools: no token Kindling mints carries that. */
  | 'AmbiguousPool'
  /** The pool group names a namespace other than the guest cluster's. */
  | 'ForeignNamespace'
  /** In a Kindling pool group, but not as a bootstrap token (`system:bootstrap:<id>` of `system:bootstrappers`). */
  | 'NotBootstrapToken'
  /** SANs a kubelet certificate may not carry (any on a client certificate; emails, URIs and others on a serving one). */
  | 'ForbiddenNames'
  | 'NoSubjectAltNames'
  /** No Machine of the pool (and of no other pool) has the node's name among its addresses. */
  | 'UnknownNodeName'
  /** The node's name is a Machine of another pool than the token's. */
  | 'WrongPool'
  /** The Machine belongs to another guest cluster. */
  | 'WrongCluster'
  | 'AmbiguousNodeName'
  /** The Machine is being deleted: no new certificate for its host. */
  | 'MachineDeleting'
  /** The CSR was created before its Machine (less CLOCK_SKEW_MS). */
  | 'CreatedBeforeMachine'
  /** The CSR was created more than JOIN_WINDOW_MS after its Machine. */
  | 'CreatedAfterJoinWindow'
  /** An older pending CSR asks for the same Machine and would be approved: the oldest wins. */
  | 'OlderRivalRequest'
  | 'MachineAlreadyApproved'
  | 'MachineHasNode'
  | 'NodeExists'
  /** A node asking for a certificate of another node's name. */
  | 'SubjectMismatch'
  | 'NodeNotFound'
  /** A renewal from a node whose Machine is not (or no longer) linked to it by its nodeRef. */
  | 'NodeNotBound'
  | 'ForeignSAN';

/** Why a Kindling CSR stays pending for now (it is decided later, at the latest once the grace has passed). */
export type WaitReason = 'MachineAddressesPending' | 'NodeNotSeenYet' | 'NodeNotBoundYet';

export interface PoolRef {
  namespace: string;
  name: string;
}

export type Decision =
  | { action: 'ignore'; why: string }
  | { action: 'wait'; reason: WaitReason; message: string; retryAfterMs: number; pool?: PoolRef }
  /** `claim`: the ANNOTATIONS.approvedClientCsr value to write on the Machine before approving; absent when the
   * Machine already holds it (a retry), for a renewal or for a serving certificate. */
  | { action: 'approve'; reason: ApproveReason; message: string; machine: Machine; claim?: string }
  /** `machine`: the Machine the denial is about (its Event goes there), only ever one of the requester's own
   * pool and cluster; `ofJoin`: the denial is why that Machine has not joined (written to its join failure). */
  | { action: 'deny'; reason: DenyReason; message: string; machine?: Machine; pool?: PoolRef; ofJoin?: boolean };

export interface DecisionInput {
  csr: k8s.V1CertificateSigningRequest;
  /** The guest cluster the CSR was made in: its Cluster API Cluster's namespace and name. */
  cluster: { namespace: string; name: string };
  /** The Kindling Machines (LABELS.nodePool) of the cluster's namespace. */
  machines: readonly Machine[];
  /** Whether the guest cluster has a Node of this name. */
  hasNode: (name: string) => boolean;
  /** The guest's CSR of this name, if it still exists (to tell a claim whose CSR was never approved). */
  csrNamed?: (name: string) => k8s.V1CertificateSigningRequest | undefined;
  /** The guest's CSRs, decided or not (to find the rivals of a bootstrap client CSR). */
  guestCsrs: () => readonly k8s.V1CertificateSigningRequest[];
  now: number;
  /** How long a Kindling CSR may wait for its Machine's addresses (or its Node) before it is denied. */
  graceMs: number;
}

/** Approved, Denied or Failed: someone (the signer included) has decided; nothing is left to do. */
export function isDecided(csr: k8s.V1CertificateSigningRequest): boolean {
  return (csr.status?.conditions ?? []).some(
    (c) => c.status === 'True' && ['Approved', 'Denied', 'Failed'].includes(c.type),
  );
}

export const poolOf = (m: Machine): string => m.metadata.labels?.[LABELS.nodePool] ?? '';
export const machineKey = (m: Machine): string => `${m.metadata.namespace ?? ''}/${m.metadata.name}`;
export const isDeleting = (m: Machine): boolean => Boolean(m.metadata.deletionTimestamp);

/** Milliseconds since the epoch of an API timestamp (a Date once deserialized, a string in a raw object). */
export const timeOf = (t: Date | string | undefined): number => new Date(t ?? NaN).getTime();

/** The address types a kubelet's node name comes from: never the Machine's own name, which its host does not know. */
const NAME_ADDRESSES = new Set(['Hostname', 'InternalDNS', 'ExternalDNS']);

/** The names a kubelet on this Machine registers under, from the addresses its infrastructure reports. */
export function nodeNamesOf(m: Machine): Set<string> {
  return new Set(
    (m.status?.addresses ?? []).filter((a) => NAME_ADDRESSES.has(a.type)).map((a) => a.address.toLowerCase()),
  );
}

export const hasHostAddress = (m: Machine): boolean => nodeNamesOf(m).size > 0;

export function ageMs(csr: k8s.V1CertificateSigningRequest, now: number): number {
  const created = timeOf(csr.metadata?.creationTimestamp);
  return Number.isFinite(created) ? now - created : Infinity;
}

export const ignore = (why: string): Decision => ({ action: 'ignore', why });

export const deny = (
  reason: DenyReason,
  message: string,
  about: { machine?: Machine; pool?: PoolRef; ofJoin?: boolean } = {},
): Decision => ({ action: 'deny', reason, message, ...about });
