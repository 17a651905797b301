import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type * as k8s from '#k8s';
import type { Machine } from '../../api/src/capi.js';
import { ANNOTATIONS, BOOTSTRAP_GROUP, bootstrapPoolGroup, LABELS } from '../../api/src/keys.js';
import { createCertificateRequest, type CertificateRequestOptions } from '../../test/bed/src/pki.js';
import {
  canonicalIp,
  decideCsr,
  KUBELET_CLIENT_SIGNER,
  KUBELET_SERVING_SIGNER,
  type Decision,
  type DecisionInput,
} from './csr-decision.js';

type MachineAddress = NonNullable<NonNullable<Machine['status']>['addresses']>[number];

const NS = 'tenant-a';
const NOW = Date.parse('2026-11-23T10:00:00Z');
const GRACE = 120_000;
const CLIENT_USAGES = ['digital signature', 'client auth'];
const SERVING_USAGES = ['digital signature', 'key encipherment', 'server auth'];

interface MachineOptions {
  addresses?: MachineAddress[];
  nodeRef?: string;
  approved?: string;
  cluster?: string;
  /** How long before NOW it was created (10 minutes unless told). */
  ageMs?: number;
  deleting?: boolean;
}

function machine(name: string, pool: string, opts: MachineOptions = {}): Machine {
  return {
    apiVersion: 'cluster.x-k8s.io/v1beta2',
    kind: 'Machine',
    metadata: {
      name,
      namespace: NS,
      creationTimestamp: new Date(NOW - (opts.ageMs ?? 600_000)),
      ...(opts.deleting ? { deletionTimestamp: new Date(NOW - 1_000) } : {}),
      labels: { [LABELS.nodePool]: pool },
      annotations: opts.approved ? { [ANNOTATIONS.approvedClientCsr]: opts.approved } : {},
    },
    spec: {
      clusterName: opts.cluster ?? 'guest',
      bootstrap: {},
      infrastructureRef: { apiGroup: 'infrastructure.kindling.dev', kind: 'LocalMachine', name },
    },
    status: { addresses: opts.addresses ?? [], ...(opts.nodeRef ? { nodeRef: { name: opts.nodeRef } } : {}) },
  };
}
const host = (h: string, ip: string): MachineAddress[] => [
  { type: 'Hostname', address: h },
  { type: 'InternalDNS', address: `${h}.internal` },
  { type: 'InternalIP', address: ip },
];

const MACHINES: Machine[] = [
  machine('a-1', 'a', { addresses: host('host-a1', '10.0.0.11') }),
  machine('a-2', 'a', { addresses: host('host-a2', '10.0.0.12'), nodeRef: 'host-a2' }),
  machine('a-3', 'a', { addresses: host('host-a3', '10.0.0.13'), approved: 'csr-old/uid-old' }),
  machine('a-4', 'a', { addresses: host('host-a4', '10.0.0.14'), approved: 'csr-1/uid-1' }),
  machine('a-5', 'a', {
    addresses: [...host('host-a5', '10.0.0.15'), { type: 'InternalIP', address: 'fd00::0:15' }],
    nodeRef: 'host-a5',
  }),
  machine('a-7', 'a', { addresses: host('host-a7', '10.0.0.17'), approved: 'csr-denied/uid-denied' }),
  machine('a-8', 'a', { addresses: host('host-a8', '10.0.0.18'), approved: 'csr-denied/uid-earlier' }),
  machine('a-6', 'a', { addresses: host('host-a6', '10.0.0.16') }),
  machine('b-1', 'b', { addresses: host('host-b1', '10.0.0.21') }),
  machine('x-1', 'x', { addresses: host('host-x1', '10.0.0.31'), cluster: 'other' }),
  machine('p-1', 'p'),
  machine('p-2', 'p', { addresses: host('host-p2', '10.0.0.42') }),
  machine('c-1', 'a', { addresses: host('host-c1', '10.0.0.51'), ageMs: 60_000 }),
  machine('c-2', 'a', { addresses: host('host-c2', '10.0.0.52'), ageMs: 3 * 3600_000 }),
  machine('d-1', 'a', { addresses: host('host-d1', '10.0.0.61'), deleting: true }),
  machine('d-2', 'a', { addresses: host('host-d2', '10.0.0.62'), nodeRef: 'host-d2', deleting: true }),
];
const GUEST_NODES = new Set(['host-a2', 'host-a5', 'host-a6', 'host-d2']);
/** CSRs still in the guest, by name: one claimed for a-7 and denied by someone else before Kindling approved it. */
const GUEST_CSRS: Record<string, k8s.V1CertificateSigningRequest> = {
  'csr-denied': {
    metadata: { name: 'csr-denied', uid: 'uid-denied' },
    spec: { signerName: KUBELET_CLIENT_SIGNER, request: '' },
    status: { conditions: [{ type: 'Denied', status: 'True' }] },
  },
};

