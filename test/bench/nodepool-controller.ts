/**
 * Benchmark of the NodePool controller: N NodePools (default 1,000) on the real test bed; time until
 * every pool has its token + user-data Secrets, its MachineDeployment/MachineSet and observedGeneration caught
 * up (seen through a watch of the pools), against two references measured in the same run:
 * - the floor: writes needed (5 per pool) ÷ the apiserver's raw create rate of plain ConfigMaps, with a plain
 *   client holding 32 requests in flight on kept-alive connections;
 * - the same writes: the window replayed by a plain client into a fresh namespace, 32 pools at a time: each
 *   pool created as the benchmark creates it (the controller's window holds those creates too), then the very
 *   server-side applies the controller sent for it, in order (finalizer, token Secret, user-data Secret,
 *   MachineDeployment or MachineSet, status). No informers, no ignition server, no waiting: what those
 *   requests cost the apiserver, which a ConfigMap create does not tell (server-side apply of a custom
 *   resource costs it two to three times as much).
 * Also writes per pool, and writes during a forced resync of every pool (must be 0); and, over the window and each
 * replay, each process's CPU seconds beside the machine's (controller-cpu.ts) and the apiservers' requests.
 * The controller runs in a process of its own, as `kindling nodepool-controller` does (controller-process.ts: its
 * kubeconfig loaded by loadKubeConfig, the command's Node flags), with as many reconciles in flight as
 * the floor's client has requests (32); the benchmark's creates and its watch of the pools run in this one.
 * The tokens are minted by the real `kindling ignition-server`, its own process (with a bootstrap token into the
 * guest for each, and the payload of a real release image generated once for all pools).
 *
 * The machine's load average is printed at the start and the end. With --rounds, the whole run (a fresh test bed
 * each time) is repeated and the table holds the medians; --cpu-prof writes a CPU profile of the window (the
 * controller's process, from the first create to convergence) per round, to FILE with the round appended;
 * every run prints a timeline of the pools' progress through the window.
 *
 *   npx tsc -p . && node dist/test/bench/nodepool-controller.js [pools] [--rounds 1] [--cpu-prof FILE]
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import * as k8s from '#k8s';
import { startCluster, installCapiCrds, installKindlingCrds, type Cluster } from '../bed/src/index.js';
import { createLogger } from '../../support/src/logger.js';
import { loadKubeConfig } from '../../support/src/kubeconfig.js';
import { ResilientInformer } from '../../support/src/informer.js';
import { runIgnitionServer } from '../../ignition-server/testing/index.js';
import type { NodePool } from '../../api/src/nodepool.js';
import { LABELS, SECRET_KEYS } from '../../api/src/keys.js';
import { loadAverage, reportRows } from './table.js';
import { sampleProgress } from './controller-window.js';
import { startControllerProcess } from './controller-process.js';
import { replaySeconds, type ReplayPlan } from './controller-replay.js';
import { inFlight } from './in-flight.js';
import { measured, scrapeApiserver, scrapeDelta, workTable, type Scrape } from './controller-apiserver.js';
import { cpuStretch, cpuTable, secondsWithout, withCpu, type CpuUse, type Processes } from './controller-cpu.js';

const { values: OPTS, positionals } = parseArgs({
  allowPositionals: true,
  options: { rounds: { type: 'string', default: '1' }, 'cpu-prof': { type: 'string' } },
});
const POOLS = Number(positionals[0] ?? 1000);
const ROUNDS = Math.max(1, Number(OPTS.rounds));
const NS = 'default';
/** Where the same writes are replayed. */
const REPLAY_NS = 'replay';
/** Where the same writes are replayed with the ignition server's. */
const REPLAY_SERVER_NS = 'replay-server';
/** Requests in flight of every plain client, and reconciles in flight of the controller. */
const IN_FLIGHT = 32;
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
      platform: {
        infrastructureTemplateRef: {
          apiGroup: 'infrastructure.kindling.dev',
          kind: 'LocalMachineTemplate',
          name: 'small',
        },
      },
    },
  };
}

/** Raw create rate of the apiserver: plain ConfigMap creates, IN_FLIGHT at a time. */
async function rawCreateRate(core: k8s.CoreV1Api, n: number, prefix: string): Promise<number> {
  const started = performance.now();
  await inFlight([...Array(n).keys()], IN_FLIGHT, (i) =>
    core.createNamespacedConfigMap({ namespace: NS, body: { metadata: { name: `${prefix}-${i}` }, data: { k: 'v' } } }),
  );
  return n / ((performance.now() - started) / 1000);
}

