/**
 * What the CSR approver does with one guest CertificateSigningRequest: a pure function of the CSR, the guest
 * cluster it was made in, the Kindling Machines of that cluster's namespace and whether the guest has a Node of
 * a name. Kindling owns two kinds of request and leaves every other one (other signers, requesters that are not
 * its bootstrap tokens or its nodes) for others:
 * - a kubelet's client certificate (`kube-apiserver-client-kubelet`) requested with a Kindling bootstrap token:
 *   approved only for the Machine of the token's pool that the requested `system:node:<name>` names, once;
 * - a Kindling node's serving certificate (`kubelet-serving`): approved only when every name in it is one of
 *   its Machine's addresses.
 * Everything else about those two is denied with a reason a person can read.
 */
// @peculiar/x509 resolves its parsers through tsyringe, which needs the Reflect metadata polyfill loaded first.
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import type * as k8s from '#k8s';
import type { Machine } from '../../api/src/capi.js';
import { ANNOTATIONS, BOOTSTRAP_GROUP, LABELS, poolOfBootstrapGroup } from '../../api/src/keys.js';
import { formatDuration } from '../../support/src/config.js';

export const KUBELET_CLIENT_SIGNER = 'kubernetes.io/kube-apiserver-client-kubelet';
export const KUBELET_SERVING_SIGNER = 'kubernetes.io/kubelet-serving';
const NODE_PREFIX = 'system:node:';
const NODES_GROUP = 'system:nodes';

/** Usages the kube-controller-manager's signers accept for kubelet certificates (RSA keys, and the others). */
const CLIENT_USAGES = [
  ['digital signature', 'key encipherment', 'client auth'],
  ['digital signature', 'client auth'],
];
const SERVING_USAGES = [
  ['digital signature', 'key encipherment', 'server auth'],
  ['digital signature', 'server auth'],
];

/** Why a CSR was approved (a label of kindling_csr_decisions_total and the Approved condition's reason). */
export type ApproveReason = 'KubeletClientForMachine' | 'KubeletServingForMachine';

/** Why a CSR was denied (a label of the metric and the Denied condition's reason). */
export type DenyReason =
  /** In the Kindling group but in no pool group, or in one that does not parse. */
  | 'NoPoolGroup'
  /** In the groups of two pools: no token Kindling mints carries that. */
  | 'AmbiguousPool'
  /** The pool group names a namespace other than the guest cluster's. */
  | 'ForeignNamespace'
  | 'InvalidRequest'
  | 'InvalidSubject'
  | 'InvalidUsages'
  /** SANs a kubelet certificate may not carry (any on a client certificate; emails, URIs and others on a serving one). */
  | 'ForbiddenNames'
  | 'NoSubjectAltNames'
  /** No Machine of the pool (and of no other pool) has the node's name. */
  | 'UnknownNodeName'
  /** The node's name is a Machine of another pool than the token's. */
  | 'WrongPool'
  /** The Machine belongs to another guest cluster. */
  | 'WrongCluster'
  | 'AmbiguousNodeName'
  | 'MachineAlreadyApproved'
  | 'MachineHasNode'
  | 'NodeExists'
  /** A serving request from node A for `system:node:B`. */
  | 'SubjectMismatch'
  | 'NodeNotFound'
  | 'ForeignSAN';

/** Why a Kindling CSR stays pending for now (it is decided later, at the latest once the grace has passed). */
export type WaitReason = 'MachineAddressesPending' | 'NodeNotSeenYet';

export interface PoolRef {
  namespace: string;
  name: string;
}

export type Decision =
  | { action: 'ignore'; why: string }
  | { action: 'wait'; reason: WaitReason; message: string; retryAfterMs: number; pool?: PoolRef }
  /** `claim`: the ANNOTATIONS.approvedClientCsr value to write on the Machine before approving; absent when the
   * Machine already holds it (a retry) or for a serving certificate. */
  | { action: 'approve'; reason: ApproveReason; message: string; machine: Machine; claim?: string }
  | { action: 'deny'; reason: DenyReason; message: string; machine?: Machine; pool?: PoolRef };

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
  now: number;
  /** How long a Kindling CSR may wait for its Machine's addresses (or its Node) before it is denied. */
  graceMs: number;
}

