/**
 * Requests a Kindling node makes with its own identity (`system:node:<name>` of `system:nodes`): the renewal of
 * its client certificate and its serving certificate. Both are approved only for the node's own name, while the
 * Node exists and its Machine is live; a node that is no Machine of this cluster's Kindling pools is left alone.
 */
import type * as k8s from '#k8s';
import type { Machine } from '../../api/src/capi.js';
import { formatDuration } from '../../support/src/config.js';
import {
  canonicalIp,
  checkKubeletRequest,
  CLIENT_USAGES,
  NODE_PREFIX,
  NODES_GROUP,
  sansOf,
  SERVING_USAGES,
  type Checked,
} from './csr-request.js';
import {
  ageMs,
  deny,
  ignore,
  isDeleting,
  machineKey,
  nodeNamesOf,
  type Decision,
  type DecisionInput,
  type WaitReason,
} from './csr-rules.js';

/** The node name of a requester that is a node, else undefined. */
function requestingNode(csr: k8s.V1CertificateSigningRequest): string | undefined {
  const { username = '', groups = [] } = csr.spec;
  return username.startsWith(NODE_PREFIX) && groups.includes(NODES_GROUP)
    ? username.slice(NODE_PREFIX.length)
    : undefined;
}

/** The Kindling Machine of a node of this cluster: the one whose nodeRef names it, else the one it is an address of. */
function machineOfNode(input: DecisionInput, node: string): Machine | undefined {
  const ours = input.machines.filter((m) => m.spec.clusterName === input.cluster.name);
  return ours.find((m) => m.status?.nodeRef?.name === node) ?? ours.find((m) => nodeNamesOf(m).has(node.toLowerCase()));
}

/** What a node's own request must be before its kind is looked at: its Machine, live, and its own name asked. */
function checkOwnRequest(
  input: DecisionInput,
  usages: string[][],
): { ok: true; machine: Machine; node: string; checked: Checked & { ok: true } } | { ok: false; decision: Decision } {
  const node = requestingNode(input.csr);
  if (node === undefined) return { ok: false, decision: ignore('the requester is not a node') };
  const machine = machineOfNode(input, node);
  if (!machine) return { ok: false, decision: ignore(`node "${node}" is not a Machine of a Kindling pool`) };
  const checked = checkKubeletRequest(input.csr, usages);
  if (!checked.ok) return { ok: false, decision: deny(checked.reason, checked.message, { machine }) };
  if (checked.node !== node) {
    const message = `node "${node}" asks for a certificate of ${NODE_PREFIX}${checked.node}`;
    return { ok: false, decision: deny('SubjectMismatch', message, { machine }) };
  }
  if (isDeleting(machine)) {
    const message = `Machine ${machineKey(machine)} of node "${node}" is being deleted`;
    return { ok: false, decision: deny('MachineDeleting', message, { machine }) };
  }
  return { ok: true, machine, node, checked };
}

/** A kubelet renewing its client certificate: approved while its Node exists and its live Machine's nodeRef names it. */
export function decideRenewal(input: DecisionInput): Decision {
  const own = checkOwnRequest(input, CLIENT_USAGES);
  if (!own.ok) return own.decision;
  const { machine, node } = own;
  const sans = sansOf(own.checked.request);
  if (sans.length > 0) {
    const message = `a kubelet client certificate carries no subject alternative names; this request has ${sans.join(', ')}`;
    return deny('ForbiddenNames', message, { machine });
  }
  if (!input.hasNode(node))
    return notYet(input, machine, 'NodeNotSeenYet', `Node "${node}" is not in the guest cluster`);
  if (machine.status?.nodeRef?.name !== node)
    return notYet(input, machine, 'NodeNotBoundYet', `Machine ${machineKey(machine)} has no nodeRef to Node "${node}"`);
  return {
    action: 'approve',
    reason: 'KubeletClientRenewal',
    message: `node "${node}" renews its own client certificate; it is the Node of live Machine ${machineKey(machine)}`,
    machine,
  };
}

export function decideServing(input: DecisionInput): Decision {
  const own = checkOwnRequest(input, SERVING_USAGES);
  if (!own.ok) return own.decision;
  const { machine, node } = own;
  const { dnsNames, ipAddresses, otherNames } = own.checked.request;
  if (otherNames.length > 0) {
    const message = `a kubelet serving certificate carries DNS names and IP addresses only; this request has ${otherNames.join(', ')}`;
    return deny('ForbiddenNames', message, { machine });
  }
  if (dnsNames.length + ipAddresses.length === 0)
    return deny('NoSubjectAltNames', 'a kubelet serving certificate needs at least one DNS name or IP address', {
      machine,
    });
  if (!input.hasNode(node))
    return notYet(input, machine, 'NodeNotSeenYet', `Node "${node}" is not in the guest cluster`);
  return checkSans(machine, node, own.checked.request);
}

const DENIAL_OF: Record<Exclude<WaitReason, 'MachineAddressesPending'>, 'NodeNotFound' | 'NodeNotBound'> = {
  NodeNotSeenYet: 'NodeNotFound',
  NodeNotBoundYet: 'NodeNotBound',
};

/** The caches may lag the node's registration: wait up to the grace, then deny. */
function notYet(input: DecisionInput, machine: Machine, reason: keyof typeof DENIAL_OF, what: string): Decision {
  const age = ageMs(input.csr, input.now);
  if (age < input.graceMs)
    return { action: 'wait', reason, message: `${what} (yet)`, retryAfterMs: Math.min(5_000, input.graceMs - age) };
  return deny(DENIAL_OF[reason], `${what} (waited ${formatDuration(input.graceMs)})`, { machine });
}

function checkSans(machine: Machine, node: string, request: { dnsNames: string[]; ipAddresses: string[] }): Decision {
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
