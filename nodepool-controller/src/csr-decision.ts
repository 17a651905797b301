/**
 * What the CSR approver does with one guest CertificateSigningRequest: a pure function of the CSR, the guest
 * cluster it was made in, the Kindling Machines of that cluster's namespace, the guest's other CSRs and whether
 * the guest has a Node of a name. Kindling owns three kinds of request and leaves every other one (other
 * signers, requesters that are neither its bootstrap tokens nor its nodes) for others:
 * - a kubelet's first client certificate (`kube-apiserver-client-kubelet`) requested with a Kindling bootstrap
 *   token (`system:bootstrap:<id>` in `system:bootstrappers` and one pool's group): approved only for the
 *   Machine of that pool whose address the requested `system:node:<name>` is, when the CSR was made within the
 *   Machine's join window, once per Machine, and to the oldest of rival requests for it;
 * - the renewal of that certificate by the node itself, and a Kindling node's serving certificate
 *   (`kubelet-serving`): see csr-node.ts.
 * Everything else about those is denied with a reason a person can read.
 */
import type * as k8s from '#k8s';
import type { Machine } from '../../api/src/capi.js';
import { ANNOTATIONS, BOOTSTRAP_GROUP, poolOfBootstrapGroup } from '../../api/src/keys.js';
import { formatDuration } from '../../support/src/config.js';
import { decideRenewal, decideServing } from './csr-node.js';
import { checkKubeletRequest, CLIENT_USAGES, NODE_PREFIX, sansOf } from './csr-request.js';
import {
  ageMs,
  CLOCK_SKEW_MS,
  deny,
  hasHostAddress,
  ignore,
  isDecided,
  isDeleting,
  JOIN_WINDOW_MS,
  machineKey,
  nodeNamesOf,
  poolOf,
  timeOf,
  type Decision,
  type DecisionInput,
  type DenyReason,
  type PoolRef,
} from './csr-rules.js';

export { canonicalIp } from './csr-request.js';
export { isDecided, type Decision, type DecisionInput } from './csr-rules.js';

export const KUBELET_CLIENT_SIGNER = 'kubernetes.io/kube-apiserver-client-kubelet';
export const KUBELET_SERVING_SIGNER = 'kubernetes.io/kubelet-serving';
const BOOTSTRAPPERS = 'system:bootstrappers';
/** The user name of a bootstrap token: `system:bootstrap:` and its six-character id. */
const BOOTSTRAP_USER = /^system:bootstrap:[a-z0-9]{6}$/;

const csrId = (csr: k8s.V1CertificateSigningRequest): string =>
  `${csr.metadata?.name ?? ''}/${csr.metadata?.uid ?? ''}`;