interface CsrCase {
  name?: string;
  signer?: string;
  username?: string;
  groups?: string[];
  usages?: string[];
  request?: CertificateRequestOptions;
  /** spec.request as is (base64), for unparseable requests. */
  raw?: string;
  ageMs?: number;
}

async function csrOf(c: CsrCase): Promise<k8s.V1CertificateSigningRequest> {
  const pem =
    c.raw ??
    Buffer.from(
      (
        await createCertificateRequest(
          c.request ?? { commonName: 'system:node:host-a1', organizations: ['system:nodes'] },
        )
      ).csrPem,
    ).toString('base64');
  return {
    metadata: {
      name: c.name ?? 'csr-1',
      uid: c.name ? `uid-${c.name}` : 'uid-1',
      creationTimestamp: new Date(NOW - (c.ageMs ?? 1_000)),
    },
    spec: {
      signerName: c.signer ?? KUBELET_CLIENT_SIGNER,
      request: pem,
      username: c.username ?? 'system:bootstrap:abcdef',
      groups: c.groups ?? tokenOf('a'),
      usages: c.usages ?? CLIENT_USAGES,
    },
  };
}

/** Decides `csr` in a guest that also holds `others` (and the CSR itself). */
function decideAmong(
  csr: k8s.V1CertificateSigningRequest,
  others: readonly k8s.V1CertificateSigningRequest[] = [],
): Decision {
  const input: DecisionInput = {
    csr,
    cluster: { namespace: NS, name: 'guest' },
    machines: MACHINES,
    hasNode: (n) => GUEST_NODES.has(n),
    csrNamed: (n) => GUEST_CSRS[n],
    guestCsrs: () => [...Object.values(GUEST_CSRS), ...others, csr],
    now: NOW,
    graceMs: GRACE,
  };
  return decideCsr(input);
}

const decide = async (c: CsrCase): Promise<Decision> => decideAmong(await csrOf(c));

/** The groups of a Kindling bootstrap token of a pool. */
const tokenOf = (pool: string, namespace = NS): string[] => [
  'system:bootstrappers',
  BOOTSTRAP_GROUP,
  bootstrapPoolGroup(namespace, pool),
];

const node = (name: string, extra: Partial<CertificateRequestOptions> = {}): CertificateRequestOptions => ({
  commonName: `system:node:${name}`,
  organizations: ['system:nodes'],
  ...extra,
});
const fromNode = (name: string): Pick<CsrCase, 'signer' | 'username' | 'groups' | 'usages'> => ({
  signer: KUBELET_SERVING_SIGNER,
  username: `system:node:${name}`,
  groups: ['system:nodes', 'system:authenticated'],
  usages: SERVING_USAGES,
});

interface Row {
  when: string;
  csr: CsrCase;
  action: Decision['action'];
  reason?: string;
  /** The Machine the decision is about; null: none (the Event goes on the pool). */
  machine?: string | null;
  claim?: string | null;
  /** Whether the denial is recorded as the Machine's join failure. */
  ofJoin?: boolean;
  message?: RegExp;
}

