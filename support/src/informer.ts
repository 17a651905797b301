/**
 * A list-watch cache that keeps going. One loop owns the watch, so there is never more than one request at
 * a time and an old watch is aborted (and its late events ignored) before the next one starts:
 * - it lists, then watches from the list's resourceVersion; a watch that ends is started again from the last
 *   resourceVersion seen; a 410 (Gone), the watchdog, or a watch down for too long relist;
 * - errors, and watches that end before they proved healthy, back off exponentially (250 ms → max); the
 *   backoff starts from its base again only after a watch stayed connected for `healthyAfterMs`, so a watch
 *   that connects and breaks at once cannot spin;
 * - `synced` is false until a list succeeded, and again while the watch has been down for `staleAfterMs`,
 *   until a relist succeeds: readiness reports a stale cache instead of serving it;
 * - after every (re)list it emits a `resync` of every cached object, so level-based reconcilers heal missed events.
 */
import { isDeepStrictEqual } from 'node:util';
import * as k8s from '#k8s';
import { statusCode } from './errors.js';
import type { Logger } from './logger.js';
import { keyOf, type ObjectKey } from './object-key.js';
import { realClock, type Clock } from './timers.js';
import { watchEvents } from './wire.js';

export type InformerEvent = 'add' | 'update' | 'delete' | 'resync';

/**
 * Items a paged list holds at most across its pages (pagedList's default budget): far above any list this project
 * makes, and a bound on what a server that pages without end (a tenant's "guest apiserver") can make this process
 * keep. A list past it fails; its informer then backs off and lists again, as after any failed list.
 */
export const PAGED_LIST_MAX_ITEMS = 100_000;

export interface PagedListBudget {
  /** Items across all pages (default PAGED_LIST_MAX_ITEMS). */
  maxItems?: number;
  /** Pages, empty ones included (default: twice as many as maxItems takes in full pages). */
  maxPages?: number;
}

/**
 * A list function that reads in pages of `limit` (continue tokens), for informers over large objects: one
 * unpaginated list of many large Secrets can outlast the apiserver's request timeout and never complete.
 * The pages come from one snapshot, so the first page's resourceVersion is the whole list's.
 *
 * The server decides how long it hands out continue tokens, so the list has a budget: past maxItems items, or
 * maxPages pages (empty pages with a token hold nothing but never end either), it fails instead of growing. An
 * aborted signal stops it before the next page; the page function gets the signal too, for its request.
 */
export function pagedList<T extends k8s.KubernetesObject>(
  page: (opts: { limit: number; _continue?: string }, signal?: AbortSignal) => Promise<k8s.KubernetesListObject<T>>,
  limit = 100,
  budget: PagedListBudget = {},
): (signal?: AbortSignal) => Promise<k8s.KubernetesListObject<T>> {
  const maxItems = budget.maxItems ?? PAGED_LIST_MAX_ITEMS;
  const maxPages = budget.maxPages ?? 2 * Math.ceil(maxItems / limit);
  return async (signal) => {
    signal?.throwIfAborted();
    const first = await page({ limit }, signal);
    const items: T[] = [];
    for (let list = first, pages = 1; ; pages++) {
      // Counted before it is kept: a page past the budget is dropped with the rest.
      const held = items.length + list.items.length;
      if (held > maxItems)
        throw new Error(`the list passed its budget of ${maxItems} items (${held} in ${pages} pages): given up`);
      items.push(...list.items);
      const next = list.metadata?._continue;
      if (!next) break;
      if (pages >= maxPages)
        throw new Error(`the list went on past its budget of ${maxPages} pages (${items.length} items): given up`);
      signal?.throwIfAborted();
      list = await page({ limit, _continue: next }, signal);
    }
    return { ...first, items, metadata: { ...first.metadata, _continue: undefined } };
  };
}

export interface WatchRequest {
  query: Record<string, string | number | boolean>;
  /** Aborting it ends the watch; the promise then resolves and no further event is delivered. */
  signal: AbortSignal;
  /** The apiserver accepted the watch (HTTP 200). */
  onConnected: () => void;
  onEvent: (type: string, object: unknown) => void;
}