/** The pools as the API shows them, through a watch (a list of a thousand pools every moment would load the
 * apiserver the controller is measured on). */
function watchPools(
  kc: k8s.KubeConfig,
  custom: k8s.CustomObjectsApi,
): ResilientInformer<NodePool> & { until: (done: (p: NodePool) => boolean) => Promise<void> } {
  const waiting = new Set<() => void>();
  const informer = new ResilientInformer<NodePool>({
    kubeConfig: kc,
    path: `/apis/kindling.dev/v1beta1/namespaces/${NS}/nodepools`,
    list: async () =>
      (await custom.listNamespacedCustomObject({
        group: 'kindling.dev',
        version: 'v1beta1',
        namespace: NS,
        plural: 'nodepools',
      })) as k8s.KubernetesListObject<NodePool>,
    log,
    onEvent: () => waiting.forEach((check) => check()),
  });
  /** Resolves once every pool satisfies `done`. */
  const until = (done: (p: NodePool) => boolean): Promise<void> =>
    new Promise((resolve) => {
      const check = (): void => {
        if (informer.list(NS).filter(done).length < POOLS) return;
        waiting.delete(check);
        resolve();
      };
      waiting.add(check);
      check();
    });
  return Object.assign(informer, { until });
}

/** One round's figures. */
interface Figures {
  seconds: number;
  rate: number;
  floorSeconds: number;
  sameWritesSeconds: number;
  replayWrites: number;
  /** The same writes and the ignition server's (controller-replay.ts). */
  systemSeconds: number;
  /** A floor for the window's seconds had Kindling's two processes used no CPU (secondsWithout). */
  withoutKindlingSeconds: number;
  perPool: number;
  resyncWrites: number;
}

/** A reference's seconds, with the management apiserver's work and each process's CPU over it. */
interface Reference {
  seconds: number;
  work: Scrape;
  cpu: CpuUse;
}

/** What both references replay. */
interface ReferencePlan {
  plan: Omit<ReplayPlan, 'namespace' | 'server'>;
  mgmt: Cluster;
  guest: Cluster;
  tokenSecrets: Map<string, k8s.V1Secret>;
  processes: Processes;
}

/**
 * The plain replay and the replay with the server's writes, the plain one first in rounds 1, 3, … and the other
 * first in rounds 2, 4, …: the one run second finds the other's objects in the store and the apiserver's caches,
 * so neither is favoured over the rounds.
 */
async function references(
  index: number,
  ref: ReferencePlan,
): Promise<{ plain: Reference; system: Reference; guest: Scrape }> {
  const { plan, mgmt, guest, processes } = ref;
  const run = async (namespace: string, server?: ReplayPlan['server']): Promise<Reference> => {
    const { value, work } = await measured(mgmt.kubeConfig, () =>
      withCpu(processes, () => replaySeconds({ ...plan, namespace, server })),
    );
    return { seconds: value.value, cpu: value.cpu, work };
  };
  const plain = (): Promise<Reference> => run(REPLAY_NS);
  const system = async (): Promise<{ system: Reference; guest: Scrape }> => {
    const before = await scrapeApiserver(guest.kubeConfig);
    const done = await run(REPLAY_SERVER_NS, { guest: guest.kubeConfig, tokenSecrets: ref.tokenSecrets });
    return { system: done, guest: scrapeDelta(before, await scrapeApiserver(guest.kubeConfig)) };
  };
  if (index % 2 === 0) {
    const first = await plain();
    return { plain: first, ...(await system()) };
  }
  const first = await system();
  return { plain: await plain(), ...first };
}

/** Kindling's processes, as processesOf names them. */
const CONTROLLER_PROCESS = 'controller process';
const SERVER_PROCESS = 'ignition server';
const KINDLING_PROCESSES = [CONTROLLER_PROCESS, SERVER_PROCESS];

