/**
 * Benchmark of the NodePool controller (issue 3): N NodePools (default 1,000) on the real test bed; time until
 * every pool has its token + user-data Secrets, its MachineDeployment/MachineSet and observedGeneration caught
 * up, against the floor = writes needed ÷ the apiserver's raw create rate measured with a plain client in the
 * same run. Also writes per pool, and writes during a forced resync of every pool (must be 0).
 * The tokens are minted by the real `kindling ignition-server`, its own process (with a bootstrap token into the
 * guest for each, and the payload of a real release image generated once for all pools).
 *
 *   npx tsc -p . && node dist/test/bench/nodepool-controller.js [pools]
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as k8s from '@kubernetes/client-node';
import { Registry } from 'prom-client';
import { startCluster, installCapiCrds, installKindlingCrds } from '../bed/src/index.js';
import { createLogger } from '../../support/src/logger.js';
import { createNodePoolController } from '../../nodepool-controller/src/controller.js';
import { runIgnitionServer } from '../../ignition-server/testing/index.js';
import type { NodePool } from '../../api/src/nodepool.js';
import { SECRET_KEYS } from '../../api/src/keys.js';
import { reportRows } from './table.js';

const POOLS = Number(process.argv[2] ?? 1000);
const NS = 'default';
const log = createLogger({ name: 'bench', level: 'error' });
const out = (line: string): void => void process.stdout.write(`${line}\n`);

async function inBatches<T>(items: T[], size: number, fn: (t: T) => Promise<unknown>): Promise<void> {
  for (let i = 0; i < items.length; i += size) await Promise.all(items.slice(i, i + size).map(fn));
}

function pool(i: number, release: string): NodePool {
  return {
    apiVersion: 'kindling.dev/v1beta1',
    kind: 'NodePool',
    metadata: { name: `pool-${i}`, namespace: NS },
    spec: {
      clusterName: 'guest',
      release: { image: release },
      replicas: 2,
      management: { upgradeType: i % 2 === 0 ? 'Replace' : 'InPlace' },
      nodeLabels: { 'example.com/pool': `pool-${i}` },
      platform: { infrastructureTemplateRef: { apiGroup: 'infrastructure.kindling.dev', kind: 'LocalMachineTemplate', name: 'small' } },
    },
  };
}

/** Raw create rate of the apiserver: plain ConfigMap creates with the same client concurrency. */
async function rawCreateRate(core: k8s.CoreV1Api, n: number): Promise<number> {
  const started = performance.now();
  await inBatches([...Array(n).keys()], 32, (i) => core.createNamespacedConfigMap({ namespace: NS, body: { metadata: { name: `raw-${i}` }, data: { k: 'v' } } }));
  return n / ((performance.now() - started) / 1000);
}

/** The controller's writes by verb and kind, per pool (kindling_nodepool_writes_total). */
async function writesByKind(registry: Registry): Promise<string> {
  const values = (await registry.getSingleMetric('kindling_nodepool_writes_total')?.get())?.values ?? [];
  return values.map((v) => `${String(v.labels.verb)} ${String(v.labels.kind)} ${(v.value / POOLS).toFixed(2)}`).join(', ');
}

/** Polls until every pool satisfies `done`. */
async function everyPool(custom: k8s.CustomObjectsApi, done: (p: NodePool) => boolean): Promise<void> {
  for (;;) {
    const list = (await custom.listNamespacedCustomObject({ group: 'kindling.dev', version: 'v1beta1', namespace: NS, plural: 'nodepools' })) as { items: NodePool[] };
    if (list.items.filter(done).length === POOLS) return;
    await new Promise((r) => setTimeout(r, 250));
  }
}