/** One watch request: resolves when it ends (closed by the server, or aborted), rejects on an error. */
export type WatchFn = (req: WatchRequest) => Promise<void>;

/**
 * How long a connect, or an open watch, may stay silent before the watch is given up as dead. The apiserver
 * sends a watch that asked for bookmarks one about every minute (its cacher's bookmark frequency) when
 * nothing changes; client-node's Watch, with its own 30 s, ended every quiet watch, and so reconnected each
 * one (a new TLS handshake, a new watch on the apiserver) twice a minute: with a dozen watches per tenant, most
 * of the idle CPU each tenant cost (docs/benchmarks.md, cost per tenant).
 */
export const WATCH_SILENCE_MS = 90_000;

/**
 * A WatchFn on the wire (wire.ts): the watch of `path` on the kubeconfig's apiserver, failed once a connect or an
 * open watch stays silent for WATCH_SILENCE_MS. client-node's Watch read every event through web streams and
 * readline, and could not abort a connect in progress.
 */
export function wireWatch(kubeConfig: k8s.KubeConfig, path: string, silenceMs = WATCH_SILENCE_MS): WatchFn {
  return ({ query, signal, onConnected, onEvent }) => {
    const cluster = kubeConfig.getCurrentCluster();
    if (!cluster) return Promise.reject(new Error('the kubeconfig has no current cluster'));
    const params = new URLSearchParams({ watch: 'true' });
    for (const [key, value] of Object.entries(query)) params.set(key, String(value));
    const url = `${cluster.server}${path}?${params.toString()}`;
    return watchEvents(kubeConfig, { url, signal, silenceMs, onConnected, onEvent });
  };
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
  /** With a transform: an update that leaves the transformed object as it was (a Node's heartbeat, when
   * conditions' times are dropped) is cached for its resourceVersion but not emitted, for components that act
   * only on what the transform keeps. Off by default: some act on any update (a nudge to decide again). */
  quietWhenUnchanged?: boolean;
  /** A label whose value indexes the cache (listIndexed): callers that list one value's objects of a namespace
   * in every reconcile read those few, not every object of the namespace. */
  indexLabel?: string;
  /** Relist this often even when nothing failed (default 10 min). */
  watchdogMs?: number;
  maxRestartDelayMs?: number;
  /** A watch connected this long was healthy: the restart backoff starts from its base again (default 30 s). */
  healthyAfterMs?: number;
  /** `synced` turns false once the watch has been down this long, until a relist succeeds (default 60 s). */
  staleAfterMs?: number;
  clock?: Clock;
  /** The watch requests (default: wireWatch on kubeConfig and path); unit tests pass a fake. */
  watch?: WatchFn;
}

const BASE_RESTART_DELAY_MS = 250;

/** One list-and-watch attempt of the loop. */
interface Round {
  controller: AbortController;
  connectedAt?: number;
  /** An ERROR event the watch delivered (e.g. 410 Gone); the round ends on it. */
  error?: Error;
  /** Aborted on purpose to relist (watchdog), not a failure. */
  relist?: boolean;
}

export class ResilientInformer<T extends k8s.KubernetesObject> {
  #opts: InformerOptions<T>;
  #clock: Clock;
  #watch: WatchFn;
  #healthyAfterMs: number;
  #staleAfterMs: number;
  #maxRestartDelayMs: number;
  #objects = new Map<string, Map<string, T>>();
  /** By namespace, then the value of `indexLabel`, then name; empty without an `indexLabel`. */
  #index = new Map<string, Map<string, Map<string, T>>>();
  #resourceVersion = '';
  #listed = false;
  #relist = true;
  /** Since when the cache has had no watch feeding it; undefined while one is connected. */
  #downSince: number | undefined;
  #failures = 0;
  #round: Round | undefined;
  #loop: Promise<void> | undefined;
  #wake: (() => void) | undefined;
  #watchdogTimer: unknown;
  #stopped = true;
  #firstSync: Promise<void>;
  #resolveFirstSync!: () => void;
  /** Restarts after errors, for tests and metrics. */
  restarts = 0;