export interface CertificateRequest {
  commonNames: string[];
  organizations: string[];
  dnsNames: string[];
  ipAddresses: string[];
  /** Emails, URIs and any other kind of name. */
  otherNames: string[];
}

const SAN_OID = '2.5.29.17';

/** Parses `spec.request` (base64 of a PEM PKCS#10 request); throws on anything else. */
export function parseCertificateRequest(request: string): CertificateRequest {
  const pem = Buffer.from(request, 'base64').toString('utf8');
  if (!pem.includes('-----BEGIN CERTIFICATE REQUEST-----'))
    throw new Error('spec.request is not a PEM certificate request');
  const csr = new x509.Pkcs10CertificateRequest(pem);
  const ext = csr.getExtension(SAN_OID);
  const names = ext ? new x509.SubjectAlternativeNameExtension(ext.rawData).names.items : [];
  const of = (type: string): string[] => names.filter((n) => n.type === type).map((n) => n.value);
  return {
    commonNames: csr.subjectName.getField('CN'),
    organizations: csr.subjectName.getField('O'),
    dnsNames: of('dns'),
    ipAddresses: of('ip'),
    otherNames: names.filter((n) => n.type !== 'dns' && n.type !== 'ip').map((n) => `${n.type}:${n.value}`),
  };
}

/** Canonical text of an IP address (IPv6 compressed, lower case), so SANs and addresses compare equal. */
export function canonicalIp(ip: string): string {
  try {
    return ip.includes(':') ? new URL(`http://[${ip}]`).hostname.slice(1, -1) : new URL(`http://${ip}`).hostname;
  } catch {
    return ip.toLowerCase();
  }
}

const poolOf = (m: Machine): string => m.metadata.labels?.[LABELS.nodePool] ?? '';
const machineKey = (m: Machine): string => `${m.metadata.namespace ?? ''}/${m.metadata.name}`;
const csrId = (csr: k8s.V1CertificateSigningRequest): string =>
  `${csr.metadata?.name ?? ''}/${csr.metadata?.uid ?? ''}`;

/** The names a kubelet on this Machine registers under: its Hostname and InternalDNS addresses, and its name. */
function nodeNamesOf(m: Machine): Set<string> {
  const fromAddresses = (m.status?.addresses ?? [])
    .filter((a) => a.type === 'Hostname' || a.type === 'InternalDNS')
    .map((a) => a.address.toLowerCase());
  return new Set([m.metadata.name.toLowerCase(), ...fromAddresses]);
}

const hasHostAddress = (m: Machine): boolean =>
  (m.status?.addresses ?? []).some((a) => a.type === 'Hostname' || a.type === 'InternalDNS');

function ageMs(csr: k8s.V1CertificateSigningRequest, now: number): number {
  const created = new Date(csr.metadata?.creationTimestamp ?? NaN).getTime();
  return Number.isFinite(created) ? now - created : Infinity;
}

const ignore = (why: string): Decision => ({ action: 'ignore', why });
const deny = (reason: DenyReason, message: string, about: { machine?: Machine; pool?: PoolRef } = {}): Decision => ({
  action: 'deny',
  reason,
  message,
  ...about,
});

/** Decides one CSR that has no Approved/Denied/Failed condition yet. */
export function decideCsr(input: DecisionInput): Decision {
  switch (input.csr.spec.signerName) {
    case KUBELET_CLIENT_SIGNER:
      return decideClient(input);
    case KUBELET_SERVING_SIGNER:
      return decideServing(input);
    default:
      return ignore(`signer ${input.csr.spec.signerName} is not a kubelet's`);
  }
}

type RequesterPool =
  { kind: 'none' } | { kind: 'invalid'; reason: DenyReason; message: string } | { kind: 'pool'; pool: PoolRef };