const CLIENT_ROWS: Row[] = [
  {
    when: "the node name is the Hostname of a Machine of the token's pool with no Node",
    csr: { request: node('host-a1') },
    action: 'approve',
    reason: 'KubeletClientForMachine',
    machine: 'a-1',
    claim: 'csr-1/uid-1',
  },
  {
    when: "the node name is a Machine's InternalDNS address",
    csr: { request: node('host-a1.internal') },
    action: 'approve',
    machine: 'a-1',
  },
  {
    when: "the node name is a Machine's own name and not one of its addresses",
    csr: { request: node('a-1') },
    action: 'deny',
    reason: 'UnknownNodeName',
    machine: null,
  },
  {
    when: "the node name is a Machine of another pool than the token's",
    csr: { request: node('host-b1') },
    action: 'deny',
    reason: 'WrongPool',
    machine: null,
    ofJoin: false,
    message: /Machine tenant-a\/b-1 of pool "b", but the request came with a bootstrap token of pool "a"/,
  },
  {
    when: 'the Machine already has a Node',
    csr: { request: node('host-a2') },
    action: 'deny',
    reason: 'MachineHasNode',
    machine: 'a-2',
    ofJoin: true,
  },
  {
    when: 'the Machine already had another client CSR approved',
    csr: { request: node('host-a3') },
    action: 'deny',
    reason: 'MachineAlreadyApproved',
    machine: 'a-3',
    message: /request csr-old approved; a Machine joins once/,
  },
  {
    when: 'the Machine was claimed for a CSR that someone else denied before it was approved',
    csr: { request: node('host-a7') },
    action: 'approve',
    machine: 'a-7',
    claim: 'csr-1/uid-1',
  },
  {
    when: 'the Machine was claimed for an earlier CSR of a name now reused by a denied one',
    csr: { request: node('host-a8') },
    action: 'deny',
    reason: 'MachineAlreadyApproved',
    machine: 'a-8',
  },
  {
    when: 'the same CSR is decided again after the Machine was claimed for it',
    csr: { request: node('host-a4') },
    action: 'approve',
    machine: 'a-4',
    claim: null,
  },
  {
    when: 'no Machine has the node name and every Machine of the pool has its addresses',
    csr: { request: node('forged') },
    action: 'deny',
    reason: 'UnknownNodeName',
    message: /no Machine of pool tenant-a\/a is named "forged"/,
  },
  {
    when: 'no Machine has the name yet but one of the pool has no address, within the grace',
    csr: { request: node('host-p1'), groups: tokenOf('p') },
    action: 'wait',
    reason: 'MachineAddressesPending',
  },
  {
    when: 'no Machine has the name after the grace',
    csr: { request: node('host-p1'), groups: tokenOf('p'), ageMs: GRACE + 1 },
    action: 'deny',
    reason: 'UnknownNodeName',
    message: /after waiting 2m/,
  },
  {
    when: 'the pool has no Machine in the cache yet, within the grace',
    csr: { request: node('host-q1'), groups: tokenOf('q') },
    action: 'wait',
    reason: 'MachineAddressesPending',
  },
  {
    when: 'the guest already has a Node of that name though the Machine has no nodeRef yet',
    csr: { request: node('host-a6') },
    action: 'deny',
    reason: 'NodeExists',
    machine: 'a-6',
  },
  {
    when: 'the requester is not in a Kindling bootstrap group',
    csr: { groups: ['system:bootstrappers', 'system:bootstrappers:kubeadm:default-node-token'] },
    action: 'ignore',
  },
  {
    when: 'the requester has the Kindling group but no pool group',
    csr: { groups: [BOOTSTRAP_GROUP] },
    action: 'deny',
    reason: 'NoPoolGroup',
  },
  {
    when: 'the requester has a malformed pool group',
    csr: { groups: [BOOTSTRAP_GROUP, `${BOOTSTRAP_GROUP}:tenant-a`] },
    action: 'deny',
    reason: 'NoPoolGroup',
  },
  {
    when: "the requester is in two pools' groups",
    csr: { groups: [bootstrapPoolGroup(NS, 'a'), bootstrapPoolGroup(NS, 'b')] },
    action: 'deny',
    reason: 'AmbiguousPool',
  },
  {
    when: "the pool group names another namespace than the guest cluster's",
    csr: { groups: tokenOf('a', 'tenant-b') },
    action: 'deny',
    reason: 'ForeignNamespace',
  },
  {
    when: 'the Machine belongs to another guest cluster',
    csr: { request: node('host-x1'), groups: tokenOf('x') },
    action: 'deny',
    reason: 'WrongCluster',
    machine: null,
    ofJoin: false,
  },
  {
    when: "the subject's organization is not system:nodes",
    csr: { request: node('host-a1', { organizations: ['system:masters'] }) },
    action: 'deny',
    reason: 'InvalidSubject',
    message: /organization must be exactly system:nodes/,
  },
  {
    when: 'the subject has no organization',
    csr: { request: node('host-a1', { organizations: [] }) },
    action: 'deny',
    reason: 'InvalidSubject',
  },
  {
    when: 'the common name is not system:node:<name>',
    csr: { request: { commonName: 'admin', organizations: ['system:nodes'] } },
    action: 'deny',
    reason: 'InvalidSubject',
  },
  {
    when: "the usages are a server's",
    csr: { request: node('host-a1'), usages: SERVING_USAGES },
    action: 'deny',
    reason: 'InvalidUsages',
  },
  {
    when: 'the usages add one',
    csr: { request: node('host-a1'), usages: [...CLIENT_USAGES, 'server auth'] },
    action: 'deny',
    reason: 'InvalidUsages',
  },
  {
    when: 'the usages include key encipherment (an RSA key)',
    csr: { request: node('host-a1'), usages: ['digital signature', 'key encipherment', 'client auth'] },
    action: 'approve',
    machine: 'a-1',
  },
  {
    when: 'a client request carries a SAN',
    csr: { request: node('host-a1', { dnsNames: ['host-a1'] }) },
    action: 'deny',
    reason: 'ForbiddenNames',
  },
  {
    when: 'the request is not a certificate request',
    csr: { raw: Buffer.from('hello').toString('base64') },
    action: 'deny',
    reason: 'InvalidRequest',
  },
  { when: "the signer is not a kubelet's", csr: { signer: 'kubernetes.io/kube-apiserver-client' }, action: 'ignore' },
  {
    when: "the requester is in the pool's group but is a user, not a bootstrap token",
    csr: { username: 'alice' },
    action: 'deny',
    reason: 'NotBootstrapToken',
    machine: null,
    message: /"alice" is in the bootstrap group of pool tenant-a\/a but is not a bootstrap token/,
  },
  {
    when: 'the requester is a service account in the pool group',
    csr: { username: 'system:serviceaccount:kube-system:default' },
    action: 'deny',
    reason: 'NotBootstrapToken',
  },
  {
    when: 'the requester is named as a bootstrap token but is not in system:bootstrappers',
    csr: { groups: [BOOTSTRAP_GROUP, bootstrapPoolGroup(NS, 'a')] },
    action: 'deny',
    reason: 'NotBootstrapToken',
  },
  {
    when: 'the CSR was created before its Machine',
    csr: { request: node('host-c1'), ageMs: 75_000 },
    action: 'deny',
    reason: 'CreatedBeforeMachine',
    machine: 'c-1',
    message: /a request made before its Machine was not made by its host/,
  },
  {
    when: 'the CSR was created a few seconds before its Machine (clock skew)',
    csr: { request: node('host-c1'), ageMs: 65_000 },
    action: 'approve',
    machine: 'c-1',
  },
  {
    when: 'the CSR was created more than the join window after its Machine',
    csr: { request: node('host-c2') },
    action: 'deny',
    reason: 'CreatedAfterJoinWindow',
    machine: 'c-2',
    message: /a host joins within 2h/,
  },
  {
    when: 'the Machine is being deleted',
    csr: { request: node('host-d1') },
    action: 'deny',
    reason: 'MachineDeleting',
    machine: 'd-1',
  },
];

