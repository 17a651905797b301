/**
 * The CSR approver on the real test bed: a management cluster with the Kindling and real Cluster API CRDs, and a
 * guest control plane as a hosted control plane runs it (bootstrap-token authentication, Node,RBAC,
 * NodeRestriction, csrsigning with the guest CA, and the built-in csrapproving that approves nothing of
 * Kindling's, as nothing binds its bootstrap group to an auto-approval role). The nodepool-controller runs
 * in-process; Machines with addresses stand where Cluster API would put them; CSRs are made with real
 * bootstrap-token identities, and a kubelet's serving CSR with the client certificate the guest issued.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import * as k8s from '#k8s';
import { Registry } from 'prom-client';
import {
  startCluster,
  installCapiCrds,
  installKindlingCrds,
  eventually,
  type Cluster,
} from '../../test/bed/src/index.js';
import { createLogger } from '../../support/src/logger.js';
import { createCertificateRequest, type CertificateRequestOptions } from '../../test/bed/src/pki.js';
import { ANNOTATIONS, BOOTSTRAP_GROUP, bootstrapPoolGroup, LABELS } from '../../api/src/keys.js';
import type { Machine } from '../../api/src/capi.js';
import { nodePoolFixture } from '../../api/testing/nodepool.js';
import { createNodePoolController, type NodePoolController } from './controller.js';
import { KUBELET_CLIENT_SIGNER, KUBELET_SERVING_SIGNER } from './csr-decision.js';
import { BOOTSTRAPPER_BINDING, NODE_BOOTSTRAPPER_ROLE } from './guest-setup.js';

type MachineAddress = NonNullable<NonNullable<Machine['status']>['addresses']>[number];

const NS = 'default';
const CA = '-----BEGIN CERTIFICATE-----\nMIIBtestca\n-----END CERTIFICATE-----\n';
const CONFIG = {
  ignition: { endpoint: 'ignition.kindling.test:9443', caPem: CA },
  tokenGraceMs: 2 * 3600_000,
  maxSkewMinors: 3,
};
const MERGE = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch);
const CAPI = { group: 'cluster.x-k8s.io', version: 'v1beta2', namespace: NS, plural: 'machines' };
const CLIENT_USAGES = ['digital signature', 'client auth'];
const SERVING_USAGES = ['digital signature', 'server auth'];
const b64 = (s: string): string => Buffer.from(s).toString('base64');

const host = (name: string, ip: string): MachineAddress[] => [
  { type: 'Hostname', address: name },
  { type: 'InternalIP', address: ip },
];

/** A guest kubeconfig for a bootstrap token or a client certificate. */
function guestKubeConfig(guest: Cluster, user: { token?: string; certPem?: string; keyPem?: string }): k8s.KubeConfig {
  const kc = new k8s.KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'guest', server: guest.server, caData: b64(guest.ca.certPem) }],
    users: [
      {
        name: 'u',
        ...(user.token
          ? { token: user.token }
          : { certData: b64(user.certPem ?? ''), keyData: b64(user.keyPem ?? '') }),
      },
    ],
    contexts: [{ name: 'c', cluster: 'guest', user: 'u' }],
    currentContext: 'c',
  });
  return kc;
}

/** A bootstrap token Secret in the guest's kube-system (as the ignition server mints them), and its user's kubeconfig. */
async function bootstrapToken(guest: Cluster, groups: string[]): Promise<{ id: string; kc: k8s.KubeConfig }> {
  const id = randomBytes(3).toString('hex');
  const secret = randomBytes(8).toString('hex');
  await guest.kubeConfig.makeApiClient(k8s.CoreV1Api).createNamespacedSecret({
    namespace: 'kube-system',
    body: {
      metadata: { name: `bootstrap-token-${id}` },
      type: 'bootstrap.kubernetes.io/token',
      stringData: {
        'token-id': id,
        'token-secret': secret,
        'usage-bootstrap-authentication': 'true',
        'auth-extra-groups': groups.join(','),
        expiration: new Date(Date.now() + 3600_000).toISOString(),
      },
    },
  });
  return { id, kc: guestKubeConfig(guest, { token: `${id}.${secret}` }) };
}

