/**
 * A guest admin's CSR flood on the real test bed: guest A (namespace flood) creates hundreds of 1 MiB CSRs and
 * thousands of small ones for Kindling's kubelet signer; guest B (namespace quiet) has one kubelet joining. The
 * nodepool-controller runs in-process, so this process's peak RSS (VmHWM) is the controller's plus the test's
 * own requests, which it sends a few at a time and drops.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import * as k8s from '#k8s';
import {
  startCluster,
  installCapiCrds,
  installKindlingCrds,
  eventually,
  type Cluster,
} from '../../test/bed/src/index.js';
import { createLogger } from '../../support/src/logger.js';
import { forEachLimited } from '../../support/src/limited.js';
import { createCertificateRequest } from '../../test/bed/src/pki.js';
import { BOOTSTRAP_GROUP, bootstrapPoolGroup, LABELS } from '../../api/src/keys.js';
import { nodePoolFixture } from '../../api/testing/nodepool.js';
import { createNodePoolController, type NodePoolController } from './controller.js';
import { KUBELET_CLIENT_SIGNER } from './csr-decision.js';

const FLOOD = 'flood';
const QUIET = 'quiet';
const LARGE = Number(process.env['CSR_FLOOD_LARGE'] ?? 200);
const SMALL = Number(process.env['CSR_FLOOD_SMALL'] ?? 2_000);
const MiB = 1024 * 1024;
const CLIENT_USAGES = ['digital signature', 'client auth'];
const CONFIG = {
  ignition: {
    endpoint: 'ignition.kindling.test:9443',
    caPem: '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n',
  },
  tokenGraceMs: 2 * 3600_000,
  maxSkewMinors: 3,
};
const MERGE = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch);
const b64 = (s: string): string => Buffer.from(s).toString('base64');

const vmHwmBytes = (): number => {
  const match = /VmHWM:\s+(\d+) kB/.exec(readFileSync('/proc/self/status', 'utf8'));
  return match ? Number(match[1]) * 1024 : 0;
};

/** A request of about `bytes` (a valid PKCS#10 whose DNS names fill it), base64 as spec.request carries it. */
async function requestOf(bytes: number): Promise<string> {
  const count = Math.max(0, Math.floor(bytes / 80));
  const dnsNames = Array.from({ length: count }, (_, i) => `${String(i).padStart(8, '0')}.${'x'.repeat(60)}.test`);
  const { csrPem } = await createCertificateRequest({ commonName: 'system:node:flood', dnsNames });
  return b64(csrPem);
}

async function bootstrapKubeConfig(guest: Cluster, pool: string, ns: string): Promise<k8s.KubeConfig> {
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
        'auth-extra-groups': [BOOTSTRAP_GROUP, bootstrapPoolGroup(ns, pool)].join(','),
        expiration: new Date(Date.now() + 3600_000).toISOString(),
      },
    },
  });
  const kc = new k8s.KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'guest', server: guest.server, caData: b64(guest.ca.certPem) }],
    users: [{ name: 'u', token: `${id}.${secret}` }],
    contexts: [{ name: 'c', cluster: 'guest', user: 'u' }],
    currentContext: 'c',
  });
  return kc;
}

