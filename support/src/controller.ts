/**
 * The controller skeleton every deployable instantiates: informers (one per namespace served) whose events map objects to keys,
 * one WorkQueue of those keys (one reconcile in flight per key), its metrics and its failure log line.
 * - `start()` starts the informers, the primary one (the kind reconciled) last, so the first reconciles see
 *   complete caches of its children; then, in order, the parts that need those caches (guest-cluster sessions,
 *   the CSR approver).
 * - `stop()` stops the queue first (waiting for the reconciles in flight), then the parts and the informers.
 * - `synced` is every informer's and part's `synced`.
 * A component with several queues and no key mapping of its own (the ignition server, the CSR approver's
 * per-guest informers) takes the queue half alone: createKeyQueue.
 */
import type * as k8s from '#k8s';
import type { InformerEvent } from './informer.js';
import { NamespacedInformer, type Informer, type NamespacedInformerOptions } from './namespaced-informer.js';
import type { Logger } from './logger.js';
import type { QueueMetrics } from './metrics.js';
import { WorkQueue, type ReconcileResult } from './queue.js';
import { realClock, type Clock } from './timers.js';

export interface KeyQueueOptions {
  /** The queue's name: the `queue` label of its metrics. */
  name: string;
  log: Logger;
  reconcile: (key: string) => Promise<ReconcileResult | void>;
  /** Reconciles in flight at once (different keys); default 1. */
  workers?: number;
  /** The tenant of a key, served in turn with the others (WorkQueue's groupOf); default: one FIFO. */
  groupOf?: (key: string) => string;
  /** Workers one group may hold at once; default: all of them. */
  maxInFlightPerGroup?: number;
  clock?: Clock;
  queueMetrics?: QueueMetrics;
  /** The field naming the key in the line a failed reconcile logs (default `key`): `nodePool`, `node`… */
  keyField?: string;
  /** That line's message (default 'Reconcile failed: retrying with backoff'). */
  failureMessage?: string;
}

/** A WorkQueue whose outcomes feed the reconcile metrics and whose failures (before their backoff) are logged. */
export function createKeyQueue(opts: KeyQueueOptions): WorkQueue {
  const { name, log, queueMetrics } = opts;
  const keyField = opts.keyField ?? 'key';
  const message = opts.failureMessage ?? 'Reconcile failed: retrying with backoff';
  const queue = new WorkQueue({
    name,
    reconcile: opts.reconcile,
    concurrency: opts.workers ?? 1,
    clock: opts.clock ?? realClock,
    ...(opts.groupOf ? { groupOf: opts.groupOf } : {}),
    ...(opts.maxInFlightPerGroup === undefined ? {} : { maxInFlightPerGroup: opts.maxInFlightPerGroup }),
    onDone: (key, outcome, ms, err) => {
      queueMetrics?.observe(name, outcome, ms);
      if (outcome === 'error') log.warn({ err, [keyField]: key }, message);
    },
  });
  queueMetrics?.watch(queue);
  return queue;
}

/** An informer of the controller: what it lists and watches, and which keys its events wake. */
export interface Source<T extends k8s.KubernetesObject> extends Omit<NamespacedInformerOptions<T>, 'onEvent' | 'log'> {
  /** Default: the controller's logger. */
  log?: Logger;
  /** The keys an event wakes; none (or no toKeys) leaves the informer a cache the reconciles read. */
  toKeys?: (obj: T, event: InformerEvent) => Iterable<string>;
  /** The kind reconciled: started after every other informer; resyncAll queues its objects' keys; its delete
   * forgets the key's failures instead of queueing it. At most one. */
  primary?: boolean;
  /** What an event means beyond keys (called after they are queued). */
  onEvent?: (obj: T, event: InformerEvent) => void;
}

/** Something started once the informers are synced and stopped after the queue, e.g. GuestClusters. */
export interface Part {
  start(): Promise<void>;
  stop(): Promise<void>;
  /** Counted in the controller's `synced` when the part has it. */
  readonly synced?: boolean;
}

export interface ControllerOptions extends KeyQueueOptions {
  /** Started in order after the informers; stopped after the queue, beside the informers. */
  parts?: readonly Part[];
}

export interface Controller {
  readonly queue: WorkQueue;
  /** Every informer and part is synced. */
  readonly synced: boolean;
  /** Creates an informer whose events queue their keys; call before start(). */
  watch<T extends k8s.KubernetesObject>(source: Source<T>): Informer<T>;
  start(): Promise<void>;
  stop(): Promise<void>;
  /** Queues the keys of every object of the primary informer (of every informer without one): a resync. */
  resyncAll(): void;
}

/** What the controller keeps of each informer, free of its object type. */
interface Watched {
  informer: { start(): Promise<void>; stop(): Promise<void>; readonly synced: boolean };
  primary: boolean;
  resync: () => void;
}

export function createController(opts: ControllerOptions): Controller {
  const queue = createKeyQueue(opts);
  const parts = opts.parts ?? [];
  const watched: Watched[] = [];
  const primaries = (): Watched[] => watched.filter((w) => w.primary);
  return {
    queue,
    get synced() {
      return watched.every((w) => w.informer.synced) && parts.every((p) => p.synced !== false);
    },
    watch<T extends k8s.KubernetesObject>(source: Source<T>): Informer<T> {
      if (source.primary && primaries().length > 0)
        throw new Error(`controller ${opts.name} has a primary informer already`);
      const { toKeys, primary = false, onEvent, log, clock, ...informerOptions } = source;
      const informer = new NamespacedInformer<T>({
        ...informerOptions,
        log: log ?? opts.log,
        clock: clock ?? opts.clock,
        onEvent: (obj, event) => {
          for (const key of toKeys?.(obj, event) ?? []) {
            // The reconciled object is gone: its reconcile has nothing to do, and its failures are history.
            if (primary && event === 'delete') queue.forget(key);
            else queue.add(key);
          }
          onEvent?.(obj, event);
        },
      });
      const resync = (): void => {
        for (const obj of informer.list()) for (const key of toKeys?.(obj, 'resync') ?? []) queue.add(key);
      };
      watched.push({ informer, primary, resync });
      return informer;
    },
    async start() {
      await Promise.all(watched.filter((w) => !w.primary).map((w) => w.informer.start()));
      for (const w of primaries()) await w.informer.start();
      for (const part of parts) await part.start();
    },
    async stop() {
      await queue.stop();
      await Promise.all([...parts.map((p) => p.stop()), ...watched.map((w) => w.informer.stop())]);
    },
    resyncAll() {
      const primary = primaries();
      for (const w of primary.length > 0 ? primary : watched) w.resync();
    },
  };
}
