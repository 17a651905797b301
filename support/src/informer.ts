/**
 * A client-node informer that keeps going. client-node's ListWatch stops on any error other than 410 and
 * can stall silently; this wrapper restarts it after every error (with backoff) and relists on a watchdog,
 * emitting a resync of every cached object so level-based reconcilers heal missed events.
 */
import * as k8s from '@kubernetes/client-node';
import type { Logger } from './logger.js';
import { realClock, type Clock } from './timers.js';

export type InformerEvent = 'add' | 'update' | 'delete' | 'resync';

/**
 * A list function that reads in pages of `limit` (continue tokens), for informers over large objects: one
 * unpaginated list of many large Secrets can outlast the apiserver's request timeout and never complete.
 * The pages come from one snapshot, so the first page's resourceVersion is the whole list's.
 */
export function pagedList<T extends k8s.KubernetesObject>(
  page: (opts: { limit: number; _continue?: string }) => Promise<k8s.KubernetesListObject<T>>,
  limit = 100,
): () => Promise<k8s.KubernetesListObject<T>> {
  return async () => {
    const first = await page({ limit });
    const items = [...first.items];
    for (let next = first.metadata?._continue; next; ) {
      const more = await page({ limit, _continue: next });
      items.push(...more.items);
      next = more.metadata?._continue;
    }
    return { ...first, items, metadata: { ...first.metadata, _continue: undefined } };
  };
}

/** A Watch handing its objects through `transform` first, so the ListWatch caches what transform returns. */
class TransformingWatch<T> extends k8s.Watch {
  constructor(
    config: k8s.KubeConfig,
    readonly transform: (obj: T) => T,
  ) {
    super(config);
  }

  override watch(...[path, params, callback, done]: Parameters<k8s.Watch['watch']>): ReturnType<k8s.Watch['watch']> {
    const objectPhases = new Set(['ADDED', 'MODIFIED', 'DELETED']);
    return super.watch(path, params, (phase, obj, raw) => callback(phase, objectPhases.has(phase) ? this.transform(obj as T) : obj, raw), done);
  }
}

export interface InformerOptions<T extends k8s.KubernetesObject> {
  kubeConfig: k8s.KubeConfig;
  /** Watch path, e.g. /apis/cluster.x-k8s.io/v1beta2/machinesets. */
  path: string;
  list: () => Promise<k8s.KubernetesListObject<T>>;
  labelSelector?: string;
  fieldSelector?: string;
  log: Logger;
  onEvent: (obj: T, event: InformerEvent) => void;
  /** Applied to every listed or watched object before it is cached or handed to onEvent: keep only what the
   * component reads (the cache otherwise holds every object whole for the life of the process). */
  transform?: (obj: T) => T;
  /** Relist this often even when nothing failed (default 10 min). */
  watchdogMs?: number;
  maxRestartDelayMs?: number;
  clock?: Clock;
}

export class ResilientInformer<T extends k8s.KubernetesObject> {
  #opts: InformerOptions<T>;
  #clock: Clock;
  #lw: k8s.ListWatch<T>;
  #synced = false;
  #stopped = true;
  #failures = 0;
  #restartTimer: unknown;
  #watchdogTimer: unknown;
  #firstSync: Promise<void>;
  #resolveFirstSync!: () => void;
  /** Restarts after errors, for tests and metrics. */
  restarts = 0;

  constructor(opts: InformerOptions<T>) {
    this.#opts = opts;
    this.#clock = opts.clock ?? realClock;
    this.#firstSync = new Promise((r) => (this.#resolveFirstSync = r));
    const { transform } = opts;
    const watch = transform ? new TransformingWatch(opts.kubeConfig, transform) : new k8s.Watch(opts.kubeConfig);
    const list = transform ? async () => { const l = await opts.list(); return { ...l, items: l.items.map(transform) }; } : opts.list;
    this.#lw = new k8s.ListWatch<T>(opts.path, watch, list, false, opts.labelSelector, opts.fieldSelector);
    this.#lw.on(k8s.ADD, (o) => opts.onEvent(o, 'add'));
    this.#lw.on(k8s.UPDATE, (o) => opts.onEvent(o, 'update'));
    this.#lw.on(k8s.DELETE, (o) => opts.onEvent(o, 'delete'));
    this.#lw.on(k8s.ERROR, (err) => this.#onError(err));
  }

  /** True once a list has succeeded: the cache is a faithful picture of the cluster. */
  get synced(): boolean {
    return this.#synced;
  }

  /** Starts and resolves after the first successful list (retrying until then). */
  async start(): Promise<void> {
    this.#stopped = false;
    await this.#connect();
    await this.#firstSync;
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    this.#clock.clearTimeout(this.#restartTimer);
    this.#clock.clearTimeout(this.#watchdogTimer);
    await this.#lw.stop();
  }

  get(name: string, namespace?: string): T | undefined {
    return this.#lw.get(name, namespace);
  }

  list(namespace?: string): T[] {
    return [...this.#lw.list(namespace)];
  }

  async #connect(relist = false): Promise<void> {
    if (this.#stopped) return;
    let failed = false;
    const onFail = (err: unknown): void => void (failed ||= (err as { name?: string } | undefined)?.name !== 'AbortError');
    this.#lw.on(k8s.ERROR, onFail);
    try {
      // ListWatch relists only when it has no resourceVersion (its 410 path); a watchdog relist needs that.
      if (relist) (this.#lw as unknown as { resourceVersion: string }).resourceVersion = '';
      await this.#lw.start();
    } catch (err) {
      failed = true;
      this.#onError(err);
    } finally {
      this.#lw.off(k8s.ERROR, onFail);
    }
    if (failed || this.#stopped) return;
    this.#failures = 0;
    this.#synced = true;
    this.#resolveFirstSync();
    for (const obj of this.#lw.list()) this.#opts.onEvent(obj, 'resync');
    this.#clock.clearTimeout(this.#watchdogTimer);
    this.#watchdogTimer = this.#clock.setTimeout(() => void this.#restart(true), this.#opts.watchdogMs ?? 600_000);
  }

  async #restart(relist: boolean): Promise<void> {
    if (this.#stopped) return;
    await this.#lw.stop();
    await this.#connect(relist);
  }

  #onError(err: unknown): void {
    // ListWatch reports the abort of its own request (on stop, and at every restart) as an error.
    if (this.#stopped || (err as { name?: string } | undefined)?.name === 'AbortError') return;
    this.#failures++;
    this.restarts++;
    const delay = Math.min(this.#opts.maxRestartDelayMs ?? 30_000, 250 * 2 ** Math.min(this.#failures - 1, 10));
    this.#opts.log.warn({ err, path: this.#opts.path, retryInMs: delay }, 'Informer stopped on an error: restarting');
    this.#clock.clearTimeout(this.#restartTimer);
    this.#restartTimer = this.#clock.setTimeout(() => void this.#restart(this.#failures > 1), delay);
  }
}