describe('CSR approver under a guest CSR flood, on the real test bed', () => {
  let mgmt: Cluster;
  let flooded: Cluster;
  let quiet: Cluster;
  let controller: NodePoolController;
  const log = createLogger({ name: 'csr-flood-test', level: process.env['TEST_LOG_LEVEL'] ?? 'error' });

  before(async () => {
    mgmt = await startCluster({ name: 'mgmt', controllerManager: false });
    const core = mgmt.kubeConfig.makeApiClient(k8s.CoreV1Api);
    for (const name of [FLOOD, QUIET]) await core.createNamespace({ body: { metadata: { name } } });
    [flooded, quiet] = await Promise.all([
      startCluster({ name: 'guest-flood', management: { cluster: mgmt, namespace: FLOOD } }),
      startCluster({ name: 'guest-quiet', nodeAuth: true, management: { cluster: mgmt, namespace: QUIET } }),
      installKindlingCrds(mgmt),
      installCapiCrds(mgmt),
    ]);
    const objects = k8s.KubernetesObjectApi.makeApiClient(mgmt.kubeConfig);
    for (const [ns, cluster] of [
      [FLOOD, 'guest-flood'],
      [QUIET, 'guest-quiet'],
    ] as const)
      await objects.create(
        nodePoolFixture('pool', ns, (p) => {
          p.spec.replicas = 0;
          p.spec.clusterName = cluster;
        }),
      );
    const custom = mgmt.kubeConfig.makeApiClient(k8s.CustomObjectsApi);
    const machines = { group: 'cluster.x-k8s.io', version: 'v1beta2', namespace: QUIET, plural: 'machines' };
    await custom.createNamespacedCustomObject({
      ...machines,
      body: {
        apiVersion: 'cluster.x-k8s.io/v1beta2',
        kind: 'Machine',
        metadata: { name: 'q-1', labels: { [LABELS.nodePool]: 'pool', [LABELS.capiClusterName]: 'guest-quiet' } },
        spec: {
          clusterName: 'guest-quiet',
          bootstrap: { dataSecretName: 'user-data-pool' },
          infrastructureRef: { apiGroup: 'infrastructure.kindling.dev', kind: 'LocalMachine', name: 'q-1' },
        },
      },
    });
    await custom.patchNamespacedCustomObjectStatus(
      {
        ...machines,
        name: 'q-1',
        body: {
          status: {
            addresses: [
              { type: 'Hostname', address: 'host-q1' },
              { type: 'InternalIP', address: '10.0.1.11' },
            ],
          },
        },
      },
      MERGE,
    );
  });
  after(async () => {
    await controller?.stop();
    await Promise.all([flooded?.stop(), quiet?.stop(), mgmt?.stop()]);
  });

  it("when one guest floods with large and small CSRs, it should approve another guest's kubelet within 10 s and keep its memory bounded", async (t) => {
    const certificates = flooded.kubeConfig.makeApiClient(k8s.CertificatesV1Api);
    const create = (name: string, request: string): Promise<unknown> =>
      certificates.createCertificateSigningRequest({
        body: { metadata: { name }, spec: { signerName: KUBELET_CLIENT_SIGNER, usages: CLIENT_USAGES, request } },
      });
    const large = await requestOf(MiB - 4096);
    await forEachLimited([...Array(LARGE).keys()], 4, (i) => create(`large-${i}`, large));
    const small = await requestOf(0);
    await forEachLimited([...Array(SMALL).keys()], 16, (i) => create(`small-${i}`, small));

    const hwmBefore = vmHwmBytes();
    controller = createNodePoolController({
      kubeConfig: mgmt.kubeConfig,
      namespaces: [FLOOD, QUIET],
      log,
      config: CONFIG,
    });
    await controller.start();
    await eventually('the flooded guest to be read', () => Promise.resolve(controller.approver.synced));

    const kubelet = await bootstrapKubeConfig(quiet, 'pool', QUIET);
    const { csrPem } = await createCertificateRequest({
      commonName: 'system:node:host-q1',
      organizations: ['system:nodes'],
    });
    const asked = Date.now();
    await eventually('the quiet guest to accept a bootstrap CSR', async () => {
      await kubelet.makeApiClient(k8s.CertificatesV1Api).createCertificateSigningRequest({
        body: {
          metadata: { name: 'q-1-client' },
          spec: { signerName: KUBELET_CLIENT_SIGNER, usages: CLIENT_USAGES, request: b64(csrPem) },
        },
      });
      return true;
    });
    const quietCertificates = quiet.kubeConfig.makeApiClient(k8s.CertificatesV1Api);
    const approved = await eventually('the quiet kubelet approved', async () => {
      const csr = await quietCertificates.readCertificateSigningRequest({ name: 'q-1-client' });
      return csr.status?.conditions?.find((c) => c.type === 'Approved');
    });
    const waitedMs = Date.now() - asked;
    const grownMiB = (vmHwmBytes() - hwmBefore) / MiB;
    t.diagnostic(
      `csr-flood: ${LARGE} x 1 MiB + ${SMALL} small CSRs; quiet kubelet approved in ${waitedMs} ms; VmHWM ${Math.round(hwmBefore / MiB)} -> ${Math.round(vmHwmBytes() / MiB)} MiB`,
    );
    assert.equal(approved.reason, 'KubeletClientForMachine');
    assert.ok(waitedMs < 10_000, `approved after ${waitedMs} ms`);
    assert.ok(grownMiB < LARGE / 2, `peak RSS grew ${grownMiB.toFixed(0)} MiB while reading the flood`);

    const core = mgmt.kubeConfig.makeApiClient(k8s.CoreV1Api);
    const tooManyEvents = async (): Promise<k8s.CoreV1Event[]> =>
      (
        await core.listNamespacedEvent({ namespace: FLOOD, fieldSelector: 'involvedObject.kind=NodePool' })
      ).items.filter((e) => e.reason === 'TooManyPendingCSRs');
    await eventually('a TooManyPendingCSRs Event', async () => ((await tooManyEvents()).length > 0 ? true : undefined));
    const tooMany = await tooManyEvents();
    assert.equal(tooMany.length, 1, 'one Event, however many CSRs');
    assert.match(tooMany[0]?.message ?? '', /more than the 100 allowed/);
  });
});