/** The pool whose bootstrap token made the request, from the requester's groups. */
function requesterPool(groups: readonly string[]): RequesterPool {
  const kindling = groups.filter((g) => g === BOOTSTRAP_GROUP || g.startsWith(`${BOOTSTRAP_GROUP}:`));
  if (kindling.length === 0) return { kind: 'none' };
  const pools = kindling.filter((g) => g !== BOOTSTRAP_GROUP);
  const parsed = pools.map(poolOfBootstrapGroup);
  const [pool] = parsed;
  if (pool === undefined || parsed.some((p) => p === undefined)) {
    return {
      kind: 'invalid',
      reason: 'NoPoolGroup',
      message: `the requester's groups (${kindling.join(', ')}) name no pool as ${BOOTSTRAP_GROUP}:<namespace>:<pool>`,
    };
  }
  if (pools.length > 1)
    return {
      kind: 'invalid',
      reason: 'AmbiguousPool',
      message: `the requester is in the bootstrap groups of ${pools.length} pools (${pools.join(', ')}); a Kindling bootstrap token names one`,
    };
  return { kind: 'pool', pool };
}

type Checked =
  { ok: true; node: string; request: CertificateRequest } | { ok: false; reason: DenyReason; message: string };

function sameSet(a: readonly string[], b: readonly string[]): boolean {
  const s = new Set(a);
  return s.size === b.length && b.every((x) => s.has(x));
}

/** What both kinds of kubelet certificate must be: CN system:node:<name>, O system:nodes, the kubelet usages. */
function checkKubeletRequest(csr: k8s.V1CertificateSigningRequest, usages: string[][]): Checked {
  let request: CertificateRequest;
  try {
    request = parseCertificateRequest(csr.spec.request);
  } catch (err) {
    return {
      ok: false,
      reason: 'InvalidRequest',
      message: `spec.request is not a valid PEM certificate request: ${(err as Error).message}`,
    };
  }
  const [cn, ...moreCns] = request.commonNames;
  if (cn === undefined || moreCns.length > 0 || !cn.startsWith(NODE_PREFIX) || cn.length === NODE_PREFIX.length) {
    return {
      ok: false,
      reason: 'InvalidSubject',
      message: `the subject's common name must be one ${NODE_PREFIX}<node name>, not "${request.commonNames.join('", "')}"`,
    };
  }
  if (!sameSet(request.organizations, [NODES_GROUP])) {
    return {
      ok: false,
      reason: 'InvalidSubject',
      message: `the subject's organization must be exactly ${NODES_GROUP}, not "${request.organizations.join('", "')}"`,
    };
  }
  const asked = csr.spec.usages ?? [];
  if (!usages.some((u) => sameSet(asked, u))) {
    return {
      ok: false,
      reason: 'InvalidUsages',
      message: `usages must be ${usages.map((u) => `[${u.join(', ')}]`).join(' or ')}, not [${asked.join(', ')}]`,
    };
  }
  return { ok: true, node: cn.slice(NODE_PREFIX.length), request };
}

function decideClient(input: DecisionInput): Decision {
  const who = requesterPool(input.csr.spec.groups ?? []);
  if (who.kind === 'none') return ignore('the requester is not in a Kindling bootstrap group');
  if (who.kind === 'invalid') return deny(who.reason, who.message);
  const { pool } = who;
  if (pool.namespace !== input.cluster.namespace) {
    return deny(
      'ForeignNamespace',
      `the requester's bootstrap group names pool ${pool.namespace}/${pool.name}, but this guest cluster belongs to namespace ${input.cluster.namespace}`,
    );
  }
  const checked = checkKubeletRequest(input.csr, CLIENT_USAGES);
  if (!checked.ok) return deny(checked.reason, checked.message, { pool });
  const { dnsNames, ipAddresses, otherNames } = checked.request;
  const sans = [...dnsNames, ...ipAddresses, ...otherNames];
  if (sans.length > 0)
    return deny(
      'ForbiddenNames',
      `a kubelet client certificate carries no subject alternative names; this request has ${sans.join(', ')}`,
      { pool },
    );
  return decideClientMachine(input, pool, checked.node);
}

