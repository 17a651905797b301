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
 * --change none-policy|reboot|both (MachineSet engine): a config change whose path the pool's disruption policy
 * says needs nothing, against the same change of a path that needs Drain+Reboot (the agents drain or not as
 * the real rule decides for the path), with --pods-per-node bare pods on every node: time and pods evicted.
 *
 *   node dist/test/bench/inplace.js [--engine MachineSet|ClusterAPI] [--nodes 100] [--max-unavailable 10] [--step 5] [--retry-after 1s] [--target 1.1]
 *   node dist/test/bench/inplace.js --change both --nodes 30 --max-unavailable 3 [--step 5] [--pods-per-node 2]
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import * as k8s from '#k8s';
import { Registry } from 'prom-client';
import { ANNOTATIONS, LABELS } from '../../api/src/keys.js';
import { CAPI_GROUP } from '../../api/src/capi.js';
import { effectiveDisruptionPolicy, leastDisruption } from '../../api/src/disruption.js';
import { createLogger, type Logger } from '../../support/src/logger.js';
import { Drainer } from '../../drainer/src/drainer.js';
import { createTestMachine, createTestNode, eventually, testMachineSet } from '../../drainer/testing/index.js';
import { CachedPayloadSource, IgnitionServerPayloadSource } from '../../inplace-upgrader/src/payload.js';
import { AvailabilityWatcher, machineConfig, tokenSecret } from '../../inplace-upgrader/testing/index.js';
import { runIgnitionServer } from '../../ignition-server/testing/index.js';
import { InPlaceUpgrader } from '../../inplace-upgrader/src/upgrader.js';
import { installCapiCrds, installKindlingCrds, startCluster } from '../bed/src/index.js';
import { runClusterApiEngine } from './inplace-capi.js';
import { agentBreakdown, now, SimulatedAgents, type EngineRun, type RolloutResult } from './simulated-agents.js';
import { reportRows, type Row } from './table.js';

const NS = 'default';
const POOL = 'bench';
const merge = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch);
const ENGINES = ['MachineSet', 'ClusterAPI'] as const;

/**
 * The change each rollout of a --change run makes, and the pool's disruption policy: /etc/quiet/ needs nothing;
 * any other path needs a drain and a reboot (the defaults). The simulated agents drain or not as the real
 * agent's rule (api/src/disruption.ts) decides for the changed path.
 */
const CHANGES = {
  reboot: '/etc/bench/reboot.conf',
  'none-policy': '/etc/quiet/bench.conf',
} as const;
type Change = keyof typeof CHANGES;
const POLICY = effectiveDisruptionPolicy({
  files: [{ path: '/etc/quiet/', match: 'Prefix', actions: [{ type: 'None' }] }],
});

/** What one rollout of the MachineSet engine measured: the rollout, and the pods the drainer evicted. */
interface ChangeResult extends RolloutResult {
  change: Change;
  evictions: number;
}

/** The drainer's evictions so far (its kindling_drainer_evictions_total, result evicted). */
async function evicted(registry: Registry): Promise<number> {
  const metric = await registry.getSingleMetric('kindling_drainer_evictions_total')?.get();
  return metric?.values.find((v) => v.labels.result === 'evicted')?.value ?? 0;
}

/** `perNode` bare pods on each node (KWOK runs them): what a drain evicts. */
async function placePods(core: k8s.CoreV1Api, names: readonly string[], perNode: number, round: number): Promise<void> {
  for (const node of names)
    await Promise.all(
      Array.from({ length: perNode }, (_, i) =>
        core.createNamespacedPod({
          namespace: NS,
          body: {
            metadata: { name: `work-${round}-${node}-${i}` },
            spec: { nodeName: node, containers: [{ name: 'work', image: 'bench' }] },
          },
        }),
      ),
    );
}

async function runMachineSetEngine(run: EngineRun, changes: readonly Change[], log: Logger): Promise<ChangeResult[]> {
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
          [ANNOTATIONS.disruptionPolicy]: JSON.stringify(POLICY),
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
    parts.push(upgrader, drainer, agents);
    await Promise.all([upgrader.start(), drainer.start(), agents.start()]);

    const results: ChangeResult[] = [];
    for (const [round, change] of changes.entries()) {
      agents.drain = leastDisruption(POLICY, [{ kind: 'file', path: CHANGES[change] }]).drain;
      await placePods(core, names, run.podsPerNode, round);
      const before = await evicted(registry);
      const watcher = new AvailabilityWatcher(guest.kubeConfig, names);
      await watcher.start();
      const r = await rollOut(mgmt.kubeConfig, { release: ignition.release, change, round }, agents, watcher);
      watcher.stop();
      results.push({ ...r, change, evictions: (await evicted(registry)) - before });
    }
    return results;
  } finally {
    for (const p of parts.reverse()) await p.stop();
    await Promise.all([guest.stop(), mgmt.stop()]);
    await rm(dir, { recursive: true, force: true });
  }
}