async function main(): Promise<void> {
  const mgmt = await startCluster({ name: 'mgmt', controllerManager: false });
  const guest = await startCluster({ name: 'guest', controllerManager: false, management: { cluster: mgmt, namespace: NS } });
  const dir = await mkdtemp(join(tmpdir(), 'bench-nodepool-'));
  try {
    await Promise.all([installKindlingCrds(mgmt), installCapiCrds(mgmt)]);
    const objects = k8s.KubernetesObjectApi.makeApiClient(mgmt.kubeConfig);
    const custom = mgmt.kubeConfig.makeApiClient(k8s.CustomObjectsApi);
    const core = mgmt.kubeConfig.makeApiClient(k8s.CoreV1Api);
    const rate = await rawCreateRate(core, POOLS);
    const ignition = await runIgnitionServer({ kubeconfigPath: mgmt.kubeconfigPath, dir, namespace: NS, releases: ['1.36.3'], args: ['--log-level', 'warn'] });
    const release = ignition.releases['1.36.3'] ?? '';
    const registry = new Registry();
    const controller = createNodePoolController({ kubeConfig: mgmt.kubeConfig, log, workers: 8, registry, config: { ignition: { endpoint: ignition.endpoint, caPem: ignition.caPem }, tokenGraceMs: 7_200_000, maxSkewMinors: 3 } });
    await controller.start();
    const started = performance.now();
    await inBatches([...Array(POOLS).keys()], 32, (i) => objects.create(pool(i, release)));
    const created = performance.now();
    await everyPool(custom, (p) => p.status?.configHash !== undefined && p.status.observedGeneration === p.metadata.generation);
    await controller.queue.drained();
    const seconds = (performance.now() - started) / 1000;
    // The server's payload verdict reaches each pool's status after its token: wait for it, so that the writes
    // below count it and the resync measures the resync alone.
    await everyPool(custom, (p) => p.status?.conditions?.some((c) => c.type === 'ValidGeneratedPayload' && c.status === 'True') === true);
    await controller.queue.drained();
    const listed = (await core.listNamespacedSecret({ namespace: NS, labelSelector: 'kindling.dev/nodepool' })).items;
    const secrets = listed.length;
    const minted = listed.filter((s) => s.data?.[SECRET_KEYS.token] !== undefined).length;
    const writes = controller.writer.count;
    // Writes the controller must make per pool: finalizer, token Secret, user-data Secret, child, status.
    const floorSeconds = (POOLS * 5) / rate;
    const before = controller.writer.count;
    const resyncStarted = performance.now();
    controller.resyncAll();
    await new Promise((r) => setTimeout(r, 100));
    await controller.queue.drained();
    const resyncSeconds = (performance.now() - resyncStarted) / 1000;
    out(`pools: ${POOLS} (half Replace, half InPlace); Secrets: ${secrets}; tokens minted by the ignition server: ${minted}`);
    out(`raw create rate (plain client, 32 in flight): ${rate.toFixed(0)} objects/s`);
    out(`pools created in ${((created - started) / 1000).toFixed(1)} s; all converged after ${seconds.toFixed(1)} s`);
    out(`floor (5 writes/pool ÷ raw rate): ${floorSeconds.toFixed(1)} s; ratio ours/floor: ${(seconds / floorSeconds).toFixed(2)}`);
    out(`controller writes: ${writes} (${(writes / POOLS).toFixed(2)} per pool): ${await writesByKind(registry)}`);
    out(`forced resync of all ${POOLS} pools: ${controller.writer.count - before} writes in ${resyncSeconds.toFixed(1)} s`);
    const perPool = writes / POOLS;
    const resyncWrites = controller.writer.count - before;
    reportRows([
      { figure: `controller: ${POOLS} NodePools converge`, value: `${seconds.toFixed(1)} s`, reference: `floor ${floorSeconds.toFixed(1)} s (5 writes/pool ÷ ${rate.toFixed(0)}/s raw)`, ratio: seconds / floorSeconds, target: '≤ 1.5', pass: seconds / floorSeconds <= 1.5 },
      { figure: 'controller: writes per pool', value: perPool.toFixed(2), reference: '5 objects needed', ratio: perPool / 5, target: '≤ 1.0', pass: perPool <= 5 },
      { figure: 'controller: writes on a resync of every pool', value: String(resyncWrites), reference: '0', ratio: Number.NaN, target: '0', pass: resyncWrites === 0 },
    ]);
    out(`Events recorded on condition transitions: ${controller.events.count} (${(controller.events.count / POOLS).toFixed(2)} per pool; not in the write counts above)`);
    await controller.stop();
    await ignition.stop();
  } finally {
    await Promise.all([guest.stop(), mgmt.stop()]);
    await rm(dir, { recursive: true, force: true });
  }
}

await main();