/** A node's own request: its identity is its client certificate's. */
const asNode = (name: string, request: CertificateRequestOptions = node(name)): CsrCase => ({
  username: `system:node:${name}`,
  groups: ['system:nodes', 'system:authenticated'],
  request,
});

const RENEWAL_ROWS: Row[] = [
  {
    when: 'a node renews its own client certificate and its live Machine is bound to its Node',
    csr: asNode('host-a2'),
    action: 'approve',
    reason: 'KubeletClientRenewal',
    machine: 'a-2',
    claim: null,
  },
  {
    when: "a node asks for a client certificate of another node's name",
    csr: asNode('host-a2', node('host-a5')),
    action: 'deny',
    reason: 'SubjectMismatch',
    machine: 'a-2',
    message: /node "host-a2" asks for a certificate of system:node:host-a5/,
  },
  {
    when: "the renewing node's Machine is being deleted",
    csr: asNode('host-d2'),
    action: 'deny',
    reason: 'MachineDeleting',
    machine: 'd-2',
  },
  {
    when: 'the Node exists but no Machine is bound to it yet, within the grace',
    csr: asNode('host-a6'),
    action: 'wait',
    reason: 'NodeNotBoundYet',
  },
  {
    when: 'the Node exists but no Machine is bound to it after the grace',
    csr: { ...asNode('host-a6'), ageMs: GRACE },
    action: 'deny',
    reason: 'NodeNotBound',
    machine: 'a-6',
    ofJoin: false,
  },
  {
    when: 'the renewing node has no Node in the guest, within the grace',
    csr: asNode('host-a1'),
    action: 'wait',
    reason: 'NodeNotSeenYet',
  },
  {
    when: 'the renewal carries a SAN',
    csr: asNode('host-a2', node('host-a2', { dnsNames: ['host-a2'] })),
    action: 'deny',
    reason: 'ForbiddenNames',
  },
  {
    when: 'the renewing node is no Machine of a Kindling pool',
    csr: asNode('control-plane-1'),
    action: 'ignore',
  },
  {
    when: "the renewing node is named like a Machine's own name, not its address",
    csr: asNode('a-1'),
    action: 'ignore',
  },
];