interface Kind {
  signerName: string;
  usages: string[];
}
const CLIENT: Kind = { signerName: KUBELET_CLIENT_SIGNER, usages: CLIENT_USAGES };
const SERVING: Kind = { signerName: KUBELET_SERVING_SIGNER, usages: SERVING_USAGES };

/** Creates a CSR as the kubeconfig's user; returns the private key it was made for. */
async function submit(
  kc: k8s.KubeConfig,
  name: string,
  { signerName, usages }: Kind,
  request: CertificateRequestOptions,
): Promise<string> {
  const { csrPem, keyPem } = await createCertificateRequest(request);
  await kc.makeApiClient(k8s.CertificatesV1Api).createCertificateSigningRequest({
    body: { metadata: { name }, spec: { signerName, usages, request: b64(csrPem) } },
  });
  return keyPem;
}

const nodeSubject = (name: string, extra: Partial<CertificateRequestOptions> = {}): CertificateRequestOptions => ({
  commonName: `system:node:${name}`,
  organizations: ['system:nodes'],
  ...extra,
});
const conditionOf = (
  csr: k8s.V1CertificateSigningRequest,
  type: string,
): k8s.V1CertificateSigningRequestCondition | undefined => csr.status?.conditions?.find((c) => c.type === type);

describe('CSR approver on the real test bed', () => {
  let mgmt: Cluster;
  let guest: Cluster;
  let controller: NodePoolController;
  let certificates: k8s.CertificatesV1Api;
  let custom: k8s.CustomObjectsApi;
  let tokenA: { id: string; kc: k8s.KubeConfig };
  /** Kubelets that joined (their issued client certificate and key), by node name. */
  const kubelets = new Map<string, k8s.KubeConfig>();
  const registry = new Registry();
  const log = createLogger({ name: 'csr-approver-test', level: process.env['TEST_LOG_LEVEL'] ?? 'error' });

  const createMachine = async (name: string, pool: string, addresses: MachineAddress[]): Promise<void> => {
    const body = {
      apiVersion: 'cluster.x-k8s.io/v1beta2',
      kind: 'Machine',
      metadata: { name, labels: { [LABELS.nodePool]: pool, [LABELS.capiClusterName]: 'guest' } },
      spec: {
        clusterName: 'guest',
        bootstrap: { dataSecretName: `user-data-${pool}` },
        infrastructureRef: { apiGroup: 'infrastructure.kindling.dev', kind: 'LocalMachine', name },
      },
    };
    await custom.createNamespacedCustomObject({ ...CAPI, body });
    await custom.patchNamespacedCustomObjectStatus({ ...CAPI, name, body: { status: { addresses } } }, MERGE);
  };
  const readMachine = async (name: string): Promise<Machine> =>
    (await custom.getNamespacedCustomObject({ ...CAPI, name })) as Machine;

  /** Waits until the CSR is Approved or Denied and returns it. */
  const decided = (name: string): Promise<k8s.V1CertificateSigningRequest> =>
    eventually(`CSR ${name} to be decided`, async () => {
      const csr = await certificates.readCertificateSigningRequest({ name });
      return (conditionOf(csr, 'Approved') ?? conditionOf(csr, 'Denied')) ? csr : undefined;
    });

  const eventsOf = async (kind: string, name: string): Promise<k8s.CoreV1Event[]> =>
    (
      await mgmt.kubeConfig.makeApiClient(k8s.CoreV1Api).listNamespacedEvent({
        namespace: NS,
        fieldSelector: `involvedObject.kind=${kind},involvedObject.name=${name}`,
      })
    ).items;

  const decisions = async (): Promise<Record<string, number>> => {
    const metric = await registry.getSingleMetric('kindling_csr_decisions_total')?.get();
    return Object.fromEntries(
      (metric?.values ?? []).map((v) => [`${v.labels['decision'] ?? ''}/${v.labels['reason'] ?? ''}`, v.value]),
    );
  };

  before(async () => {
    mgmt = await startCluster({ name: 'mgmt', controllerManager: false });
    [guest] = await Promise.all([
      startCluster({ name: 'guest', nodeAuth: true, management: { cluster: mgmt, namespace: NS } }),
      installKindlingCrds(mgmt),
      installCapiCrds(mgmt),
    ]);
    certificates = guest.kubeConfig.makeApiClient(k8s.CertificatesV1Api);
    custom = mgmt.kubeConfig.makeApiClient(k8s.CustomObjectsApi);
    const objects = k8s.KubernetesObjectApi.makeApiClient(mgmt.kubeConfig);
    for (const name of ['pool-a', 'pool-b'])
      await objects.create(nodePoolFixture(name, NS, (p) => (p.spec.replicas = 0)));
    await createMachine('a-1', 'pool-a', host('host-a1', '10.0.0.11'));
    await createMachine('a-2', 'pool-a', host('host-a2', '10.0.0.12'));
    await createMachine('b-1', 'pool-b', host('host-b1', '10.0.0.21'));
    controller = createNodePoolController({
      kubeConfig: mgmt.kubeConfig,
      namespaces: [NS],
      log,
      config: CONFIG,
      registry,
    });
    await controller.start();
    tokenA = await bootstrapToken(guest, [BOOTSTRAP_GROUP, bootstrapPoolGroup(NS, 'pool-a')]);
  });
  after(async () => {
    await controller?.stop();
    await Promise.all([guest?.stop(), mgmt?.stop()]);
  });

  it("when a NodePool names the guest cluster, it should let Kindling's bootstrap group create CSRs and nothing else", async () => {
    const rbac = guest.kubeConfig.makeApiClient(k8s.RbacAuthorizationV1Api);
    const binding = await eventually('the bootstrapper binding', () =>
      rbac.readClusterRoleBinding({ name: BOOTSTRAPPER_BINDING }),
    );
    assert.deepEqual(
      { ...binding.roleRef },
      { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: NODE_BOOTSTRAPPER_ROLE },
    );
    assert.deepEqual(
      binding.subjects?.map((s) => [s.kind, s.name]),
      [['Group', BOOTSTRAP_GROUP]],
    );
    assert.ok(
      binding.metadata?.managedFields?.some(
        (m) => m.manager === 'kindling-nodepool-controller' && m.operation === 'Apply',
      ),
      'applied server-side',
    );
    const sar = guest.kubeConfig.makeApiClient(k8s.AuthorizationV1Api);
    const can = async (attrs: k8s.V1ResourceAttributes): Promise<boolean> =>
      (
        await sar.createSubjectAccessReview({
          body: {
            spec: {
              user: `system:bootstrap:${tokenA.id}`,
              groups: [
                'system:bootstrappers',
                BOOTSTRAP_GROUP,
                bootstrapPoolGroup(NS, 'pool-a'),
                'system:authenticated',
              ],
              resourceAttributes: attrs,
            },
          },
        })
      ).status?.allowed ?? false;
    const csrs = { group: 'certificates.k8s.io', resource: 'certificatesigningrequests' };
    assert.equal(await can({ ...csrs, verb: 'create' }), true);
    // What the built-in csrapproving checks before approving a bootstrap CSR by itself.
    assert.equal(await can({ ...csrs, verb: 'create', subresource: 'nodeclient' }), false);
    assert.equal(await can({ ...csrs, verb: 'update', subresource: 'approval' }), false);
    assert.equal(await can({ group: '', resource: 'nodes', verb: 'create' }), false);
    assert.equal(await can({ group: '', resource: 'secrets', verb: 'list' }), false);
  });

  it("when pool A's bootstrap token asks for the node name of a Machine of pool B, it should deny it, write nothing on that Machine and say so on pool A", async () => {
    await eventually('the bootstrapper binding', () =>
      guest.kubeConfig.makeApiClient(k8s.RbacAuthorizationV1Api).readClusterRoleBinding({ name: BOOTSTRAPPER_BINDING }),
    );
    await submit(tokenA.kc, 'a-asks-for-b', CLIENT, nodeSubject('host-b1'));
    const csr = await decided('a-asks-for-b');
    const denied = conditionOf(csr, 'Denied');
    assert.equal(denied?.reason, 'WrongPool');
    assert.match(
      denied?.message ?? '',
      /Machine default\/b-1 of pool "pool-b", but the request came with a bootstrap token of pool "pool-a"/,
    );
    assert.equal(csr.status?.certificate, undefined);
    const event = await eventually('an Event on NodePool pool-a', async () =>
      (await eventsOf('NodePool', 'pool-a')).find((e) => e.message?.includes('a-asks-for-b')),
    );
    assert.match(event.message ?? '', /a-asks-for-b .* denied \(WrongPool\)/);
    assert.equal(event.type, 'Warning');
    // A token of pool A writes nothing on pool B's Machine: neither a claim, nor a join failure, nor an Event.
    const b1 = await readMachine('b-1');
    assert.equal(b1.metadata.annotations?.[ANNOTATIONS.approvedClientCsr], undefined);
    assert.equal(b1.metadata.annotations?.[ANNOTATIONS.joinFailure], undefined);
    assert.deepEqual(await eventsOf('Machine', 'b-1'), []);
  });

  it('when a bootstrap token asks for a node name no Machine has, it should deny it and say so on the pool', async () => {
    await submit(tokenA.kc, 'forged-name', CLIENT, nodeSubject('kube-apiserver'));
    const denied = conditionOf(await decided('forged-name'), 'Denied');
    assert.equal(denied?.reason, 'UnknownNodeName');
    assert.match(denied?.message ?? '', /no Machine of pool default\/pool-a is named "kube-apiserver"/);
    await eventually('an Event on NodePool pool-a', async () =>
      (await eventsOf('NodePool', 'pool-a')).some(
        (e) => e.reason === 'CSRDenied' && e.message?.includes('forged-name'),
      ),
    );
  });

  it("when a requester is not one of Kindling's bootstrap tokens, it should leave the CSR pending for others", async () => {
    const rbac = guest.kubeConfig.makeApiClient(k8s.RbacAuthorizationV1Api);
    const group = 'system:bootstrappers:someone-else';
    await rbac.createClusterRoleBinding({
      body: {
        metadata: { name: 'someone-else' },
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: NODE_BOOTSTRAPPER_ROLE },
        subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'Group', name: group }],
      },
    });
    const other = await bootstrapToken(guest, [group]);
    await eventually('the other token to create its CSR', async () => {
      await submit(other.kc, 'someone-elses', CLIENT, nodeSubject('host-a2'));
      return true;
    });
    // A Kindling CSR made after it is decided; by then the approver has seen the other one too.
    await submit(tokenA.kc, 'after-someone-elses', CLIENT, nodeSubject('not-a-machine'));
    await decided('after-someone-elses');
    await controller.approver.queue.drained();
    const csr = await certificates.readCertificateSigningRequest({ name: 'someone-elses' });
    assert.deepEqual(csr.status?.conditions ?? [], []);
  });

  it("when pool A's token asks for its own Machine that has no Node, it should record the CSR on the Machine, approve it, and the guest should issue the certificate", async () => {
    const keyPem = await submit(tokenA.kc, 'a-1-client', CLIENT, nodeSubject('host-a1'));
    const approved = conditionOf(await decided('a-1-client'), 'Approved');
    assert.equal(
      approved?.reason,
      'KubeletClientForMachine',
      'approved by Kindling, not by the built-in csrapproving (AutoApproved)',
    );
    const machine = await readMachine('a-1');
    const csr = await certificates.readCertificateSigningRequest({ name: 'a-1-client' });
    assert.equal(
      machine.metadata.annotations?.[ANNOTATIONS.approvedClientCsr],
      `a-1-client/${csr.metadata?.uid ?? ''}`,
    );
    const issued = await eventually(
      'the certificate from csrsigning',
      async () => (await certificates.readCertificateSigningRequest({ name: 'a-1-client' })).status?.certificate,
    );
    const certPem = Buffer.from(issued, 'base64').toString();
    // The issued certificate authenticates the kubelet as its node: it registers its own Node (NodeRestriction).
    const kubelet = guestKubeConfig(guest, { certPem, keyPem });
    await kubelet.makeApiClient(k8s.CoreV1Api).createNode({ body: { metadata: { name: 'host-a1' } } });
    kubelets.set('host-a1', kubelet);
    const events = await eventually('an Event on Machine a-1', async () =>
      (await eventsOf('Machine', 'a-1')).filter((e) => e.reason === 'CSRApproved'),
    );
    assert.equal(events[0]?.type, 'Normal');
    assert.equal((await decisions())['approved/KubeletClientForMachine'], 1);
  });

  it('when a second client CSR names a Machine that already had one approved, it should deny it', async () => {
    await submit(tokenA.kc, 'a-1-again', CLIENT, nodeSubject('host-a1'));
    const denied = conditionOf(await decided('a-1-again'), 'Denied');
    assert.equal(denied?.reason, 'MachineAlreadyApproved');
    assert.match(denied?.message ?? '', /already had its client certificate request a-1-client approved/);
    const a1 = await readMachine('a-1');
    assert.equal(a1.metadata.annotations?.[ANNOTATIONS.approvedClientCsr]?.split('/')[0], 'a-1-client');
    assert.match(
      a1.metadata.annotations?.[ANNOTATIONS.joinFailure] ?? '',
      /a-1-again denied \(MachineAlreadyApproved\)/,
    );
  });

  it('when a bootstrap token asks for the name of a Node the guest already has, it should deny it (the Node read when deciding)', async () => {
    await createMachine('a-4', 'pool-a', host('host-a4', '10.0.0.14'));
    // The Node registered without a client certificate from Kindling: whoever holds it is that node already.
    await guest.kubeConfig.makeApiClient(k8s.CoreV1Api).createNode({ body: { metadata: { name: 'host-a4' } } });
    await submit(tokenA.kc, 'a-4-taken', CLIENT, nodeSubject('host-a4'));
    const denied = conditionOf(await decided('a-4-taken'), 'Denied');
    assert.equal(denied?.reason, 'NodeExists');
    assert.match(denied?.message ?? '', /the guest cluster already has a Node "host-a4"/);
    assert.equal((await readMachine('a-4')).metadata.annotations?.[ANNOTATIONS.approvedClientCsr], undefined);
  });

  it("when the joined kubelet asks for a serving certificate, it should approve its Machine's addresses and deny a foreign name", async () => {
    const kubelet = kubelets.get('host-a1');
    assert.ok(kubelet, 'the kubelet joined in the approval case');
    await submit(
      kubelet,
      'a-1-serving',
      SERVING,
      nodeSubject('host-a1', { dnsNames: ['host-a1'], ipAddresses: ['10.0.0.11'] }),
    );
    assert.equal(conditionOf(await decided('a-1-serving'), 'Approved')?.reason, 'KubeletServingForMachine');
    await submit(
      kubelet,
      'a-1-serving-foreign',
      SERVING,
      nodeSubject('host-a1', { dnsNames: ['host-a1', 'kubernetes.default.svc'] }),
    );
    const denied = conditionOf(await decided('a-1-serving-foreign'), 'Denied');
    assert.equal(denied?.reason, 'ForeignSAN');
    assert.match(denied?.message ?? '', /kubernetes\.default\.svc is not among the addresses of Machine default\/a-1/);
    // A decision is counted once the approver has its write's answer, which can come after the test reads the CSR.
    const counts = await eventually('the serving decisions counted', async () => {
      const c = await decisions();
      return c['approved/KubeletServingForMachine'] !== undefined && c['denied/ForeignSAN'] !== undefined
        ? c
        : undefined;
    });
    assert.equal(counts['approved/KubeletServingForMachine'], 1);
    assert.equal(counts['denied/ForeignSAN'], 1);
    assert.equal(counts['denied/WrongPool'], 1);
  });
  it("when the joined kubelet renews its client certificate, it should approve it as Kindling, and the guest should refuse its request for another node's name", async () => {
    const kubelet = kubelets.get('host-a1');
    assert.ok(kubelet, 'the kubelet joined in the approval case');
    // Cluster API links a Machine to its Node; the test bed runs no Cluster API controllers.
    await custom.patchNamespacedCustomObjectStatus(
      { ...CAPI, name: 'a-1', body: { status: { nodeRef: { name: 'host-a1' } } } },
      MERGE,
    );
    // The guest's RBAC lets a node create CSRs (the Node authorizer), but grants no auto-approval of them.
    const sar = guest.kubeConfig.makeApiClient(k8s.AuthorizationV1Api);
    const nodeCan = async (subresource?: string): Promise<boolean> =>
      (
        await sar.createSubjectAccessReview({
          body: {
            spec: {
              user: 'system:node:host-a1',
              groups: ['system:nodes', 'system:authenticated'],
              resourceAttributes: {
                group: 'certificates.k8s.io',
                resource: 'certificatesigningrequests',
                verb: 'create',
                ...(subresource ? { subresource } : {}),
              },
            },
          },
        })
      ).status?.allowed ?? false;
    assert.equal(await nodeCan(), true);
    assert.equal(await nodeCan('selfnodeclient'), false);
    const keyPem = await submit(kubelet, 'a-1-renewal', CLIENT, nodeSubject('host-a1'));
    const approved = conditionOf(await decided('a-1-renewal'), 'Approved');
    assert.equal(approved?.reason, 'KubeletClientRenewal', 'approved by Kindling, not by the built-in csrapproving');
    const issued = await eventually(
      'the renewed certificate',
      async () => (await certificates.readCertificateSigningRequest({ name: 'a-1-renewal' })).status?.certificate,
    );
    const renewed = guestKubeConfig(guest, { certPem: Buffer.from(issued, 'base64').toString(), keyPem });
    const self = await renewed.makeApiClient(k8s.CoreV1Api).readNode({ name: 'host-a1' });
    assert.equal(self.metadata?.name, 'host-a1');
    // NodeRestriction refuses it before Kindling sees it; the decision's SubjectMismatch covers a guest without it.
    await assert.rejects(submit(kubelet, 'a-1-renews-a-2', CLIENT, nodeSubject('host-a2')), (err: unknown) => {
      assert.equal((err as k8s.ApiException<unknown>).code, 403);
      return true;
    });
    const a1 = await readMachine('a-1');
    assert.equal(a1.metadata.annotations?.[ANNOTATIONS.approvedClientCsr]?.split('/')[0], 'a-1-client');
  });

  it('when two CSRs wait for one Machine and the younger is decided first, it should deny the younger and approve the older', async () => {
    // No addresses yet: both requests wait for Cluster API to copy them.
    await createMachine('a-3', 'pool-a', []);
    await submit(tokenA.kc, 'a-3-kubelet', CLIENT, nodeSubject('host-a3'));
    // Creation times are whole seconds: the rival is younger by its time, not only by its name.
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    await submit(tokenA.kc, 'a-3-rival', CLIENT, nodeSubject('host-a3'));
    await custom.patchNamespacedCustomObjectStatus(
      { ...CAPI, name: 'a-3', body: { status: { addresses: host('host-a3', '10.0.0.13') } } },
      MERGE,
    );
    // Once the cache has the addresses, an update queues the younger at once while the older waits for its retry
    // (up to 5 s): the younger is decided first.
    await new Promise((resolve) => setTimeout(resolve, 300));
    await certificates.patchCertificateSigningRequest(
      { name: 'a-3-rival', body: { metadata: { labels: { nudged: 'true' } } } },
      MERGE,
    );
    const rival = conditionOf(await decided('a-3-rival'), 'Denied');
    assert.equal(rival?.reason, 'OlderRivalRequest');
    assert.match(
      rival?.message ?? '',
      /the older pending request a-3-kubelet also asks to join as Machine default\/a-3/,
    );
    const approved = conditionOf(await decided('a-3-kubelet'), 'Approved');
    assert.equal(approved?.reason, 'KubeletClientForMachine');
    const a3 = await readMachine('a-3');
    assert.equal(a3.metadata.annotations?.[ANNOTATIONS.approvedClientCsr]?.split('/')[0], 'a-3-kubelet');
  });
});
