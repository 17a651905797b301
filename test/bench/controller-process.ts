/**
 * The NodePool controller of the benchmark in a process of its own, as production runs it: the benchmark's own
 * thousand creates and its watch of the pools no longer run on the controller's event loop. The controller is
 * made as `kindling nodepool-controller` makes it (its kubeconfig loaded by loadKubeConfig, the Node flags
 * that command restarts itself with), and records, for the benchmark, every apply it sends (the replay's input), its
 * writes and where each pool is along its Secrets and children. The benchmark asks through the IPC channel.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type * as k8s from '#k8s';
import { Registry } from 'prom-client';
import { ANNOTATIONS, LABELS, SECRET_KEYS } from '../../api/src/keys.js';
import { createLogger } from '../../support/src/logger.js';
import { loadKubeConfig } from '../../support/src/kubeconfig.js';
import { createQueueMetrics } from '../../support/src/metrics.js';
import { youngGenerationLaunch } from '../../support/src/young-generation.js';
import { startMemorySaverGovernor } from '../../support/src/memory-saver.js';
import { createNodePoolController } from '../../nodepool-controller/src/controller.js';
import { profileCpu, tallyGc, type ControllerCounts } from './controller-window.js';

export interface ControllerProcessOptions {
  kubeconfigPath: string;
  namespaces: string[];
  ignition: { endpoint: string; caPem: string };
  workers: number;
}

/** A write the controller sent: server-side apply of `body` (to the status subresource when `status`). */
export interface Sent {
  status: boolean;
  body: k8s.KubernetesObject;
}

/** What the controller did over the run. */
export interface ControllerFigures {
  writes: number;
  /** `verb kind count` per pool, from kindling_nodepool_writes_total. */
  byKind: string;
  /** `result count` per pool, from kindling_reconcile_total of the pools' queue. */
  reconciles: string;
  /** Mean seconds of a reconcile of the pools' queue (its writes' round trips, mostly). */
  meanReconcileSeconds: number;
  events: number;
  sent: Map<string, Sent[]>;
}

type Request =
  | { op: 'counts'; namespace: string }
  | { op: 'drained' }
  | { op: 'resync' }
  | { op: 'figures'; pools: number }
  | { op: 'profile'; path: string | undefined }
  | { op: 'stop-profile' }
  | { op: 'stop' };

export interface ControllerProcess {
  /** The process's pid, for its CPU seconds; undefined once it is gone. */
  readonly pid: number | undefined;
  counts(namespace: string): Promise<ControllerCounts>;
  /** Resolves once the controller's queue is empty with nothing in flight. */
  drained(): Promise<void>;
  /** Queues every pool, waits until drained: the writes it took and its seconds. */
  resync(): Promise<{ writes: number; seconds: number }>;
  figures(pools: number): Promise<ControllerFigures>;
  /** A CPU profile of the controller's process to `path` until stopProfile (nothing without a path), and a tally
   * of its garbage collections (always). */
  profile(path: string | undefined): Promise<void>;
  /** The garbage collections since `profile`, as a line. */
  stopProfile(): Promise<string>;
  stop(): Promise<void>;
}

const CHILD_ENV = 'KINDLING_BENCH_CONTROLLER';

/** Starts the controller's process; resolves once its informers are synced and it reconciles. */
export async function startControllerProcess(opts: ControllerProcessOptions): Promise<ControllerProcess> {
  // The Node flags `kindling nodepool-controller` restarts itself with (young-generation.ts), nothing given.
  const launch = youngGenerationLaunch('nodepool-controller', [], {}, []);
  const child = fork(fileURLToPath(import.meta.url), [], {
    execArgv: launch.restart ? launch.nodeFlags : [],
    env: { ...process.env, [CHILD_ENV]: JSON.stringify(opts) },
    serialization: 'advanced',
    stdio: 'inherit',
  });
  const ask = askerOf(child);
  await ask({ op: 'drained' });
  return {
    get pid() {
      return child.exitCode === null && child.signalCode === null ? child.pid : undefined;
    },
    counts: (namespace) => ask({ op: 'counts', namespace }) as Promise<ControllerCounts>,
    drained: async () => void (await ask({ op: 'drained' })),
    resync: () => ask({ op: 'resync' }) as Promise<{ writes: number; seconds: number }>,
    figures: (pools) => ask({ op: 'figures', pools }) as Promise<ControllerFigures>,
    profile: async (path) => void (await ask({ op: 'profile', path })),
    stopProfile: () => ask({ op: 'stop-profile' }) as Promise<string>,
    stop: async () => {
      const exited = new Promise((r) => child.once('exit', r));
      await ask({ op: 'stop' });
      await exited;
    },
  };
}

/** Requests carry an id and their answers name it: the child answers each as soon as it is done, in any order. */
function askerOf(child: ChildProcess): (req: Request) => Promise<unknown> {
  const waiting = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  let nextId = 0;
  child.on('message', (answer: { id: number; ok: boolean; value?: unknown; error?: string }) => {
    const w = waiting.get(answer.id);
    waiting.delete(answer.id);
    if (answer.ok) w?.resolve(answer.value);
    else w?.reject(new Error(`controller process: ${answer.error ?? 'failed'}`));
  });
  child.once('exit', (code) => {
    for (const w of waiting.values()) w.reject(new Error(`controller process exited (${String(code)})`));
    waiting.clear();
  });
  return (req) =>
    new Promise((resolve, reject) => {
      const id = nextId++;
      waiting.set(id, { resolve, reject });
      child.send({ id, req });
    });
}