function decideClientMachine(input: DecisionInput, pool: PoolRef, node: string): Decision {
  const named = input.machines.filter((m) => nodeNamesOf(m).has(node.toLowerCase()));
  const ofPool = named.filter((m) => poolOf(m) === pool.name);
  const [machine, ...others] = ofPool;
  if (machine === undefined) {
    const [foreign] = named;
    if (foreign !== undefined) {
      return deny(
        'WrongPool',
        `node "${node}" is Machine ${machineKey(foreign)} of pool "${poolOf(foreign)}", but the request came with a bootstrap token of pool "${pool.name}"`,
        { machine: foreign, pool },
      );
    }
    return unknownNodeName(input, pool, node);
  }
  if (others.length > 0)
    return deny(
      'AmbiguousNodeName',
      `node "${node}" names ${ofPool.length} Machines of pool ${pool.namespace}/${pool.name}: ${ofPool.map(machineKey).join(', ')}`,
      { pool },
    );
  if (machine.spec.clusterName !== input.cluster.name) {
    return deny(
      'WrongCluster',
      `Machine ${machineKey(machine)} belongs to cluster "${machine.spec.clusterName}", not to this guest cluster "${input.cluster.name}"`,
      { machine, pool },
    );
  }
  return decideClaim(input, machine, node);
}

/**
 * A claim whose CSR is still there and was denied (or failed) without ever being approved: someone decided it
 * between the claim and the approval. It issued no certificate, so it does not count. A claimed CSR that is
 * gone counts: it may have been approved and cleaned up since.
 */
function voidClaim(input: DecisionInput, claimed: string): boolean {
  const [name = '', uid] = claimed.split('/');
  const csr = input.csrNamed?.(name);
  if (csr === undefined || csr.metadata?.uid !== uid) return false;
  const decided = new Set((csr.status?.conditions ?? []).filter((c) => c.status === 'True').map((c) => c.type));
  return !decided.has('Approved') && (decided.has('Denied') || decided.has('Failed'));
}

/** A Machine joins once: the first client CSR approved for it is recorded on it, and no other is approved. */
function decideClaim(input: DecisionInput, machine: Machine, node: string): Decision {
  const id = csrId(input.csr);
  const recorded = machine.metadata.annotations?.[ANNOTATIONS.approvedClientCsr];
  const claimed = recorded !== undefined && voidClaim(input, recorded) ? undefined : recorded;
  const message = `node "${node}" is Machine ${machineKey(machine)} of pool "${poolOf(machine)}", which has no Node yet`;
  if (claimed === id) return { action: 'approve', reason: 'KubeletClientForMachine', message, machine };
  if (claimed !== undefined) {
    const earlier = claimed.split('/')[0] ?? claimed;
    return deny(
      'MachineAlreadyApproved',
      `Machine ${machineKey(machine)} already had its client certificate request ${earlier} approved; a Machine joins once`,
      { machine },
    );
  }
  if (machine.status?.nodeRef)
    return deny('MachineHasNode', `Machine ${machineKey(machine)} already has Node "${machine.status.nodeRef.name}"`, {
      machine,
    });
  if (input.hasNode(node)) return deny('NodeExists', `the guest cluster already has a Node "${node}"`, { machine });
  return { action: 'approve', reason: 'KubeletClientForMachine', message, machine, claim: id };
}

/**
 * No Machine has the name. Cluster API copies a Machine's addresses from its infrastructure some time after
 * the host booted, so a kubelet can ask before its Machine shows its hostname: while a Machine of the pool
 * still has none (or the pool has none in the cache yet), the request waits, up to the grace.
 */
function unknownNodeName(input: DecisionInput, pool: PoolRef, node: string): Decision {
  const poolMachines = input.machines.filter(
    (m) => poolOf(m) === pool.name && m.spec.clusterName === input.cluster.name,
  );
  const pending = poolMachines.filter((m) => !m.status?.nodeRef && !hasHostAddress(m));
  const mayBeEarly = pending.length > 0 || poolMachines.length === 0;
  const age = ageMs(input.csr, input.now);
  if (mayBeEarly && age < input.graceMs) {
    const message = `no Machine of pool ${pool.namespace}/${pool.name} is named "${node}" yet; ${pending.length} of its Machines have no Hostname address yet`;
    return {
      action: 'wait',
      reason: 'MachineAddressesPending',
      message,
      retryAfterMs: Math.min(5_000, input.graceMs - age),
      pool,
    };
  }
  const waited = mayBeEarly ? ` after waiting ${formatDuration(input.graceMs)} for the Machines' addresses` : '';
  return deny(
    'UnknownNodeName',
    `no Machine of pool ${pool.namespace}/${pool.name} is named "${node}" (by its Hostname or InternalDNS address, or its name)${waited}`,
    { pool },
  );
}

