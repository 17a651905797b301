/**
 * The guest profile of the test bed (`nodeAuth`, `scheduler`) is the real thing: bootstrap tokens authenticate
 * and may create CSRs only when their group is bound, the built-in csrapproving leaves bootstrap CSRs alone
 * unless a group is bound to auto-approval, csrsigning signs approved ones with the cluster CA, the Node
 * authorizer and NodeRestriction hold a kubelet to its own Node, tokencleaner removes expired tokens, and the
 * real kube-scheduler binds Pods to Nodes that KWOK keeps Ready.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import * as k8s from '#k8s';
import { createCertificateRequest, loadCertificateAuthority, verifyCertificate, type KeyPairPem } from './pki.js';
import { startCluster, kubeconfigFor, type Cluster } from './cluster.js';
import { eventually } from './eventually.js';
import { bindGroup, createBootstrapToken, decideCsr, tokenKubeconfigYaml } from './node-auth.js';

const KINDLING_GROUP = 'system:bootstrappers:kindling';
const KUBELET_CLIENT_SIGNER = 'kubernetes.io/kube-apiserver-client-kubelet';

function clientWith(kubeconfigYaml: string): k8s.KubeConfig {
  const kc = new k8s.KubeConfig();
  kc.loadFromString(kubeconfigYaml);
  return kc;
}

async function kubeletCsr(kc: k8s.KubeConfig, name: string, node: string): Promise<k8s.V1CertificateSigningRequest> {
  const { csrPem } = await createCertificateRequest({
    commonName: `system:node:${node}`,
    organizations: ['system:nodes'],
  });
  return kc.makeApiClient(k8s.CertificatesV1Api).createCertificateSigningRequest({
    body: {
      metadata: { name },
      spec: {
        request: Buffer.from(csrPem).toString('base64'),
        signerName: KUBELET_CLIENT_SIGNER,
        usages: ['digital signature', 'client auth'],
      },
    },
  });
}

const code = (expected: number) => (err: { code?: number }) => err.code === expected;

describe('test bed: a guest control plane with node authentication', () => {
  let cluster: Cluster;
  let admin: k8s.KubeConfig;

  before(async () => {
    cluster = await startCluster({ name: 'hosted', nodeAuth: true, kwok: true, scheduler: true });
    admin = cluster.kubeConfig;
    await bindGroup(cluster, KINDLING_GROUP, 'system:node-bootstrapper');
  });
  after(() => cluster?.stop());

  it('when a bootstrap token of a bound group is used, it should authenticate it and accept a kubelet client CSR; unbound or unknown tokens are refused', async () => {
    const token = await createBootstrapToken(cluster, {
      groups: [KINDLING_GROUP, `${KINDLING_GROUP}:tenants:pool-a`],
      expiresInMs: 3_600_000,
    });
    const csr = await kubeletCsr(clientWith(tokenKubeconfigYaml(cluster, token.token)), 'bootstrap-1', 'a');
    assert.equal(csr.spec.username, token.username);
    assert.ok(csr.spec.groups?.includes(`${KINDLING_GROUP}:tenants:pool-a`), `groups: ${csr.spec.groups?.join(',')}`);

    const unbound = await createBootstrapToken(cluster, { groups: ['system:bootstrappers:other'] });
    await assert.rejects(
      kubeletCsr(clientWith(tokenKubeconfigYaml(cluster, unbound.token)), 'bootstrap-unbound', 'a'),
      code(403),
    );
    await assert.rejects(
      kubeletCsr(clientWith(tokenKubeconfigYaml(cluster, `${token.id}.0000000000000000`)), 'bootstrap-forged', 'a'),
      code(401),
    );
  });

  it("when a bootstrap CSR waits, the built-in csrapproving should leave it, and an administrator's approval should get it signed by the cluster CA", async () => {
    const certificates = admin.makeApiClient(k8s.CertificatesV1Api);
    // The control: a group bound to auto-approval gets its CSR approved by csrapproving, so it is running.
    const autoGroup = 'system:bootstrappers:auto';
    await bindGroup(cluster, autoGroup, 'system:node-bootstrapper');
    await bindGroup(cluster, autoGroup, 'system:certificates.k8s.io:certificatesigningrequests:nodeclient');
    const auto = await createBootstrapToken(cluster, { groups: [autoGroup] });
    const kindling = await createBootstrapToken(cluster, { groups: [KINDLING_GROUP] });
    await kubeletCsr(clientWith(tokenKubeconfigYaml(cluster, kindling.token)), 'kindling-b', 'b');
    await kubeletCsr(clientWith(tokenKubeconfigYaml(cluster, auto.token)), 'auto-c', 'c');
    const approvedAuto = await eventually(
      "csrapproving to approve the auto-approval group's CSR",
      async () => {
        const c = await certificates.readCertificateSigningRequest({ name: 'auto-c' });
        return c.status?.conditions?.find((x) => x.type === 'Approved');
      },
      60_000,
    );
    assert.equal(approvedAuto.reason, 'AutoApproved');
    const waiting = await certificates.readCertificateSigningRequest({ name: 'kindling-b' });
    assert.deepEqual(waiting.status?.conditions ?? [], [], 'csrapproving approved a Kindling bootstrap CSR by itself');

    await decideCsr(cluster, 'kindling-b', { approve: true });
    const issued = await eventually(
      'csrsigning to issue the certificate',
      async () => {
        const c = await certificates.readCertificateSigningRequest({ name: 'kindling-b' });
        return c.status?.certificate;
      },
      60_000,
    );
    const info = await verifyCertificate(Buffer.from(issued, 'base64').toString(), cluster.ca.certPem);
    assert.equal(info.commonName, 'system:node:b');
    assert.deepEqual(info.organizations, ['system:nodes']);
  });

  it("when a kubelet writes Nodes, it should create and patch its own and be refused another's", async () => {
    const ca = await loadCertificateAuthority(cluster.ca);
    const credentials: KeyPairPem = await ca.issue({
      commonName: 'system:node:node-a',
      organizations: ['system:nodes'],
      usage: 'client',
    });
    const kubelet = clientWith(kubeconfigFor('hosted', cluster.server, cluster.ca.certPem, credentials)).makeApiClient(
      k8s.CoreV1Api,
    );
    const adminCore = admin.makeApiClient(k8s.CoreV1Api);
    const merge = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch);

    await kubelet.createNode({
      body: { metadata: { name: 'node-a', labels: { 'kubernetes.io/hostname': 'node-a' } } },
    });
    await kubelet.patchNode({ name: 'node-a', body: { metadata: { labels: { 'example.com/mine': 'yes' } } } }, merge);
    await assert.rejects(kubelet.createNode({ body: { metadata: { name: 'node-b' } } }), code(403));
    await adminCore.createNode({ body: { metadata: { name: 'node-b' } } });
    await assert.rejects(
      kubelet.patchNode({ name: 'node-b', body: { metadata: { labels: { 'example.com/stolen': 'yes' } } } }, merge),
      code(403),
    );
    // Only NodeRestriction refuses this one: the Node authorizer lets a node patch Nodes.
    await assert.rejects(
      kubelet.patchNode(
        { name: 'node-a', body: { spec: { taints: [{ key: 'example.com/x', effect: 'NoSchedule' }] } } },
        merge,
      ),
      code(403),
    );
    assert.equal((await adminCore.readNode({ name: 'node-b' })).metadata?.labels?.['example.com/stolen'], undefined);
  });

  it('when a bootstrap token has expired, tokencleaner should delete its Secret', async () => {
    const expired = await createBootstrapToken(cluster, { groups: [KINDLING_GROUP], expiresInMs: -60_000 });
    const core = admin.makeApiClient(k8s.CoreV1Api);
    await eventually(
      'the expired token Secret to be deleted',
      () =>
        core.readNamespacedSecret({ name: `bootstrap-token-${expired.id}`, namespace: 'kube-system' }).then(
          () => undefined,
          (err: { code?: number }) => err.code === 404,
        ),
      60_000,
    );
  });

  it('when a Pod names no node, the real kube-scheduler should bind it to a Ready Node and KWOK run it', async () => {
    const core = admin.makeApiClient(k8s.CoreV1Api);
    // Nodes of the other cases are cordoned, so worker-1 is the only place the Pod can go.
    for (const n of (await core.listNode()).items)
      await core.patchNode(
        { name: n.metadata?.name ?? '', body: { spec: { unschedulable: true } } },
        k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
      );
    await core.createNode({
      body: { metadata: { name: 'worker-1', labels: { 'kubernetes.io/hostname': 'worker-1' } } },
    });
    await eventually(
      'KWOK to make worker-1 Ready',
      async () => {
        const node = await core.readNode({ name: 'worker-1' });
        return node.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True');
      },
      60_000,
    );
    await core.createNamespacedPod({
      namespace: 'default',
      body: { metadata: { name: 'web' }, spec: { containers: [{ name: 'web', image: 'nginx' }] } },
    });
    const pod = await eventually(
      'the Pod to be scheduled and running',
      async () => {
        const p = await core.readNamespacedPod({ name: 'web', namespace: 'default' });
        return p.status?.phase === 'Running' ? p : undefined;
      },
      60_000,
    );
    assert.equal(pod.spec?.nodeName, 'worker-1');
    const events = await core.listNamespacedEvent({
      namespace: 'default',
      fieldSelector: 'involvedObject.name=web,reason=Scheduled',
    });
    const scheduled = events.items[0];
    assert.ok(
      scheduled && [scheduled.source?.component, scheduled.reportingComponent].includes('default-scheduler'),
      'no Scheduled event from default-scheduler',
    );
  });
});