/** Decides one CSR that has no Approved/Denied/Failed condition yet. */
export function decideCsr(input: DecisionInput): Decision {
  switch (input.csr.spec.signerName) {
    case KUBELET_CLIENT_SIGNER:
      return (input.csr.spec.username ?? '').startsWith(NODE_PREFIX) ? decideRenewal(input) : decideClient(input);
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

/** The Machine a bootstrap client CSR asks to join as, once every check that does not depend on rivals passed. */
type Target = { ok: true; machine: Machine; node: string } | { ok: false; decision: Decision };

function decideClient(input: DecisionInput): Decision {
  const target = clientTarget(input, input.csr);
  return target.ok ? decideClaim(input, target.machine, target.node) : target.decision;
}

/** Who asks, and for which Machine: the requester's pool, identity, request, then its Machine and window. */
function clientTarget(input: DecisionInput, csr: k8s.V1CertificateSigningRequest): Target {
  const { username = '', groups = [] } = csr.spec;
  const who = requesterPool(groups);
  if (who.kind === 'none') return { ok: false, decision: ignore('the requester is not in a Kindling bootstrap group') };
  if (who.kind === 'invalid') return { ok: false, decision: deny(who.reason, who.message) };
  const { pool } = who;
  if (!BOOTSTRAP_USER.test(username) || !groups.includes(BOOTSTRAPPERS)) {
    const message = `the requester "${username}" is in the bootstrap group of pool ${pool.namespace}/${pool.name} but is not a bootstrap token (system:bootstrap:<token id> in ${BOOTSTRAPPERS})`;
    return { ok: false, decision: deny('NotBootstrapToken', message, { pool }) };
  }
  if (pool.namespace !== input.cluster.namespace) {
    const message = `the requester's bootstrap group names pool ${pool.namespace}/${pool.name}, but this guest cluster belongs to namespace ${input.cluster.namespace}`;
    return { ok: false, decision: deny('ForeignNamespace', message) };
  }
  const checked = checkKubeletRequest(csr, CLIENT_USAGES);
  if (!checked.ok) return { ok: false, decision: deny(checked.reason, checked.message, { pool }) };
  const sans = sansOf(checked.request);
  if (sans.length > 0) {
    const message = `a kubelet client certificate carries no subject alternative names; this request has ${sans.join(', ')}`;
    return { ok: false, decision: deny('ForbiddenNames', message, { pool }) };
  }
  return clientMachine(input, csr, pool, checked.node);
}

/**
 * The Machine of the token's pool that the node name is an address of. A denial about a Machine of another pool
 * or cluster goes on the requester's pool, never on that Machine: a token of one pool writes nothing on another's.
 */
function clientMachine(
  input: DecisionInput,
  csr: k8s.V1CertificateSigningRequest,
  pool: PoolRef,
  node: string,
): Target {
  const named = input.machines.filter((m) => nodeNamesOf(m).has(node.toLowerCase()));
  const ofPool = named.filter((m) => poolOf(m) === pool.name);
  const [machine, ...others] = ofPool;
  const no = (reason: DenyReason, message: string, about: { machine?: Machine } = {}): Target => ({
    ok: false,
    decision: deny(reason, message, { pool, ...about, ofJoin: about.machine !== undefined }),
  });
  if (machine === undefined) {
    const [foreign] = named;
    if (foreign !== undefined)
      return no(
        'WrongPool',
        `node "${node}" is Machine ${machineKey(foreign)} of pool "${poolOf(foreign)}", but the request came with a bootstrap token of pool "${pool.name}"`,
      );
    return { ok: false, decision: unknownNodeName(input, csr, pool, node) };
  }
  if (others.length > 0)
    return no(
      'AmbiguousNodeName',
      `node "${node}" names ${ofPool.length} Machines of pool ${pool.namespace}/${pool.name}: ${ofPool.map(machineKey).join(', ')}`,
    );
  if (machine.spec.clusterName !== input.cluster.name)
    return no(
      'WrongCluster',
      `Machine ${machineKey(machine)} belongs to cluster "${machine.spec.clusterName}", not to this guest cluster "${input.cluster.name}"`,
    );
  if (isDeleting(machine)) return no('MachineDeleting', `Machine ${machineKey(machine)} is being deleted`, { machine });
  const window = joinWindow(csr, machine);
  return window ? no(window.reason, window.message, { machine }) : { ok: true, machine, node };
}

/** Whether the CSR was made within its Machine's join window (CLOCK_SKEW_MS before it, JOIN_WINDOW_MS after). */
function joinWindow(
  csr: k8s.V1CertificateSigningRequest,
  machine: Machine,
): { reason: DenyReason; message: string } | undefined {
  const created = timeOf(csr.metadata?.creationTimestamp);
  const born = timeOf(machine.metadata.creationTimestamp);
  const at = `the CSR was created at ${new Date(created).toISOString()}, Machine ${machineKey(machine)}`;
  if (!Number.isFinite(created) || !Number.isFinite(born))
    return { reason: 'CreatedBeforeMachine', message: 'the CSR or its Machine has no creation time' };
  if (created < born - CLOCK_SKEW_MS)
    return {
      reason: 'CreatedBeforeMachine',
      message: `${at} at ${new Date(born).toISOString()}: a request made before its Machine was not made by its host`,
    };
  if (created > born + JOIN_WINDOW_MS)
    return {
      reason: 'CreatedAfterJoinWindow',
      message: `${at} at ${new Date(born).toISOString()}: a host joins within ${formatDuration(JOIN_WINDOW_MS)} of its Machine`,
    };
  return undefined;
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
      { machine, ofJoin: true },
    );
  }
  return (
    joinRefusal(input, machine, node) ?? {
      action: 'approve',
      reason: 'KubeletClientForMachine',
      message,
      machine,
      claim: id,
    }
  );
}

