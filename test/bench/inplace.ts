/**
 * Benchmark of an in-place rollout: N KWOK nodes, maxUnavailable k, and a simulated agent whose update step
 * takes t seconds, on either in-place engine. Reports the total rollout time against the ideal ⌈N/k⌉·t (t as
 * the agents measured it), the most nodes an independent watcher saw unavailable at once (must be ≤ k), and
 * where each node's time went.
 *
 * --engine MachineSet (default): one MachineSet driven by Kindling's upgrader. Real: both test-bed clusters,
 * the Cluster API CRDs, the upgrader and the drainer (in this process), the ignition server (its own process;
 * the payload is generated before the clock starts) and the HTTPS payload fetch with the pool's token.
 * --engine ClusterAPI: a MachineDeployment that the real Cluster API manager updates in place through
 * Kindling's Runtime Extension (inplace-capi.ts says what is real there).
 * Simulated on both: the agent (simulated-agents.ts).
 *
 *   node dist/test/bench/inplace.js [--engine MachineSet|ClusterAPI] [--nodes 100] [--max-unavailable 10] [--step 5] [--retry-after 1s] [--target 1.1]
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import * as k8s from '#k8s';
import { Registry } from 'prom-client';
import { ANNOTATIONS, LABELS } from '../../api/src/keys.js';
import { CAPI_GROUP } from '../../api/src/capi.js';
import { createLogger, type Logger } from '../../support/src/logger.js';
import { Drainer } from '../../drainer/src/drainer.js';
import { createTestMachine, createTestNode, eventually, testMachineSet } from '../../drainer/testing/index.js';
import { CachedPayloadSource, IgnitionServerPayloadSource } from '../../inplace-upgrader/src/payload.js';
import { AvailabilityWatcher, tokenSecret } from '../../inplace-upgrader/testing/index.js';
import { runIgnitionServer } from '../../ignition-server/testing/index.js';
import { InPlaceUpgrader } from '../../inplace-upgrader/src/upgrader.js';
import { installCapiCrds, installKindlingCrds, startCluster } from '../bed/src/index.js';
import { runClusterApiEngine } from './inplace-capi.js';
import { agentBreakdown, now, SimulatedAgents, type EngineRun, type RolloutResult } from './simulated-agents.js';
import { reportRows } from './table.js';

const NS = 'default';
const POOL = 'bench';
const merge = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch);
const ENGINES = ['MachineSet', 'ClusterAPI'] as const;

async function runMachineSetEngine(run: EngineRun, log: Logger): Promise<RolloutResult> {
  const { n, k, stepMs } = run;
  const mgmt = await startCluster({ name: 'mgmt', controllerManager: false });
  const guest = await startCluster({
    name: 'tenant',
    kwok: true,
    controllerManager: false,
    management: { cluster: mgmt, namespace: NS },
  });
  const dir = await mkdtemp(join(tmpdir(), 'kindling-bench-'));
  const parts: { stop(): Promise<void> | void }[] = [];
  try {
    await Promise.all([installCapiCrds(mgmt), installKindlingCrds(mgmt)]);
    const ignition = await runIgnitionServer({ kubeconfigPath: mgmt.kubeconfigPath, dir, namespace: NS });
    parts.push(ignition);
    const names = Array.from({ length: n }, (_, i) => `node-${String(i).padStart(3, '0')}`);
    const core = guest.kubeConfig.makeApiClient(k8s.CoreV1Api);
    await k8s.KubernetesObjectApi.makeApiClient(mgmt.kubeConfig).create(
      testMachineSet({
        name: POOL,
        namespace: NS,
        cluster: 'tenant',
        replicas: n,
        annotations: {
          [ANNOTATIONS.currentConfigHash]: 'old',
          [ANNOTATIONS.targetConfigHash]: 'old',
          [ANNOTATIONS.maxUnavailable]: String(k),
        },
      }),
    );
    for (let i = 0; i < n; i += 10) {
      await Promise.all(
        names.slice(i, i + 10).map(async (name, j) => {
          await createTestNode(guest.kubeConfig, name, { [LABELS.zone]: `zone-${(i + j) % 3}` });
          await core.patchNode(
            {
              name,
              body: { metadata: { annotations: { [ANNOTATIONS.currentConfig]: 'old', [ANNOTATIONS.state]: 'Done' } } },
            },
            merge,
          );
          await createTestMachine(mgmt.kubeConfig, {
            name: `${POOL}-${name}`,
            namespace: NS,
            cluster: 'tenant',
            machineSet: POOL,
            node: name,
          });
        }),
      );
    }
    await eventually(
      'every node to be Ready',
      async () =>
        (await core.listNode()).items.filter((x) =>
          x.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True'),
        ).length === n,
      120_000,
      500,
    );

    const registry = new Registry();
    const payloads = new CachedPayloadSource(
      new IgnitionServerPayloadSource({ kubeConfig: mgmt.kubeConfig, url: ignition.url, caPem: ignition.caPem }),
    );
    const upgrader = new InPlaceUpgrader({
      kubeConfig: mgmt.kubeConfig,
      namespaces: [NS],
      log,
      payloads,
      agentImage: 'kindling:bench',
      registry,
      resyncMs: 2_000,
    });
    const drainer = new Drainer({
      kubeConfig: mgmt.kubeConfig,
      namespaces: [NS],
      log,
      registry,
      defaultDrainTimeoutMs: 0,
    });
    const agents = new SimulatedAgents(guest.kubeConfig, stepMs);
    const watcher = new AvailabilityWatcher(guest.kubeConfig, names);
    parts.push(upgrader, drainer, agents, watcher);
    await Promise.all([upgrader.start(), drainer.start(), agents.start(), watcher.start()]);

    const mgmtCore = mgmt.kubeConfig.makeApiClient(k8s.CoreV1Api);
    const target = await tokenSecret(mgmt.kubeConfig, {
      namespace: NS,
      pool: POOL,
      cluster: 'tenant',
      release: ignition.release,
      config: [],
    });
    const secret = await mgmtCore.createNamespacedSecret({ namespace: NS, body: target.secret });
    await eventually(
      'the payload to be generated',
      async () => {
        const s = await mgmtCore.readNamespacedSecret({ name: secret.metadata?.name ?? '', namespace: NS });
        return s.metadata?.annotations?.[ANNOTATIONS.payloadReason] === 'AsExpected' || undefined;
      },
      120_000,
      200,
    );
    const custom = mgmt.kubeConfig.makeApiClient(k8s.CustomObjectsApi);
    const started = now();
    await custom.patchNamespacedCustomObject(
      {
        group: CAPI_GROUP,
        version: 'v1beta2',
        namespace: NS,
        plural: 'machinesets',
        name: POOL,
        body: { metadata: { annotations: { [ANNOTATIONS.targetConfigHash]: target.hash } } },
      },
      merge,
    );
    await eventually(
      'the rollout to complete',
      async () => {
        const ms = (await custom.getNamespacedCustomObject({
          group: CAPI_GROUP,
          version: 'v1beta2',
          namespace: NS,
          plural: 'machinesets',
          name: POOL,
        })) as { metadata: { annotations?: Record<string, string> } };
        return ms.metadata.annotations?.[ANNOTATIONS.currentConfigHash] === target.hash;
      },
      3_600_000,
      100,
    );
    const ended = now();
    return {
      totalSeconds: (ended - started) / 1000,
      started,
      ended,
      durations: agents.durations,
      spans: agents.spans,
      maxUnavailable: watcher.max,
      events: watcher.events,
      notes: [],
    };
  } finally {
    for (const p of parts.reverse()) await p.stop();
    await Promise.all([guest.stop(), mgmt.stop()]);
    await rm(dir, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      engine: { type: 'string', default: 'MachineSet' },
      nodes: { type: 'string', default: '100' },
      'max-unavailable': { type: 'string', default: '10' },
      step: { type: 'string', default: '5' },
      // ClusterAPI engine: how soon Cluster API asks again about a Machine in progress (the extension's flag, at its default).
      'retry-after': { type: 'string', default: '1s' },
      // The ratio to judge the total against (issue 14 target 7: 1.1); unset: reported, not judged.
      target: { type: 'string' },
    },
  });
  const engine = values.engine as (typeof ENGINES)[number];
  if (!ENGINES.includes(engine))
    throw new Error(`--engine must be one of ${ENGINES.join(', ')}, not "${values.engine}"`);
  const run: EngineRun = {
    n: Number(values.nodes),
    k: Number(values['max-unavailable']),
    stepMs: Number(values.step) * 1000,
    retryAfter: values['retry-after'],
  };
  const { n, k } = run;
  const t = run.stepMs / 1000;
  const out = (line: string): boolean => process.stdout.write(`${line}\n`);
  const log = createLogger({ name: 'bench', level: 'error' });
  const r = engine === 'MachineSet' ? await runMachineSetEngine(run, log) : await runClusterApiEngine(run, log);
  // t as the agents took it: from taking up a node's update (Working, drain asked) to Done, averaged; it
  // holds the drain and uncordon round trips besides the step itself.
  const measured = r.durations.reduce((a, b) => a + b, 0) / Math.max(1, r.durations.length) / 1000;
  const batches = Math.ceil(n / k);
  const ideal = batches * measured;
  const ratio = r.totalSeconds / ideal;
  out(
    `engine ${engine}: N=${n} k=${k}, agent step ${t}s${engine === 'ClusterAPI' ? `, extension retry-after ${run.retryAfter}` : ''}; agent time t measured over ${r.durations.length} nodes: mean ${measured.toFixed(2)} s, max ${(Math.max(...r.durations) / 1000).toFixed(2)} s`,
  );
  out(
    `total rollout time: ${r.totalSeconds.toFixed(1)} s; ⌈N/k⌉·t = ${batches} × ${measured.toFixed(2)} = ${ideal.toFixed(1)} s; ratio ${ratio.toFixed(2)} (against the step alone, ${batches * t} s: ${(r.totalSeconds / (batches * t)).toFixed(2)})`,
  );
  out(
    `max unavailable at once: ${r.maxUnavailable} (limit ${k}) over ${r.events} node events${r.maxUnavailable <= k ? '' : ' — INVARIANT BROKEN'}`,
  );
  for (const line of [...agentBreakdown(r, k), ...r.notes]) out(line);
  const target = values.target === undefined ? undefined : Number(values.target);
  reportRows([
    {
      figure: `rollout (${engine}): ${n} nodes, k=${k}, total time`,
      value: `${r.totalSeconds.toFixed(1)} s`,
      reference: `⌈N/k⌉·t = ${batches} × ${measured.toFixed(2)} s (t measured)`,
      ratio,
      target: target === undefined ? '—' : `≤ ${target}`,
      pass: target === undefined ? undefined : ratio <= target,
    },
    {
      figure: `rollout (${engine}): most nodes unavailable at once`,
      value: String(r.maxUnavailable),
      reference: `k = ${k}`,
      ratio: Number.NaN,
      target: `≤ ${k}`,
      pass: r.maxUnavailable <= k,
    },
  ]);
  if (r.maxUnavailable > k) process.exitCode = 1;
}

main().catch((err: unknown) => {
  process.stderr.write(`bench failed: ${String((err as Error).stack ?? err)}\n`);
  process.exitCode = 1;
});