const SERVING_ROWS: Row[] = [
  {
    when: "the node's Machine is being deleted",
    csr: { ...fromNode('host-d2'), request: node('host-d2', { dnsNames: ['host-d2'] }) },
    action: 'deny',
    reason: 'MachineDeleting',
    machine: 'd-2',
  },
  {
    when: "every SAN is one of the Machine's addresses",
    csr: {
      ...fromNode('host-a2'),
      request: node('host-a2', { dnsNames: ['host-a2', 'host-a2.internal'], ipAddresses: ['10.0.0.12'] }),
    },
    action: 'approve',
    reason: 'KubeletServingForMachine',
    machine: 'a-2',
    claim: null,
  },
  {
    when: 'an IPv6 SAN is written differently from the address',
    csr: { ...fromNode('host-a5'), request: node('host-a5', { ipAddresses: ['fd00::15'] }) },
    action: 'approve',
    machine: 'a-5',
  },
  {
    when: "a SAN is not one of the Machine's addresses",
    csr: {
      ...fromNode('host-a2'),
      request: node('host-a2', { dnsNames: ['host-a2', 'api.bank.example'], ipAddresses: ['10.0.0.99'] }),
    },
    action: 'deny',
    reason: 'ForeignSAN',
    machine: 'a-2',
    message: /api\.bank\.example, 10\.0\.0\.99 are not among the addresses of Machine tenant-a\/a-2/,
  },
  {
    when: "a SAN is another Machine's address",
    csr: { ...fromNode('host-a2'), request: node('host-a2', { ipAddresses: ['10.0.0.11'] }) },
    action: 'deny',
    reason: 'ForeignSAN',
  },
  {
    when: 'the request has an email SAN',
    csr: { ...fromNode('host-a2'), request: node('host-a2', { dnsNames: ['host-a2'], emails: ['root@host-a2'] }) },
    action: 'deny',
    reason: 'ForbiddenNames',
  },
  {
    when: 'the request has no SAN',
    csr: { ...fromNode('host-a2'), request: node('host-a2') },
    action: 'deny',
    reason: 'NoSubjectAltNames',
  },
  {
    when: "a node asks for another node's name",
    csr: { ...fromNode('host-a2'), request: node('host-a5', { dnsNames: ['host-a2'] }) },
    action: 'deny',
    reason: 'SubjectMismatch',
  },
  {
    when: "the usages are a client's",
    csr: { ...fromNode('host-a2'), usages: CLIENT_USAGES, request: node('host-a2', { dnsNames: ['host-a2'] }) },
    action: 'deny',
    reason: 'InvalidUsages',
  },
  {
    when: 'the Node is not in the guest yet, within the grace',
    csr: { ...fromNode('host-a1'), request: node('host-a1', { dnsNames: ['host-a1'] }) },
    action: 'wait',
    reason: 'NodeNotSeenYet',
  },
  {
    when: 'the Node is not in the guest after the grace',
    csr: { ...fromNode('host-a1'), request: node('host-a1', { dnsNames: ['host-a1'] }), ageMs: GRACE },
    action: 'deny',
    reason: 'NodeNotFound',
    machine: 'a-1',
  },
  {
    when: 'the node is not a Machine of a Kindling pool',
    csr: { ...fromNode('control-plane-1'), request: node('control-plane-1', { dnsNames: ['control-plane-1'] }) },
    action: 'ignore',
  },
  {
    when: 'the node is a Machine of another guest cluster',
    csr: { ...fromNode('host-x1'), request: node('host-x1', { dnsNames: ['host-x1'] }) },
    action: 'ignore',
  },
  {
    when: 'the requester is not a node',
    csr: {
      ...fromNode('host-a2'),
      username: 'system:bootstrap:abcdef',
      groups: [BOOTSTRAP_GROUP, bootstrapPoolGroup(NS, 'a')],
      request: node('host-a2', { dnsNames: ['host-a2'] }),
    },
    action: 'ignore',
  },
];