/** Why an unclaimed Machine may not join with this CSR: it has a Node already, or an older rival asks for it. */
function joinRefusal(input: DecisionInput, machine: Machine, node: string): Decision | undefined {
  const about = { machine, ofJoin: true };
  if (machine.status?.nodeRef)
    return deny(
      'MachineHasNode',
      `Machine ${machineKey(machine)} already has Node "${machine.status.nodeRef.name}"`,
      about,
    );
  if (input.hasNode(node)) return deny('NodeExists', `the guest cluster already has a Node "${node}"`, about);
  const rival = olderRival(input, machine);
  if (rival !== undefined)
    return deny(
      'OlderRivalRequest',
      `the older pending request ${rival} also asks to join as Machine ${machineKey(machine)}; the oldest request for a Machine is the one approved`,
      about,
    );
  return undefined;
}

/** Oldest first: by creation time, then by name (creation times are whole seconds). */
function older(a: k8s.V1CertificateSigningRequest, b: k8s.V1CertificateSigningRequest): boolean {
  const [ta, tb] = [timeOf(a.metadata?.creationTimestamp), timeOf(b.metadata?.creationTimestamp)];
  return ta !== tb ? ta < tb : (a.metadata?.name ?? '') < (b.metadata?.name ?? '');
}

/**
 * The name of a pending bootstrap client CSR older than this one that would be approved for the same Machine.
 * Which of two rivals the queue decides first must not matter: the oldest good request wins, the others are
 * denied, whatever order they are decided in.
 */
function olderRival(input: DecisionInput, machine: Machine): string | undefined {
  const { csr } = input;
  const rival = input
    .guestCsrs()
    .filter(
      (other) =>
        other.metadata?.uid !== csr.metadata?.uid &&
        other.spec.signerName === KUBELET_CLIENT_SIGNER &&
        older(other, csr) &&
        !isDecided(other),
    )
    .find((other) => {
      const target = clientTarget(input, other);
      return target.ok && machineKey(target.machine) === machineKey(machine);
    });
  return rival?.metadata?.name;
}

/**
 * No Machine has the name. Cluster API copies a Machine's addresses from its infrastructure some time after
 * the host booted, so a kubelet can ask before its Machine shows its hostname: while a Machine of the pool
 * still has none (or the pool has none in the cache yet), the request waits, up to the grace.
 */
function unknownNodeName(
  input: DecisionInput,
  csr: k8s.V1CertificateSigningRequest,
  pool: PoolRef,
  node: string,
): Decision {
  const poolMachines = input.machines.filter(
    (m) => poolOf(m) === pool.name && m.spec.clusterName === input.cluster.name,
  );
  const pending = poolMachines.filter((m) => !m.status?.nodeRef && !isDeleting(m) && !hasHostAddress(m));
  const mayBeEarly = pending.length > 0 || poolMachines.length === 0;
  const age = ageMs(csr, input.now);
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
    `no Machine of pool ${pool.namespace}/${pool.name} is named "${node}" (by its Hostname, InternalDNS or ExternalDNS address)${waited}`,
    { pool },
  );
}
