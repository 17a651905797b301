/**
 * skip-remediation under the real Cluster API manager (v1.14.2): a NodePool's MachineHealthCheck (built by the
 * nodepool-controller's desiredMachineHealthCheck, a short unhealthy timeout) over a MachineSet whose hosts the
 * local providers boot with the real Ignition client and whose Nodes KWOK keeps. A Machine the upgrader spares
 * (setSkipRemediation, as it does when it hands the node a target) is left alone while its Node is NotReady for
 * well past the timeout, while the other Machine, NotReady as long, is remediated.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as k8s from '@kubernetes/client-node';
import { CAPI_API_VERSION, CAPI_GROUP } from '../../api/src/capi.js';
import { ANNOTATIONS, SECRET_KEYS, userDataSecretName } from '../../api/src/keys.js';
import type { NodePool } from '../../api/src/nodepool.js';
import { desiredMachineHealthCheck, selectorLabels } from '../../nodepool-controller/src/capi.js';
import { createApplier } from '../../support/src/apply.js';
import { createLogger } from '../../support/src/logger.js';
import { LOCAL_CRD_DIR } from '../../local/src/crds.js';
import { startProviders, type Providers } from '../../local/src/providers/run.js';
import { hostsCanJoin } from '../../local/src/providers/testing.js';
import { eventually, HOST_DOWN_ANNOTATION, installCapiCrds, installCrds, startCapiManager, startCluster, type CapiManager, type Cluster } from '../../test/bed/src/index.js';
import { setSkipRemediation } from './remediation.js';

const NS = 'tenants';
const POOL = 'workers';
const UNHEALTHY_AFTER_S = 10;
const log = createLogger({ name: 'remediation-capi-test', level: process.env.TEST_LOG_LEVEL ?? 'silent' });
const merge = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch);

interface MachineObject {
  metadata: k8s.V1ObjectMeta & { name: string };
  status?: { phase?: string; nodeRef?: { name: string }; conditions?: { type: string; status: string; reason?: string }[] };
}

/** The pool as the nodepool-controller sees it, as much as its MachineHealthCheck needs. */
const pool = {
  apiVersion: 'kindling.dev/v1beta1',
  kind: 'NodePool',
  metadata: { name: POOL, namespace: NS, uid: '00000000-0000-0000-0000-000000000001', annotations: { [ANNOTATIONS.machineHealthCheckTimeout]: `${UNHEALTHY_AFTER_S}s` } },
  spec: { clusterName: 'guest', replicas: 2, release: { image: 'unused' }, management: { upgradeType: 'InPlace', autoRepair: true }, platform: { infrastructureTemplateRef: { apiGroup: 'infrastructure.kindling.dev', kind: 'LocalMachineTemplate', name: 'local' } } },
} as unknown as NodePool;