/** The decision's fields a row can pin, flattened (undefined where the action has none). */
function flat(d: Decision): Pick<Row, 'reason' | 'machine' | 'claim' | 'ofJoin'> & { text: string } {
  if (d.action === 'ignore') return { text: d.why };
  const machine = 'machine' in d ? (d.machine?.metadata.name ?? null) : null;
  const claim = d.action === 'approve' ? (d.claim ?? null) : undefined;
  const ofJoin = d.action === 'deny' ? (d.ofJoin ?? false) : undefined;
  return { reason: d.reason, machine, claim, ofJoin, text: d.message };
}

function check(row: Row, d: Decision): void {
  assert.equal(d.action, row.action, JSON.stringify(d));
  const got = flat(d);
  for (const field of ['reason', 'machine', 'claim', 'ofJoin'] as const)
    if (row[field] !== undefined) assert.equal(got[field], row[field], field);
  if (row.message !== undefined) assert.match(got.text, row.message);
  if (d.action === 'deny') assert.ok(d.message.length > 20, `a denial says why: ${d.message}`);
}

describe('decideCsr: kubelet client certificates', () => {
  for (const row of CLIENT_ROWS) {
    it(`when ${row.when}, it should ${row.action}${row.reason ? ` (${row.reason})` : ''}`, async () =>
      check(row, await decide(row.csr)));
  }
});

describe('decideCsr: kubelet serving certificates', () => {
  for (const row of SERVING_ROWS) {
    it(`when ${row.when}, it should ${row.action}${row.reason ? ` (${row.reason})` : ''}`, async () =>
      check(row, await decide(row.csr)));
  }
});

describe('decideCsr: kubelet client certificate renewals', () => {
  for (const row of RENEWAL_ROWS) {
    it(`when ${row.when}, it should ${row.action}${row.reason ? ` (${row.reason})` : ''}`, async () =>
      check(row, await decide(row.csr)));
  }
});

describe('decideCsr: rival client CSRs for one Machine', () => {
  const rival = (name: string, ageMs: number, extra: Partial<CsrCase> = {}): Promise<k8s.V1CertificateSigningRequest> =>
    csrOf({ name, ageMs, request: node('host-a1'), ...extra });

  it('when two good CSRs ask for one waiting Machine, it should deny the younger and approve the older, whichever is decided first', async () => {
    const [old, young] = await Promise.all([rival('kubelet', 30_000), rival('attacker', 10_000)]);
    const denied = decideAmong(young, [old]);
    assert.equal(denied.action, 'deny');
    assert.deepEqual(
      { ...flat(denied), text: undefined },
      { reason: 'OlderRivalRequest', machine: 'a-1', claim: undefined, ofJoin: true, text: undefined },
    );
    assert.match(flat(denied).text, /the older pending request kubelet also asks to join as Machine tenant-a\/a-1/);
    const approved = decideAmong(old, [young]);
    assert.equal(approved.action, 'approve');
    assert.equal(flat(approved).claim, 'kubelet/uid-kubelet');
  });

  it('when two rivals were created in the same second, it should approve the first by name', async () => {
    const [b, a] = await Promise.all([rival('csr-b', 5_000), rival('csr-a', 5_000)]);
    assert.equal(decideAmong(a, [b]).action, 'approve');
    assert.equal(flat(decideAmong(b, [a])).reason, 'OlderRivalRequest');
  });

  it('when the older rival would be denied itself, it should approve the younger good one', async () => {
    const young = await rival('kubelet', 5_000);
    const others = await Promise.all([
      rival('not-a-token', 30_000, { username: 'alice' }),
      rival('other-pool', 30_000, { groups: tokenOf('b') }),
      rival('bad-usages', 30_000, { usages: SERVING_USAGES }),
    ]);
    assert.equal(decideAmong(young, others).action, 'approve');
  });

  it('when the older rival was already denied, it should approve the younger', async () => {
    const [old, young] = await Promise.all([rival('old', 30_000), rival('young', 5_000)]);
    old.status = { conditions: [{ type: 'Denied', status: 'True', reason: 'ByAdmin', message: 'no' }] };
    assert.equal(decideAmong(young, [old]).action, 'approve');
  });
});

describe('canonicalIp', () => {
  it('when the same address is written two ways, it should give one text', () => {
    assert.equal(canonicalIp('FD00:0::0:15'), canonicalIp('fd00::15'));
    assert.equal(canonicalIp('10.0.0.1'), '10.0.0.1');
    assert.notEqual(canonicalIp('10.0.0.1'), canonicalIp('10.0.0.10'));
  });
});