  constructor(opts: InformerOptions<T>) {
    this.#opts = opts;
    this.#clock = opts.clock ?? realClock;
    this.#watch = opts.watch ?? wireWatch(opts.kubeConfig, opts.path);
    this.#healthyAfterMs = opts.healthyAfterMs ?? 30_000;
    this.#staleAfterMs = opts.staleAfterMs ?? 60_000;
    this.#maxRestartDelayMs = opts.maxRestartDelayMs ?? 30_000;
    this.#firstSync = new Promise((r) => (this.#resolveFirstSync = r));
  }

  /** A list has succeeded and the watch has not been down for longer than staleAfterMs since. */
  get synced(): boolean {
    return this.#listed && !this.#stale();
  }

  /** Starts and resolves after the first successful list (retrying until then), or when stopped first. */
  async start(): Promise<void> {
    if (!this.#loop) {
      this.#stopped = false;
      this.#downSince = this.#clock.now();
      this.#firstSync = new Promise((r) => (this.#resolveFirstSync = r));
      this.#loop = this.#run();
    }
    await this.#firstSync;
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    this.#clock.clearTimeout(this.#watchdogTimer);
    this.#round?.controller.abort();
    this.#wake?.();
    this.#resolveFirstSync();
    await this.#loop;
    this.#loop = undefined;
  }

  get({ namespace, name }: ObjectKey): T | undefined {
    return this.#objects.get(namespace)?.get(name);
  }

  list(namespace?: string): T[] {
    if (namespace) return [...(this.#objects.get(namespace)?.values() ?? [])];
    return [...this.#objects.values()].flatMap((objects) => [...objects.values()]);
  }

  /** The objects whose `indexLabel` has `value`, in `namespace` (every namespace when absent). */
  listIndexed(value: string, namespace?: string): T[] {
    if (namespace !== undefined) return [...(this.#index.get(namespace)?.get(value)?.values() ?? [])];
    return [...this.#index.values()].flatMap((byValue) => [...(byValue.get(value)?.values() ?? [])]);
  }

  #stale(): boolean {
    return this.#downSince !== undefined && this.#clock.now() - this.#downSince >= this.#staleAfterMs;
  }

  async #run(): Promise<void> {
    while (!this.#stopped) {
      const round: Round = { controller: new AbortController() };
      this.#round = round;
      const delay = await this.#runRound(round);
      if (delay > 0 && !this.#stopped) await this.#sleep(delay);
    }
  }

  /** Lists when needed, then watches until the watch ends; returns how long to wait before the next round. */
  async #runRound(round: Round): Promise<number> {
    const { signal } = round.controller;
    try {
      if (this.#relist || this.#stale()) await this.#relistNow(signal);
      await this.#watch({
        query: this.#query(),
        signal,
        onConnected: () => {
          round.connectedAt = this.#clock.now();
          this.#downSince = undefined;
        },
        onEvent: (type, object) => this.#onWatchEvent(round, type, object),
      });
      return this.#ended(round, round.error);
    } catch (err) {
      return this.#ended(round, err);
    }
  }

  #ended(round: Round, err: unknown): number {
    const lived = this.#wentDown(round);
    if (this.#stopped || round.relist) return 0;
    const healthy = lived >= this.#healthyAfterMs;
    if (healthy) this.#failures = 0;
    if (statusCode(err) === 410) {
      this.#relist = true;
      return 0;
    }
    const ordinary = ordinaryEnd(err, lived >= 0);
    if (ordinary && healthy) return 0;
    // Anything else, including a watch that ended before it proved healthy, backs off: a flapping watch cannot spin.
    return this.#backOff(ordinary ? undefined : err);
  }

  /** Marks the cache as unfed from now if the round's watch had connected; returns how long it was connected (-1: never). */
  #wentDown(round: Round): number {
    if (round.connectedAt === undefined) return -1;
    this.#downSince ??= this.#clock.now();
    return this.#clock.now() - round.connectedAt;
  }

  #backOff(err: unknown): number {
    this.#failures++;
    const delay = Math.min(this.#maxRestartDelayMs, BASE_RESTART_DELAY_MS * 2 ** Math.min(this.#failures - 1, 10));
    if (err !== undefined) {
      this.restarts++;
      this.#opts.log.warn({ err, path: this.#opts.path, retryInMs: delay }, 'Informer stopped on an error: restarting');
    }
    return delay;
  }

  async #relistNow(signal: AbortSignal): Promise<void> {
    this.#relist = false;
    let list: k8s.KubernetesListObject<T>;
    try {
      list = await abortable(this.#opts.list(), signal);
    } catch (err) {
      this.#relist = true;
      throw err;
    }
    this.#replaceAll(list.items.flatMap((o) => this.#listedCopy(o)));
    this.#resourceVersion = list.metadata?.resourceVersion ?? '';
    this.#listed = true;
    // The cache is a faithful picture as of now, whether or not the watch connects next.
    this.#downSince = this.#clock.now();
    this.#resolveFirstSync();
    for (const obj of this.list()) this.#opts.onEvent(obj, 'resync');
    this.#clock.clearTimeout(this.#watchdogTimer);
    this.#watchdogTimer = this.#clock.setTimeout(() => this.#watchdog(), this.#opts.watchdogMs ?? 600_000);
  }

  #watchdog(): void {
    this.#relist = true;
    const round = this.#round;
    if (!round || round.controller.signal.aborted) return;
    round.relist = true;
    round.controller.abort();
  }

  #query(): Record<string, string | number | boolean> {
    const { labelSelector, fieldSelector } = this.#opts;
    return {
      resourceVersion: this.#resourceVersion,
      allowWatchBookmarks: true,
      // Like client-go: the server ends each watch after 5–10 min, spreading the reconnects of many clients.
      timeoutSeconds: 300 + Math.floor(Math.random() * 300),
      ...(labelSelector === undefined ? {} : { labelSelector }),
      ...(fieldSelector === undefined ? {} : { fieldSelector }),
    };
  }