/** The benchmark's processes whose CPU is read over each stretch. */
function processesOf(
  mgmt: Cluster,
  guest: Cluster,
  controller: () => number | undefined,
  ignition: () => number | undefined,
): Processes {
  const of = (cluster: Cluster, name: string) => (): number | undefined =>
    cluster.processes.find((p) => p.name === name)?.commandPid();
  return [
    ['management apiserver', of(mgmt, 'kube-apiserver')],
    ['management etcd', of(mgmt, 'etcd')],
    ['guest apiserver', of(guest, 'kube-apiserver')],
    ['guest etcd', of(guest, 'etcd')],
    [CONTROLLER_PROCESS, controller],
    [SERVER_PROCESS, ignition],
    ['benchmark process', () => process.pid],
  ];
}

const converged = (p: NodePool): boolean =>
  p.status?.configHash !== undefined && p.status.observedGeneration === p.metadata.generation;

async function round(index: number): Promise<Figures> {
  const mgmt = await startCluster({ name: 'mgmt', controllerManager: false });
  const guest = await startCluster({
    name: 'guest',
    controllerManager: false,
    management: { cluster: mgmt, namespace: NS },
  });
  const dir = await mkdtemp(join(tmpdir(), 'bench-nodepool-'));
  try {
    await Promise.all([installKindlingCrds(mgmt), installCapiCrds(mgmt)]);
    // What `kindling nodepool-controller --kubeconfig` loads: requests share kept-alive connections.
    const kc = loadKubeConfig(mgmt.kubeconfigPath);
    const objects = k8s.KubernetesObjectApi.makeApiClient(kc);
    const custom = kc.makeApiClient(k8s.CustomObjectsApi);
    const core = kc.makeApiClient(k8s.CoreV1Api);
    for (const name of [REPLAY_NS, REPLAY_SERVER_NS]) await core.createNamespace({ body: { metadata: { name } } });
    const rate = await rawCreateRate(core, POOLS, 'raw');
    // The same creates through client-node's own KubeConfig, which opens a connection (TLS handshake with a
    // client certificate) per request: what the floor was measured with before.
    const perRequestRate = await rawCreateRate(mgmt.kubeConfig.makeApiClient(k8s.CoreV1Api), POOLS, 'raw-per-request');
    const ignition = await runIgnitionServer({
      kubeconfigPath: mgmt.kubeconfigPath,
      dir,
      namespace: NS,
      releases: ['1.36.3'],
      args: ['--log-level', 'warn'],
    });
    const release = ignition.releases['1.36.3'] ?? '';
    const controller = await startControllerProcess({
      kubeconfigPath: mgmt.kubeconfigPath,
      namespaces: [NS, REPLAY_NS, REPLAY_SERVER_NS],
      workers: IN_FLIGHT,
      ignition: { endpoint: ignition.endpoint, caPem: ignition.caPem },
    });
    const pools = watchPools(kc, custom);
    await pools.start();
    const progress = sampleProgress({
      pools: () => pools.list(NS),
      controller: () => controller.counts(NS),
      converged,
    });
    await controller.profile(OPTS['cpu-prof'] && `${OPTS['cpu-prof']}.${index}`);
    const processes = processesOf(
      mgmt,
      guest,
      () => controller.pid,
      () => ignition.proc.commandPid(),
    );
    const before = await Promise.all([scrapeApiserver(mgmt.kubeConfig), scrapeApiserver(guest.kubeConfig)]);
    const windowCpu = cpuStretch(processes);
    const started = performance.now();
    await inBatches([...Array(POOLS).keys()], IN_FLIGHT, (i) => objects.create(pool(i, release)));
    const created = performance.now();
    await pools.until(converged);
    await controller.drained();
    const seconds = (performance.now() - started) / 1000;
    const windowUse = windowCpu.stop();
    const [mgmtAfter, guestAfter] = await Promise.all([
      scrapeApiserver(mgmt.kubeConfig),
      scrapeApiserver(guest.kubeConfig),
    ]);
    const windowWork = scrapeDelta(before[0], mgmtAfter);
    const guestWork = scrapeDelta(before[1], guestAfter);
    const collections = await controller.stopProfile();
    // The server's payload verdict reaches each pool's status after its token: wait for it, so that the writes
    // below count it and the resync measures the resync alone.
    await pools.until(
      (p) => p.status?.conditions?.some((c) => c.type === 'ValidGeneratedPayload' && c.status === 'True') === true,
    );
    await controller.drained();
    const timeline = await progress.stop();
    const listed = (await core.listNamespacedSecret({ namespace: NS, labelSelector: 'kindling.dev/nodepool' })).items;
    const secrets = listed.length;
    const minted = listed.filter((s) => s.data?.[SECRET_KEYS.token] !== undefined).length;
    const { writes, byKind, reconciles, meanReconcileSeconds, events, sent } = await controller.figures(POOLS);
    // Writes the controller must make per pool: finalizer, token Secret, user-data Secret, child, status.
    const floorSeconds = (POOLS * 5) / rate;
    const resync = await controller.resync();
    const resyncWrites = resync.writes;
    await Promise.all([controller.stop(), pools.stop()]);
    await ignition.stop();
    const replayWrites = [...sent.values()].flat().length;
    const plan = { kc, pools: POOLS, inFlight: IN_FLIGHT, pool: (i: number) => pool(i, release), sent };
    const tokenSecrets = new Map(
      listed
        .filter((s) => s.metadata?.labels?.[LABELS.tokenSecret] === 'true')
        .map((s) => [s.metadata?.labels?.[LABELS.nodePool] ?? '', s]),
    );
    // A pool missing here would get no server writes, and the reference would quietly become the plain replay.
    if (tokenSecrets.size !== POOLS) throw new Error(`${tokenSecrets.size} token Secrets of ${POOLS} pools to replay`);
    const refs = await references(index, { plan, mgmt, guest, tokenSecrets, processes });
    const [replay, system, guestSystem] = [refs.plain, refs.system, refs.guest];
    const [sameWritesSeconds, systemSeconds] = [replay.seconds, system.seconds];
    out(`round ${index + 1} of ${ROUNDS}:`);
    out(
      `pools: ${POOLS} (half Replace, half InPlace); Secrets: ${secrets}; tokens minted by the ignition server: ${minted}; reconciles in flight: ${IN_FLIGHT}`,
    );
    out(
      `raw create rate (plain client, ${IN_FLIGHT} in flight, kept-alive connections): ${rate.toFixed(0)} objects/s; with a connection per request (client-node's KubeConfig): ${perRequestRate.toFixed(0)} objects/s`,
    );
    out(`pools created in ${((created - started) / 1000).toFixed(1)} s; all converged after ${seconds.toFixed(1)} s`);
    out(
      `floor (5 writes/pool ÷ raw rate): ${floorSeconds.toFixed(1)} s; ratio ours/floor: ${(seconds / floorSeconds).toFixed(2)}`,
    );
    out(
      `the same ${POOLS} pool creates and ${replayWrites} applies replayed by a plain client (${IN_FLIGHT} pools at a time): ${sameWritesSeconds.toFixed(1)} s; ratio ours/same writes: ${(seconds / sameWritesSeconds).toFixed(2)}`,
    );
    out(
      `the same, with the ignition server's writes of each pool (guest bootstrap token, one patch of mint and verdict): ${systemSeconds.toFixed(1)} s; ratio ours/system replay: ${(seconds / systemSeconds).toFixed(2)}`,
    );
    const withoutKindlingSeconds = secondsWithout(windowUse, processes, KINDLING_PROCESSES);
    out(
      `a floor for the window had the controller and the ignition server used no CPU and the other processes the same (their CPU seconds ÷ the cores): ${withoutKindlingSeconds.toFixed(1)} s, ${(withoutKindlingSeconds / sameWritesSeconds).toFixed(2)} × the plain replay`,
    );
    out(
      `the replays ran in this order: ${index % 2 === 0 ? 'plain, then with the server' : 'with the server, then plain'}`,
    );
    out(
      `the management apiserver's work: the window, the replay, the replay with the server's writes; then the guest's:`,
    );
    workTable([
      { name: 'window', work: windowWork },
      { name: 'replay', work: replay.work },
      { name: 'replay+server', work: system.work },
      { name: 'guest window', work: guestWork },
      { name: 'guest replay+s', work: guestSystem },
    ]).forEach(out);
    cpuTable(processes, [
      { name: 'window', cpu: windowUse },
      { name: 'replay', cpu: replay.cpu },
      { name: 'replay+server', cpu: system.cpu },
    ]).forEach(out);
    out(`the controller process's garbage collections over the window (their pauses): ${collections}`);
    out(`controller writes: ${writes} (${(writes / POOLS).toFixed(2)} per pool): ${byKind}`);
    out(
      `reconciles per pool, by result: ${reconciles}; a pool's reconcile took ${meanReconcileSeconds.toFixed(3)} s on average`,
    );
    out(`forced resync of all ${POOLS} pools: ${resyncWrites} writes in ${resync.seconds.toFixed(1)} s`);
    out(
      `Events recorded on condition transitions: ${events} (${(events / POOLS).toFixed(2)} per pool; not in the write counts above)`,
    );
    out(`pools at each step (the window, then until every payload verdict):\n${timeline.join('\n')}`);
    return {
      seconds,
      rate,
      floorSeconds,
      sameWritesSeconds,
      replayWrites,
      systemSeconds,
      withoutKindlingSeconds,
      perPool: writes / POOLS,
      resyncWrites,
    };
  } finally {
    await Promise.all([guest.stop(), mgmt.stop()]);
    await rm(dir, { recursive: true, force: true });
  }
}