describe('skip-remediation while a node is updated in place, under the real MachineHealthCheck', { timeout: 15 * 60_000 }, () => {
  let mgmt: Cluster;
  let guest: Cluster;
  let capi: CapiManager;
  let providers: Providers;
  let dir: string;
  let custom: k8s.CustomObjectsApi;
  let approver: Awaited<ReturnType<typeof hostsCanJoin>> | undefined;

  const apply = (o: object): Promise<unknown> => createApplier(mgmt.kubeConfig, 'kindling-test').apply(o);
  const list = async (plural: string): Promise<MachineObject[]> =>
    ((await custom.listNamespacedCustomObject({ group: CAPI_GROUP, version: 'v1beta2', namespace: NS, plural })) as { items: MachineObject[] }).items;
  const machines = async (): Promise<MachineObject[]> => (await list('machines')).filter((m) => !m.metadata.deletionTimestamp);
  const healthCheck = async (): Promise<{ status?: { expectedMachines?: number; currentHealthy?: number } } | undefined> =>
    (await list('machinehealthchecks'))[0] as { status?: { expectedMachines?: number; currentHealthy?: number } } | undefined;
  const nodeReady = async (name: string): Promise<string | undefined> =>
    (await guest.kubeConfig.makeApiClient(k8s.CoreV1Api).readNode({ name })).status?.conditions?.find((c) => c.type === 'Ready')?.status;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'kindling-remediation-capi-'));
    [mgmt, guest] = await Promise.all([startCluster({ name: 'mgmt', dir: join(dir, 'mgmt') }), startCluster({ name: 'guest', kwok: true, nodeAuth: true })]);
    await Promise.all([installCapiCrds(mgmt), installCrds(mgmt, LOCAL_CRD_DIR)]);
    capi = await startCapiManager(mgmt);
    custom = mgmt.kubeConfig.makeApiClient(k8s.CustomObjectsApi);
    const core = mgmt.kubeConfig.makeApiClient(k8s.CoreV1Api);
    await core.createNamespace({ body: { metadata: { name: NS } } });
    await core.createNamespacedSecret({ namespace: NS, body: { metadata: { name: 'guest-admin' }, stringData: { value: guest.kubeconfigYaml } } });
    approver = await hostsCanJoin(guest);
    providers = await startProviders({ kubeConfig: mgmt.kubeConfig, stateDir: join(dir, 'state'), log });
    const bootConfig = { ignition: { version: '3.3.0' }, storage: { files: approver.files } };
    await core.createNamespacedSecret({ namespace: NS, body: { metadata: { name: userDataSecretName(POOL, 'h1') }, stringData: { [SECRET_KEYS.value]: JSON.stringify(bootConfig), [SECRET_KEYS.format]: 'ignition' } } });
  });

  after(async () => {
    approver?.stop();
    await providers?.stop();
    await capi?.stop();
    await Promise.all([guest?.stop(), mgmt?.stop()]);
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('when two Nodes stay NotReady past the timeout, the MachineHealthCheck should remediate the Machine nobody spared and leave the spared one alone', async () => {
    // Right after start the new CRDs can still answer 429 (storage initialising): apply until accepted.
    await eventually('the Cluster to be accepted', async () => {
      await apply({ apiVersion: 'controlplane.kindling.dev/v1alpha1', kind: 'LocalControlPlane', metadata: { name: 'guest', namespace: NS }, spec: { adminKubeconfigSecretRef: { name: 'guest-admin' } } });
      await apply({ apiVersion: CAPI_API_VERSION, kind: 'Cluster', metadata: { name: 'guest', namespace: NS }, spec: { controlPlaneRef: { apiGroup: 'controlplane.kindling.dev', kind: 'LocalControlPlane', name: 'guest' } } });
      return true;
    }, 30_000, 250);
    await apply({ apiVersion: 'infrastructure.kindling.dev/v1alpha1', kind: 'LocalMachineTemplate', metadata: { name: 'local', namespace: NS }, spec: { template: { spec: {} } } });
    const labels = selectorLabels(pool);
    await apply({
      apiVersion: CAPI_API_VERSION,
      kind: 'MachineSet',
      metadata: { name: POOL, namespace: NS, labels },
      spec: {
        clusterName: 'guest',
        replicas: 2,
        selector: { matchLabels: labels },
        template: { metadata: { labels }, spec: { clusterName: 'guest', bootstrap: { dataSecretName: userDataSecretName(POOL, 'h1') }, infrastructureRef: { apiGroup: 'infrastructure.kindling.dev', kind: 'LocalMachineTemplate', name: 'local' } } },
      },
    });
    // The pool's own health check, without its owner reference (no NodePool object here for it to point at).
    const mhc = desiredMachineHealthCheck(pool);
    await apply({ ...mhc, metadata: { ...mhc.metadata, ownerReferences: undefined } });
    const [spared, other] = await eventually('two Running Machines with Nodes', async () => {
      const ms = await machines();
      return ms.length === 2 && ms.every((m) => m.status?.phase === 'Running' && m.status.nodeRef) ? ms : undefined;
    }, 5 * 60_000, 1000);
    assert.ok(spared && other);
    await eventually('the MachineHealthCheck to see both healthy', async () => (await healthCheck())?.status?.currentHealthy === 2, 2 * 60_000, 1000);

    // As the upgrader does when it hands the node a target; then that node, and the other one too, go NotReady.
    assert.equal(await setSkipRemediation(custom, spared, true), true);
    const down = [spared, other].map((m) => m.status?.nodeRef?.name ?? '');
    for (const node of down) await guest.kubeConfig.makeApiClient(k8s.CoreV1Api).patchNode({ name: node, body: { metadata: { annotations: { [HOST_DOWN_ANNOTATION]: 'true' } } } }, merge);
    await eventually('both Nodes NotReady', async () => (await Promise.all(down.map(nodeReady))).every((r) => r !== 'True'), 2 * 60_000, 500);
    // The health check no longer counts the spared Machine among its targets: it read the annotation.
    await eventually('the MachineHealthCheck to leave the spared Machine out', async () => (await healthCheck())?.status?.expectedMachines === 1, 60_000, 500);
    const machineStates = async (): Promise<string> => JSON.stringify((await list('machines')).map((m) => ({ name: m.metadata.name, deleting: m.metadata.deletionTimestamp, phase: m.status?.phase, conditions: m.status?.conditions?.map((c) => `${c.type}=${c.status}/${c.reason ?? ''}`) })));
    // The Machine nobody spared is remediated (past the same timeout, from the same NotReady spell) ...
    await eventually(`${other.metadata.name} remediated`, async () => !(await machines()).some((m) => m.metadata.uid === other.metadata.uid), 4 * 60_000, 1000).catch(async (err: unknown) => assert.fail(`${String(err)}: ${await machineStates()}`));
    // ... while the spared one stays, for three timeouts more.
    const since = Date.now();
    while (Date.now() - since < 3 * UNHEALTHY_AFTER_S * 1000) {
      const now: MachineObject | undefined = (await list('machines')).find((m) => m.metadata.uid === spared.metadata.uid);
      assert.ok(now && !now.metadata.deletionTimestamp, `${spared.metadata.name} was remediated while spared: ${await machineStates()}`);
      assert.equal(now.status?.conditions?.find((c) => c.type === 'OwnerRemediated')?.status, undefined, `${spared.metadata.name} was marked for remediation while spared`);
      assert.notEqual(await nodeReady(down[0] ?? ''), 'True', `${down[0] ?? ''} came back: the NotReady spell did not last`);
      await new Promise((r) => setTimeout(r, 2000));
    }
  });
});
