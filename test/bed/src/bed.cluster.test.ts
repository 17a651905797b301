/**
 * Proof that the test bed is real: each case depends on behaviour only the real component has (server-side
 * apply field ownership, pods bound by kube-scheduler, PDB status from the disruption controller, garbage
 * collection, the Cluster API schema, guards that outlive a killed test).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { createConnection } from 'node:net';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as k8s from '#k8s';
import { createApplier } from '../../../support/src/apply.js';
import { startCluster, installCapiCrds, type Cluster } from './index.js';
import { eventually } from './eventually.js';

const NS = 'default';

function portOpen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createConnection({ host: '127.0.0.1', port }, () => {
      s.destroy();
      resolve(true);
    });
    s.on('error', () => resolve(false));
  });
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('test bed', () => {
  let mgmt: Cluster;
  let guest: Cluster;

  before(async () => {
    [mgmt, guest] = await Promise.all([
      startCluster({ name: 'mgmt' }),
      startCluster({ name: 'guest', kwok: true, scheduler: true }),
    ]);
  });
  after(async () => Promise.all([mgmt?.stop(), guest?.stop()]));

  it('when asked for /version, it should report the Kubernetes version it was built from', async () => {
    const version = await mgmt.kubeConfig.makeApiClient(k8s.VersionApi).getCode();
    assert.equal(version.gitVersion, 'v1.36.3');
    assert.equal(version.minor, '36');
  });

  it("when two field managers apply labels and one drops its label, it should keep the other manager's label", async () => {
    const a = createApplier(mgmt.kubeConfig, 'manager-a');
    const b = createApplier(mgmt.kubeConfig, 'manager-b');
    const cm = (labels: Record<string, string>): k8s.KubernetesObject => ({
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: 'shared', namespace: NS, labels },
    });
    await a.apply(cm({ 'a.example/owner': 'a', 'a.example/extra': 'x' }));
    await b.apply(cm({ 'b.example/owner': 'b' }));
    const after = await a.apply(cm({ 'a.example/owner': 'a' }));
    assert.deepEqual(after.metadata?.labels, { 'a.example/owner': 'a', 'b.example/owner': 'b' });
  });

  it('when an owner is deleted, it should garbage-collect its dependents', async () => {
    const core = mgmt.kubeConfig.makeApiClient(k8s.CoreV1Api);
    const owner = await core.createNamespacedConfigMap({ namespace: NS, body: { metadata: { name: 'owner' } } });
    await core.createNamespacedSecret({
      namespace: NS,
      body: {
        metadata: {
          name: 'dependent',
          ownerReferences: [{ apiVersion: 'v1', kind: 'ConfigMap', name: 'owner', uid: owner.metadata?.uid ?? '' }],
        },
      },
    });
    await core.deleteNamespacedConfigMap({ name: 'owner', namespace: NS });
    await eventually('the dependent Secret to be collected', async () =>
      core.readNamespacedSecret({ name: 'dependent', namespace: NS }).then(
        () => undefined,
        (err: { code?: number }) => (err.code === 404 ? true : undefined),
      ),
    );
  });

  it('when a PDB allows no disruption, it should answer an eviction with 429, and with 201 once it allows one', async () => {
    const core = guest.kubeConfig.makeApiClient(k8s.CoreV1Api);
    const policy = guest.kubeConfig.makeApiClient(k8s.PolicyV1Api);
    await core.createNode({ body: { metadata: { name: 'node-1' } } });
    for (const name of ['web-1', 'web-2']) {
      await core.createNamespacedPod({
        namespace: NS,
        // No nodeName: the real kube-scheduler binds them to node-1 once KWOK makes it Ready.
        body: { metadata: { name, labels: { app: 'web' } }, spec: { containers: [{ name: 'c', image: 'nginx' }] } },
      });
    }
    await policy.createNamespacedPodDisruptionBudget({
      namespace: NS,
      body: { metadata: { name: 'web' }, spec: { minAvailable: 2, selector: { matchLabels: { app: 'web' } } } },
    });
    await eventually(
      'the disruption controller to count 2 healthy pods',
      async () => {
        const pdb = await policy.readNamespacedPodDisruptionBudget({ name: 'web', namespace: NS });
        return pdb.status?.currentHealthy === 2 && pdb.status.observedGeneration === pdb.metadata?.generation
          ? pdb
          : undefined;
      },
      60_000,
    );
    const evict = (): Promise<unknown> =>
      core.createNamespacedPodEviction({
        name: 'web-1',
        namespace: NS,
        body: { apiVersion: 'policy/v1', kind: 'Eviction', metadata: { name: 'web-1', namespace: NS } },
      });
    await assert.rejects(evict(), (err: { code?: number }) => err.code === 429);

    await policy.patchNamespacedPodDisruptionBudget(
      { name: 'web', namespace: NS, body: { spec: { minAvailable: 1 } } },
      k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
    );
    await eventually('the PDB to allow one disruption', async () => {
      const pdb = await policy.readNamespacedPodDisruptionBudget({ name: 'web', namespace: NS });
      return pdb.status?.disruptionsAllowed === 1 ? pdb : undefined;
    });
    await evict();
    await eventually('KWOK to finish deleting the evicted pod', async () =>
      core.readNamespacedPod({ name: 'web-1', namespace: NS }).then(
        () => undefined,
        (err: { code?: number }) => (err.code === 404 ? true : undefined),
      ),
    );
  });

  it('when a namespace is deleted, it should be emptied and removed by the namespace controller', async () => {
    const core = mgmt.kubeConfig.makeApiClient(k8s.CoreV1Api);
    await core.createNamespace({ body: { metadata: { name: 'doomed' } } });
    await core.createNamespacedConfigMap({ namespace: 'doomed', body: { metadata: { name: 'inside' } } });
    await core.deleteNamespace({ name: 'doomed' });
    await eventually('the namespace to disappear', async () =>
      core.readNamespace({ name: 'doomed' }).then(
        () => undefined,
        (err: { code?: number }) => (err.code === 404 ? true : undefined),
      ),
    );
  });

  describe('with the real Cluster API CRDs', () => {
    before(async () => {
      await installCapiCrds(mgmt);
    });

    const machineSet = (infrastructureRef: Record<string, string>): k8s.KubernetesObject =>
      ({
        apiVersion: 'cluster.x-k8s.io/v1beta2',
        kind: 'MachineSet',
        metadata: { name: 'pool', namespace: NS },
        spec: {
          clusterName: 'guest',
          replicas: 1,
          selector: { matchLabels: { pool: 'p' } },
          template: {
            metadata: { labels: { pool: 'p' } },
            spec: { clusterName: 'guest', bootstrap: { dataSecretName: 'user-data' }, infrastructureRef },
          },
        },
      }) as k8s.KubernetesObject;

    it('when a MachineSet uses the v1beta1 infrastructureRef shape, it should be refused by the v1beta2 schema', async () => {
      const objects = k8s.KubernetesObjectApi.makeApiClient(mgmt.kubeConfig);
      await assert.rejects(
        objects.create(
          machineSet({
            apiVersion: 'infrastructure.kindling.dev/v1alpha1',
            kind: 'LocalMachineTemplate',
            name: 'small',
          }),
        ),
        (err: { code?: number; body?: string }) =>
          err.code === 422 && /infrastructureRef.apiGroup: Required value/.test(String(err.body)),
      );
    });

    it('when a MachineSet is well formed, it should be accepted', async () => {
      const objects = k8s.KubernetesObjectApi.makeApiClient(mgmt.kubeConfig);
      const created = await objects.create(
        machineSet({ apiGroup: 'infrastructure.kindling.dev', kind: 'LocalMachineTemplate', name: 'small' }),
      );
      assert.ok(created.metadata?.uid);
    });
  });

  it('when a guest cluster names a management cluster, it should write the CAPI kubeconfig Secret there', async () => {
    const other = await startCluster({
      name: 'tenant-b',
      controllerManager: false,
      management: { cluster: mgmt, namespace: NS },
    });
    try {
      const secret = await mgmt.kubeConfig
        .makeApiClient(k8s.CoreV1Api)
        .readNamespacedSecret({ name: 'tenant-b-kubeconfig', namespace: NS });
      assert.equal(secret.metadata?.labels?.['cluster.x-k8s.io/cluster-name'], 'tenant-b');
      const kc = new k8s.KubeConfig();
      kc.loadFromString(Buffer.from(secret.data?.value ?? '', 'base64').toString());
      const version = await kc.makeApiClient(k8s.VersionApi).getCode();
      assert.equal(version.gitVersion, 'v1.36.3');
    } finally {
      await other.stop();
    }
  });

  it('when stopped, it should leave no process or port behind', async () => {
    const c = await startCluster({ name: 'short', controllerManager: false });
    const port = Number(new URL(c.server).port);
    const pids = c.processes.map((p) => p.guardPid ?? 0);
    assert.ok(await portOpen(port));
    await c.stop();
    assert.deepEqual(pids.filter(alive), []);
    assert.equal(await portOpen(port), false);
  });

  it('when the process that started a cluster is killed with SIGKILL, it should leave no process or port behind', async () => {
    const script = fileURLToPath(new URL('./fixtures/start-and-wait.js', import.meta.url));
    const dir = await mkdtemp(join(tmpdir(), 'kindling-orphan-'));
    after(() => rm(dir, { recursive: true, force: true }));
    const child = spawn(process.execPath, [script, dir], { stdio: ['ignore', 'pipe', 'inherit'] });
    const line = await new Promise<string>((resolve, reject) => {
      child.stdout.once('data', (d: Buffer) => resolve(d.toString()));
      child.once('exit', (code) => reject(new Error(`fixture exited with ${code}`)));
    });
    const { port, pids } = JSON.parse(line) as { port: number; pids: number[] };
    assert.ok(pids.every(alive));
    child.kill('SIGKILL');
    await eventually('the orphaned processes to stop', async () => (pids.some(alive) ? undefined : true), 20_000);
    assert.equal(await portOpen(port), false);
  });
});