/** One rollout of the bench pool to a config writing the change's path; timed from the target's write. */
async function rollOut(
  mgmt: k8s.KubeConfig,
  to: { release: string; change: Change; round: number },
  agents: SimulatedAgents,
  watcher: AvailabilityWatcher,
): Promise<RolloutResult> {
  const mgmtCore = mgmt.makeApiClient(k8s.CoreV1Api);
  const file = { path: CHANGES[to.change], mode: 0o644, contents: { source: `data:,round%20${to.round}` } };
  const target = await tokenSecret(mgmt, {
    namespace: NS,
    pool: POOL,
    cluster: 'tenant',
    release: to.release,
    config: [machineConfig(`99-bench-${to.round}`, { ignition: { version: '3.2.0' }, storage: { files: [file] } })],
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
  const custom = mgmt.makeApiClient(k8s.CustomObjectsApi);
  const machineSet = { group: CAPI_GROUP, version: 'v1beta2', namespace: NS, plural: 'machinesets', name: POOL };
  const spansBefore = agents.spans.length;
  const started = now();
  await custom.patchNamespacedCustomObject(
    { ...machineSet, body: { metadata: { annotations: { [ANNOTATIONS.targetConfigHash]: target.hash } } } },
    merge,
  );
  await eventually(
    'the rollout to complete',
    async () => {
      const ms = (await custom.getNamespacedCustomObject(machineSet)) as {
        metadata: { annotations?: Record<string, string> };
      };
      return ms.metadata.annotations?.[ANNOTATIONS.currentConfigHash] === target.hash;
    },
    3_600_000,
    100,
  );
  const ended = now();
  const spans = agents.spans.slice(spansBefore);
  return {
    totalSeconds: (ended - started) / 1000,
    started,
    ended,
    durations: spans.map((x) => x.done - x.began),
    spans,
    maxUnavailable: watcher.max,
    events: watcher.events,
    notes: [],
  };
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
      // The ratio to judge the total against (target: 1.1); unset: reported, not judged.
      target: { type: 'string' },
      // MachineSet engine: a config change whose disruption policy says None, one that needs Drain+Reboot, or
      // both on the same test bed (reboot first), with pods on every node for the drains to evict.
      change: { type: 'string' },
      'pods-per-node': { type: 'string', default: '2' },
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
    podsPerNode: values.change === undefined ? 0 : Number(values['pods-per-node']),
  };
  const log = createLogger({ name: 'bench', level: 'error' });
  if (values.change !== undefined) return changeBench(run, engine, values.change, log);
  return rolloutBench(run, engine, values.target === undefined ? undefined : Number(values.target), log);
}

/** The default benchmark: one rollout, its total against the ideal ⌈N/k⌉·t, judged against `target` if given. */
async function rolloutBench(
  run: EngineRun,
  engine: (typeof ENGINES)[number],
  target: number | undefined,
  log: Logger,
): Promise<void> {
  const { n, k } = run;
  const t = run.stepMs / 1000;
  const r = engine === 'MachineSet' ? await oneRollout(run, log) : await runClusterApiEngine(run, log);
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

/** The MachineSet engine's one rollout of the default benchmark: every node drained, its step a reboot. */
async function oneRollout(run: EngineRun, log: Logger): Promise<RolloutResult> {
  const [r] = await runMachineSetEngine(run, ['reboot'], log);
  if (!r) throw new Error('the rollout reported nothing');
  return r;
}

/**
 * --change: a config change of a None-policy path against the same change with Drain+Reboot: time
 * and pod evictions of each, and with both, the None change's figures as a ratio of the reboot's.
 */
async function changeBench(run: EngineRun, engine: string, change: string, log: Logger): Promise<void> {
  if (engine !== 'MachineSet') throw new Error('--change runs on the MachineSet engine only');
  const changes: Change[] = change === 'both' ? ['reboot', 'none-policy'] : [change as Change];
  if (!changes.every((c) => c in CHANGES))
    throw new Error(`--change must be one of ${[...Object.keys(CHANGES), 'both'].join(', ')}, not "${change}"`);
  const { n, k } = run;
  const results = await runMachineSetEngine(run, changes, log);
  const reboot = results.find((r) => r.change === 'reboot');
  const rows: Row[] = [];
  for (const r of results) {
    const what = `${r.change} change (${CHANGES[r.change]}), ${n} nodes, k=${k}`;
    out(
      `${what}: total ${r.totalSeconds.toFixed(1)} s, ${r.evictions} pods evicted of ${n * run.podsPerNode}, most nodes in flight at once ${r.maxUnavailable} (cordoned, not Ready or the agent Working)`,
    );
    for (const line of agentBreakdown(r, k)) out(`  ${line}`);
    rows.push(...changeRows(what, r, r.change === 'reboot' ? undefined : reboot));
  }
  reportRows(rows);
  if (rows.some((r) => r.pass === false)) process.exitCode = 1;
}

/** A change's time and evictions, each as a ratio of the same change with Drain+Reboot (`against`) when run. */
function changeRows(what: string, r: ChangeResult, against: ChangeResult | undefined): Row[] {
  const ref = (v: string): string => (against ? `the same with Drain+Reboot: ${v}` : '—');
  const quiet = r.change === 'none-policy';
  return [
    {
      figure: `${what}: total time`,
      value: `${r.totalSeconds.toFixed(1)} s`,
      reference: ref(`${against?.totalSeconds.toFixed(1)} s`),
      ratio: against ? r.totalSeconds / against.totalSeconds : Number.NaN,
      target: '—',
      pass: undefined,
    },
    {
      figure: `${what}: pods evicted`,
      value: String(r.evictions),
      reference: ref(String(against?.evictions)),
      ratio: against && against.evictions > 0 ? r.evictions / against.evictions : Number.NaN,
      target: quiet ? '0' : '—',
      pass: quiet ? r.evictions === 0 : undefined,
    },
  ];
}

const out = (line: string): boolean => process.stdout.write(`${line}\n`);

main().catch((err: unknown) => {
  process.stderr.write(`bench failed: ${String((err as Error).stack ?? err)}\n`);
  process.exitCode = 1;
});