/** Records every apply the controller's writer sends, by pool, in order. */
function recordApplies(writer: ReturnType<typeof createNodePoolController>['writer']): Map<string, Sent[]> {
  const byPool = new Map<string, Sent[]>();
  const record = (status: boolean, body: k8s.KubernetesObject): void => {
    const pool = body.kind === 'NodePool' ? body.metadata?.name : body.metadata?.labels?.[LABELS.nodePool];
    const sent = byPool.get(pool ?? '') ?? [];
    // Kept as sent: the reconciler builds each desired object afresh and never touches it after.
    sent.push({ status, body });
    byPool.set(pool ?? '', sent);
  };
  const apply = writer.apply.bind(writer);
  const applyStatus = writer.applyStatus.bind(writer);
  Object.assign(writer, {
    apply: (desired: k8s.KubernetesObject, cache?: never) => (record(false, desired), apply(desired, cache)),
    applyStatus: (desired: k8s.KubernetesObject, cache?: never, wake?: boolean) => (
      record(true, desired),
      applyStatus(desired, cache, wake)
    ),
  });
  return byPool;
}

/** The child: runs the controller and answers the benchmark's requests. */
async function child(opts: ControllerProcessOptions): Promise<void> {
  const registry = new Registry();
  const log = createLogger({ name: 'bench-controller', level: 'error' });
  // As runComponent does: the memory saver off while the controller is busy.
  startMemorySaverGovernor({ log, registry });
  const controller = createNodePoolController({
    kubeConfig: loadKubeConfig(opts.kubeconfigPath),
    namespaces: opts.namespaces,
    log,
    workers: opts.workers,
    registry,
    queueMetrics: createQueueMetrics(registry),
    config: { ignition: opts.ignition, tokenGraceMs: 7_200_000, maxSkewMinors: 3 },
  });
  const sent = recordApplies(controller.writer);
  // Listening from the start: a request that came before the listener would be lost.
  const started = controller.start();
  let profile = await profileCpu(undefined);
  let gc: ReturnType<typeof tallyGc> | undefined;
  const handlers: { [K in Request['op']]: (req: Extract<Request, { op: K }>) => Promise<unknown> } = {
    counts: ({ namespace }) => Promise.resolve(counts(controller.caches, namespace)),
    drained: () => controller.queue.drained(),
    resync: async () => {
      const before = controller.writer.count;
      const started = performance.now();
      controller.resyncAll();
      await new Promise((r) => setTimeout(r, 100));
      await controller.queue.drained();
      return { writes: controller.writer.count - before, seconds: (performance.now() - started) / 1000 };
    },
    figures: async ({ pools }) => ({
      writes: controller.writer.count,
      byKind: await perPool(registry, 'kindling_nodepool_writes_total', pools),
      reconciles: await perPool(registry, 'kindling_reconcile_total', pools),
      meanReconcileSeconds: await meanOf(registry, 'kindling_reconcile_duration_seconds', 'nodepool'),
      events: controller.events.count,
      sent,
    }),
    profile: async ({ path }) => {
      gc = tallyGc();
      profile = await profileCpu(path);
    },
    'stop-profile': async () => {
      await profile.stop();
      return gc?.stop() ?? 'none';
    },
    stop: () => controller.stop(),
  };
  // The benchmark gone (finished, killed by its timeout): so is its controller.
  process.once('disconnect', () => process.exit(1));
  process.on('message', ({ id, req }: { id: number; req: Request }) => {
    const handle = handlers[req.op] as (r: Request) => Promise<unknown>;
    void started
      .then(() => handle(req))
      .then(
        (value) => process.send?.({ id, ok: true, value }, () => req.op === 'stop' && process.exit(0)),
        (err: unknown) => process.send?.({ id, ok: false, error: String(err) }),
      );
  });
}

function counts(caches: ReturnType<typeof createNodePoolController>['caches'], ns: string): ControllerCounts {
  const secrets = caches.secrets.list(ns, () => true);
  const tokens = secrets.filter((s) => s.metadata?.labels?.[LABELS.tokenSecret] !== undefined);
  return {
    tokens: tokens.length,
    minted: tokens.filter((s) => s.data?.[SECRET_KEYS.token] !== undefined).length,
    verdicts: tokens.filter((s) => s.metadata?.annotations?.[ANNOTATIONS.payloadReason] !== undefined).length,
    userData: secrets.length - tokens.length,
    children: caches.machineDeployments.list(ns, () => true).length + caches.machineSets.list(ns, () => true).length,
  };
}

/** The mean of a histogram of `queue`, from its sum and count. */
async function meanOf(registry: Registry, metric: string, queue: string): Promise<number> {
  const values: { value: number; labels: object; metricName?: string }[] =
    (await registry.getSingleMetric(metric)?.get())?.values ?? [];
  const of = (name: string): number =>
    values.find((v) => v.metricName === `${metric}_${name}` && (v.labels as { queue?: string }).queue === queue)
      ?.value ?? 0;
  return of('sum') / (of('count') || 1);
}

/** A counter's values per pool, each named by its labels but the queue's (writes by verb and kind, reconciles
 * by result). */
async function perPool(registry: Registry, metric: string, pools: number): Promise<string> {
  const values = (await registry.getSingleMetric(metric)?.get())?.values ?? [];
  const named = (labels: object): string =>
    Object.entries(labels)
      .filter(([name]) => name !== 'queue')
      .map(([, value]) => String(value))
      .join(' ');
  return values.map((v) => `${named(v.labels)} ${(v.value / pools).toFixed(2)}`).join(', ');
}

const childOptions = process.env[CHILD_ENV];
if (childOptions !== undefined && process.send !== undefined)
  await child(JSON.parse(childOptions) as ControllerProcessOptions);