const median = (values: number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1
    ? (sorted[mid] as number)
    : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
};

async function main(): Promise<void> {
  out(`load average at the start: ${loadAverage()}`);
  const rounds: Figures[] = [];
  for (let i = 0; i < ROUNDS; i++) rounds.push(await round(i));
  out(`load average at the end: ${loadAverage()}`);
  const m = (key: keyof Figures): number => median(rounds.map((r) => r[key]));
  const [seconds, floorSeconds, sameWritesSeconds, perPool] = [
    m('seconds'),
    m('floorSeconds'),
    m('sameWritesSeconds'),
    m('perPool'),
  ];
  const resyncWrites = Math.max(...rounds.map((r) => r.resyncWrites));
  const of = ROUNDS === 1 ? '' : ` (median of ${ROUNDS})`;
  if (ROUNDS > 1)
    out(
      `ratios ours/same writes by round: ${rounds.map((r) => (r.seconds / r.sameWritesSeconds).toFixed(2)).join(', ')}; ours/system replay: ${rounds.map((r) => (r.seconds / r.systemSeconds).toFixed(2)).join(', ')}; the floor without Kindling's CPU/same writes: ${rounds.map((r) => (r.withoutKindlingSeconds / r.sameWritesSeconds).toFixed(2)).join(', ')}`,
    );
  reportRows([
    {
      figure: `controller: ${POOLS} NodePools converge${of}`,
      value: `${seconds.toFixed(1)} s`,
      reference: `floor ${floorSeconds.toFixed(1)} s (5 writes/pool ÷ ${m('rate').toFixed(0)}/s raw)`,
      ratio: seconds / floorSeconds,
      target: '≤ 1.5',
      pass: seconds / floorSeconds <= 1.5,
    },
    {
      figure: `controller: ${POOLS} NodePools converge${of}`,
      value: `${seconds.toFixed(1)} s`,
      reference: `same ${POOLS} creates + ${m('replayWrites')} applies, plain client: ${sameWritesSeconds.toFixed(1)} s`,
      ratio: seconds / sameWritesSeconds,
      target: '≤ 1.2',
      pass: seconds / sameWritesSeconds <= 1.2,
    },
    {
      figure: `controller: ${POOLS} NodePools converge${of}`,
      value: `${seconds.toFixed(1)} s`,
      reference: `the same + the ignition server's writes, plain client: ${m('systemSeconds').toFixed(1)} s`,
      ratio: seconds / m('systemSeconds'),
      // Reported, not judged: the target reads against the plain replay above.
      target: '(reported)',
      pass: undefined,
    },
    {
      figure: `controller: a floor for the window without Kindling's CPU${of}`,
      value: `${m('withoutKindlingSeconds').toFixed(1)} s`,
      reference: `same ${POOLS} creates + ${m('replayWrites')} applies, plain client: ${sameWritesSeconds.toFixed(1)} s`,
      ratio: m('withoutKindlingSeconds') / sameWritesSeconds,
      // A floor for the ≤ 1.2 above, the other processes' CPU unchanged: their CPU seconds over the cores.
      target: '(reported)',
      pass: undefined,
    },
    {
      figure: `controller: writes per pool${of}`,
      value: perPool.toFixed(2),
      reference: '5 objects needed',
      ratio: perPool / 5,
      target: '≤ 1.0',
      pass: perPool <= 5,
    },
    {
      figure: 'controller: writes on a resync of every pool (most of any round)',
      value: String(resyncWrites),
      reference: '0',
      ratio: Number.NaN,
      target: '0',
      pass: resyncWrites === 0,
    },
  ]);
}

await main();