  #onWatchEvent(round: Round, type: string, object: unknown): void {
    if (round.controller.signal.aborted) return;
    if (type === 'ERROR') return this.#watchError(round, object as k8s.V1Status);
    // A bookmark carries a resourceVersion and nothing else of an object: a transform would read fields it lacks.
    if (type === 'BOOKMARK') return this.#seen(object as k8s.KubernetesObject);
    try {
      const obj = this.#transformed(object as T);
      if (type === 'ADDED' || type === 'MODIFIED') this.#upsert(obj);
      else if (type === 'DELETED') this.#remove(obj);
    } catch (err) {
      // Thrown out of the watch, it would end it, and the next watch would start before this very event: an object
      // a tenant wrote that a transform or a handler cannot take would stall the informer of every tenant.
      this.#opts.log.warn({ err, path: this.#opts.path, object: keyOf(object as T) }, 'Informer skipped a watch event');
    }
    this.#seen(object as T);
  }

  #watchError(round: Round, status: k8s.V1Status): void {
    round.error = Object.assign(new Error(`watch error: ${status.message ?? status.reason ?? 'unknown'}`), {
      code: status.code,
    });
    round.controller.abort();
  }

  /** The watch resumes after `obj`'s resourceVersion. */
  #seen(obj: k8s.KubernetesObject): void {
    this.#resourceVersion = obj.metadata?.resourceVersion ?? this.#resourceVersion;
  }

  /**
   * A listed object as the cache keeps it. One a transform cannot take keeps its cached copy, if any, as its watch
   * event would (#onWatchEvent): thrown, it would fail every relist, and the informer of every tenant would stall.
   */
  #listedCopy(obj: T): T[] {
    try {
      return [this.#transformed(obj)];
    } catch (err) {
      this.#opts.log.warn({ err, path: this.#opts.path, object: keyOf(obj) }, 'Informer skipped a listed object');
      const cached = this.get(keyOf(obj));
      return cached ? [cached] : [];
    }
  }

  #transformed(obj: T): T {
    return this.#opts.transform ? this.#opts.transform(obj) : obj;
  }

  /** Replaces the cache with a list: deletes for what is gone, then adds and updates. */
  #replaceAll(items: T[]): void {
    const old = this.#objects;
    this.#objects = new Map<string, Map<string, T>>();
    this.#index = new Map<string, Map<string, Map<string, T>>>();
    for (const obj of items) this.#put(obj);
    for (const [namespace, objects] of old)
      for (const [name, obj] of objects) if (!this.get({ namespace, name })) this.#opts.onEvent(obj, 'delete');
    for (const obj of items) this.#emitChange(old.get(namespaceOf(obj))?.get(nameOf(obj)), obj);
  }

  #upsert(obj: T): void {
    const old = this.get(keyOf(obj));
    this.#put(obj);
    this.#emitChange(old, obj);
  }

  #emitChange(old: T | undefined, obj: T): void {
    if (!old) this.#opts.onEvent(obj, 'add');
    else if (old.metadata?.resourceVersion !== obj.metadata?.resourceVersion && !this.#sameSlim(old, obj))
      this.#opts.onEvent(obj, 'update');
  }

  /** Two transformed versions of an object that differ in nothing but their resourceVersion. */
  #sameSlim(old: T, obj: T): boolean {
    if (!this.#opts.transform || !this.#opts.quietWhenUnchanged) return false;
    const bare = (o: T): T => ({ ...o, metadata: { ...o.metadata, resourceVersion: undefined } });
    return isDeepStrictEqual(bare(old), bare(obj));
  }

  #put(obj: T): void {
    const namespace = namespaceOf(obj);
    let objects = this.#objects.get(namespace);
    if (!objects) this.#objects.set(namespace, (objects = new Map<string, T>()));
    const old = objects.get(nameOf(obj));
    if (old) this.#removeFromIndex(old);
    objects.set(nameOf(obj), obj);
    this.#addToIndex(obj);
  }

  #remove(obj: T): void {
    const namespace = namespaceOf(obj);
    const objects = this.#objects.get(namespace);
    const old = objects?.get(nameOf(obj));
    if (!objects || !old) return;
    objects.delete(nameOf(obj));
    this.#removeFromIndex(old);
    if (objects.size === 0) this.#objects.delete(namespace);
    this.#opts.onEvent(obj, 'delete');
  }

  #addToIndex(obj: T): void {
    const value = this.#indexValue(obj);
    if (value === undefined) return;
    let byValue = this.#index.get(namespaceOf(obj));
    if (!byValue) this.#index.set(namespaceOf(obj), (byValue = new Map<string, Map<string, T>>()));
    let objects = byValue.get(value);
    if (!objects) byValue.set(value, (objects = new Map<string, T>()));
    objects.set(nameOf(obj), obj);
  }

  #removeFromIndex(obj: T): void {
    const value = this.#indexValue(obj);
    if (value === undefined) return;
    const byValue = this.#index.get(namespaceOf(obj));
    const objects = byValue?.get(value);
    objects?.delete(nameOf(obj));
    if (objects?.size === 0) byValue?.delete(value);
    if (byValue?.size === 0) this.#index.delete(namespaceOf(obj));
  }

  #indexValue(obj: T): string | undefined {
    const label = this.#opts.indexLabel;
    return label === undefined ? undefined : obj.metadata?.labels?.[label];
  }

  #sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = this.#clock.setTimeout(resolve, ms);
      this.#wake = () => {
        this.#clock.clearTimeout(timer);
        resolve();
      };
    });
  }
}

/** The server closed the watch, or (WATCH_SILENCE_MS) a connected watch stayed silent. */
const ordinaryEnd = (err: unknown, connected: boolean): boolean =>
  err === undefined || (connected && (err as Error).name === 'TimeoutError');

const namespaceOf = (obj: k8s.KubernetesObject): string => obj.metadata?.namespace ?? '';
const nameOf = (obj: k8s.KubernetesObject): string => obj.metadata?.name ?? '';

/** The promise, or its signal's abort, whichever comes first. */
function abortable<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason as Error);
  return new Promise((resolve, reject) => {
    const onAbort = (): void => reject(signal.reason as Error);
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}