/** The Kindling Machine of a node of this cluster: the one whose nodeRef names it, else the one named like it. */
function machineOfNode(input: DecisionInput, node: string): Machine | undefined {
  const ours = input.machines.filter((m) => m.spec.clusterName === input.cluster.name);
  return ours.find((m) => m.status?.nodeRef?.name === node) ?? ours.find((m) => nodeNamesOf(m).has(node.toLowerCase()));
}

function decideServing(input: DecisionInput): Decision {
  const { username = '', groups = [] } = input.csr.spec;
  if (!username.startsWith(NODE_PREFIX) || !groups.includes(NODES_GROUP)) return ignore('the requester is not a node');
  const node = username.slice(NODE_PREFIX.length);
  const machine = machineOfNode(input, node);
  if (!machine) return ignore(`node "${node}" is not a Machine of a Kindling pool`);
  const checked = checkServingRequest(input.csr, node);
  if (!checked.ok) return deny(checked.reason, checked.message, { machine });
  if (!input.hasNode(node)) return nodeNotFound(input, machine, node);
  return checkSans(machine, node, checked.request);
}

function checkServingRequest(csr: k8s.V1CertificateSigningRequest, node: string): Checked {
  const checked = checkKubeletRequest(csr, SERVING_USAGES);
  if (!checked.ok) return checked;
  if (checked.node !== node)
    return {
      ok: false,
      reason: 'SubjectMismatch',
      message: `node "${node}" asks for a certificate of ${NODE_PREFIX}${checked.node}`,
    };
  const { dnsNames, ipAddresses, otherNames } = checked.request;
  if (otherNames.length > 0)
    return {
      ok: false,
      reason: 'ForbiddenNames',
      message: `a kubelet serving certificate carries DNS names and IP addresses only; this request has ${otherNames.join(', ')}`,
    };
  if (dnsNames.length + ipAddresses.length === 0)
    return {
      ok: false,
      reason: 'NoSubjectAltNames',
      message: 'a kubelet serving certificate needs at least one DNS name or IP address',
    };
  return checked;
}

function nodeNotFound(input: DecisionInput, machine: Machine, node: string): Decision {
  const age = ageMs(input.csr, input.now);
  if (age < input.graceMs)
    return {
      action: 'wait',
      reason: 'NodeNotSeenYet',
      message: `Node "${node}" is not in the guest cluster (yet)`,
      retryAfterMs: Math.min(5_000, input.graceMs - age),
    };
  return deny('NodeNotFound', `the guest cluster has no Node "${node}" (waited ${formatDuration(input.graceMs)})`, {
    machine,
  });
}

function checkSans(machine: Machine, node: string, request: CertificateRequest): Decision {
  const addresses = machine.status?.addresses ?? [];
  const known = new Set(
    addresses.map((a) => (a.type.endsWith('IP') ? canonicalIp(a.address) : a.address.toLowerCase())),
  );
  const foreign = [
    ...request.dnsNames.filter((d) => !known.has(d.toLowerCase())),
    ...request.ipAddresses.filter((ip) => !known.has(canonicalIp(ip))),
  ];
  if (foreign.length > 0) {
    const listed = addresses.map((a) => a.address).join(', ') || 'none';
    return deny(
      'ForeignSAN',
      `${foreign.join(', ')} ${foreign.length === 1 ? 'is' : 'are'} not among the addresses of Machine ${machineKey(machine)} (${listed})`,
      { machine },
    );
  }
  return {
    action: 'approve',
    reason: 'KubeletServingForMachine',
    message: `node "${node}" is Machine ${machineKey(machine)} and every name is one of its addresses`,
    machine,
  };
}
