/**
 * What the reconciler reads (informer caches) and how it writes (server-side apply, delete, merge patch), with
 * one twist: an object the controller just wrote is remembered until its informer catches up, so a reconcile
 * that runs before the watch event arrives sees the write and does not repeat it. The informer's events
 * (OverlayCache#observe) tell when it has: a write it has moved past is forgotten, so an object someone else
 * deleted after the controller wrote it reads as absent instead of being served for the life of the process.
 */
import * as k8s from '#k8s';
import type { Counter } from 'prom-client';
import type { Applier } from '../../support/src/apply.js';
import { asRefusal, isNotFound } from '../../support/src/errors.js';
import type { InformerEvent } from '../../support/src/informer.js';
import { keyOf, keyString, type ObjectKey } from '../../support/src/object-key.js';
import type { OwnWrites } from './own-writes.js';

/** A minimal informer view (ResilientInformer fits). */
export interface CacheSource<T extends k8s.KubernetesObject> {
  get(key: ObjectKey): T | undefined;
  list(namespace?: string): T[];
  /** The objects whose indexed label has `value`, when the source keeps such an index (a superset is fine). */
  listIndexed?(value: string, namespace?: string): T[];
}

/** etcd resourceVersions are integers in practice; the API calls them opaque, so this is only a freshness hint. */
const rvOf = (o: k8s.KubernetesObject | undefined): number => Number(o?.metadata?.resourceVersion ?? 0) || 0;

/** Writes looked at per indexed list (and per informer event) to forget those the informer has caught up with. */
const SWEEP_PER_LIST = 4;

/** A write remembered: the object as the apiserver answered it, or null for a delete (`rv`: the deleted object's). */
export interface Written {
  obj: object | null;
  rv: number;
}

/**
 * Whether the informer's view of a key has caught up with the controller's write of it, so that view (the object,
 * or its absence) is the truth and the write is forgotten. `cached`: the resourceVersion of the informer's copy
 * (undefined: it holds none); `seen`: the newest resourceVersion among the events its watch of that namespace
 * delivered. A watch delivers a namespace's changes in resourceVersion order, so once it has delivered one at or
 * past the write, it has applied the write and all before it: a key it then does not hold was deleted since (or
 * left its label selector). An rv that is no number (0) proves nothing, and the write stays until its echo.
 */
export function caughtUp(w: Written, cached: number | undefined, seen: number): boolean {
  // Our delete: done once the informer drops the object, or holds one newer (created again since).
  if (w.obj === null) return cached === undefined || cached > w.rv;
  if (cached !== undefined) return cached >= w.rv;
  return w.rv > 0 && seen >= w.rv;
}

export class OverlayCache<T extends k8s.KubernetesObject> {
  readonly #source: CacheSource<T>;
  /** By namespace, then name, in the order remembered: a list reads only its namespace's writes, and the sweep
   * looks at the oldest. */
  readonly #written = new Map<string, Map<string, { obj: T | null; rv: number }>>();
  /** By namespace: the newest resourceVersion the informer's events carried (see caughtUp). */
  readonly #seen = new Map<string, number>();

  constructor(source: CacheSource<T>) {
    this.#source = source;
  }

  remember(obj: T): void {
    this.#remember(obj, obj);
  }

  rememberDeleted(obj: T): void {
    this.#remember(obj, null);
  }

  /** Writes remembered that the informer has not caught up with (what a leak of them would show). */
  get pending(): number {
    let count = 0;
    for (const written of this.#written.values()) count += written.size;
    return count;
  }

  /**
   * An event of the informer this cache reads, delivered after the informer applied it. Without these, a write
   * whose object someone else deleted was never forgotten (its echo never comes): every deleted NodePool (the
   * finalizer removal is a write) stayed listed for the life of the leader, and a deleted Secret looked present.
   */
  observe(obj: k8s.KubernetesObject, event: InformerEvent): void {
    const key = keyOf(obj);
    const rv = rvOf(obj);
    if (rv > this.#seenIn(key.namespace)) this.#seen.set(key.namespace, rv);
    if (event === 'delete') this.#deleted(key, rv);
    this.#pick(key.namespace, key.name, this.#source.get(key));
    this.#sweep(key.namespace);
  }

  get(key: ObjectKey): T | undefined {
    return this.#pick(key.namespace, key.name, this.#source.get(key));
  }

  /**
   * The namespace's objects that pass `filter`. A pool's lists run several times in every reconcile, and a
   * namespace holds thousands of Secrets beside a thousand pools: with `indexed`, the value of the label the
   * source indexes that `filter` requires, only that value's objects and the writes that pass `filter` are
   * looked at (a scan of the whole namespace, and of every write the informer has not caught up with, in each
   * list made a thousand pools' convergence quadratic); the filter still decides.
   */
  list(namespace: string, filter: (o: T) => boolean, indexed?: string): T[] {
    const listIndexed = this.#source.listIndexed?.bind(this.#source);
    if (indexed === undefined || listIndexed === undefined) return this.#scan(namespace, filter);
    this.#sweep(namespace);
    const names = new Set(listIndexed(indexed, namespace).map((o) => o.metadata?.name ?? ''));
    for (const name of this.#writtenPassing(namespace, filter)) names.add(name);
    const out: T[] = [];
    for (const name of names) {
      const obj = this.#pick(namespace, name, this.#source.get({ namespace, name }));
      if (obj !== undefined && filter(obj)) out.push(obj);
    }
    return out;
  }

  /** The names of the namespace's remembered writes whose written object passes `filter`. */
  #writtenPassing(namespace: string, filter: (o: T) => boolean): string[] {
    const names: string[] = [];
    for (const [name, w] of this.#written.get(namespace) ?? []) if (w.obj !== null && filter(w.obj)) names.push(name);
    return names;
  }

  /** The oldest writes of the namespace are looked at in every indexed list, so the ones the informer has caught
   * up with are forgotten even when nothing reads them again (a deleted pool's Secrets). */
  #sweep(namespace: string): void {
    let looked = 0;
    for (const name of this.#written.get(namespace)?.keys() ?? []) {
      if (looked++ >= SWEEP_PER_LIST) return;
      this.#pick(namespace, name, this.#source.get({ namespace, name }));
    }
  }

  /** Every object of the namespace through `filter`; only the few writes the informer has not caught up with
   * are looked up by key. */
  #scan(namespace: string, filter: (o: T) => boolean): T[] {
    const written = this.#written.get(namespace);
    const isWritten = (o: T): boolean =>
      written?.has(o.metadata?.name ?? '') === true && (o.metadata?.namespace ?? '') === namespace;
    const out = this.#source.list(namespace).filter((o) => filter(o) && !isWritten(o));
    for (const name of written?.keys() ?? []) {
      const obj = this.#pick(namespace, name, this.#source.get({ namespace, name }));
      if (obj !== undefined && filter(obj)) out.push(obj);
    }
    return out;
  }

  #remember(key: T, obj: T | null): void {
    const namespace = key.metadata?.namespace ?? '';
    const name = key.metadata?.name ?? '';
    let written = this.#written.get(namespace);
    if (!written) this.#written.set(namespace, (written = new Map<string, { obj: T | null; rv: number }>()));
    // Deleted first, so a rewrite moves to the back: the sweep's front stays the oldest writes.
    written.delete(name);
    written.set(name, { obj, rv: rvOf(key) });
    // The informer may be past the write already (its delete can arrive before the answer to the finalizer's
    // removal): then it is not remembered at all.
    this.#pick(namespace, name, this.#source.get({ namespace, name }));
  }

  #seenIn(namespace: string): number {
    return this.#seen.get(namespace) ?? 0;
  }

  /** The key's own delete, at or past the write, settles it even when resourceVersions are no numbers. */
  #deleted({ namespace, name }: ObjectKey, rv: number): void {
    const w = this.#written.get(namespace)?.get(name);
    if (w?.obj && rv >= w.rv && !this.#source.get({ namespace, name })) this.#forget(namespace, name);
  }

  #forget(namespace: string, name: string): void {
    const written = this.#written.get(namespace);
    written?.delete(name);
    if (written?.size === 0) this.#written.delete(namespace);
  }

  #pick(namespace: string, name: string, cached: T | undefined): T | undefined {
    const w = this.#written.get(namespace)?.get(name);
    if (!w) return cached;
    if (caughtUp(w, cached && rvOf(cached), this.#seenIn(namespace))) {
      this.#forget(namespace, name);
      return cached;
    }
    return w.obj ?? undefined;
  }
}

export interface Writer {
  apply<T extends k8s.KubernetesObject>(desired: T, cache?: OverlayCache<T>): Promise<T>;
  /** `wakeOnEcho`: the status is one the next reconcile reads back (see OwnWrites). */
  applyStatus<T extends k8s.KubernetesObject>(desired: T, cache?: OverlayCache<T>, wakeOnEcho?: boolean): Promise<T>;
  mergePatch<T extends k8s.KubernetesObject>(target: T, patch: object, cache?: OverlayCache<T>): Promise<T>;
  remove<T extends k8s.KubernetesObject>(live: T, cache?: OverlayCache<T>): Promise<void>;
  /** Writes so far (applies, patches, deletes): the benchmark's and the no-op tests' measure. */
  readonly count: number;
}

/** With `own`, the applies' answers are remembered there, so their watch echoes wake no reconcile. */
export function createWriter(
  kc: k8s.KubeConfig,
  applier: Applier,
  counter?: Counter<'verb' | 'kind'>,
  own?: OwnWrites,
): Writer {
  const objects = k8s.KubernetesObjectApi.makeApiClient(kc);
  const tracked = <T extends k8s.KubernetesObject>(
    desired: T,
    write: () => Promise<T>,
    wakeOnEcho = false,
  ): Promise<T> => (own ? own.track(desired.kind ?? '', desired, write, wakeOnEcho) : write());
  let count = 0;
  const record = (verb: string, obj: k8s.KubernetesObject): void => {
    count++;
    counter?.inc({ verb, kind: obj.kind ?? '' });
  };
  return {
    get count() {
      return count;
    },
    async apply(desired, cache) {
      record('apply', desired);
      const live = await tracked(desired, () => applier.apply(desired)).catch((err: unknown) => {
        throw asRefusal(err, desired.kind ?? '', keyString(keyOf(desired))) ?? err;
      });
      cache?.remember(live);
      return live;
    },
    async applyStatus(desired, cache, wakeOnEcho) {
      record('status', desired);
      const live = await tracked(desired, () => applier.applyStatus(desired), wakeOnEcho);
      cache?.remember(live);
      return live;
    },
    async mergePatch(target, patch, cache) {
      record('patch', target);
      const live = await applier.mergePatch<typeof target>(target, patch).catch((err: unknown) => {
        throw asRefusal(err, target.kind ?? '', keyString(keyOf(target))) ?? err;
      });
      cache?.remember(live);
      return live;
    },
    async remove(live, cache) {
      record('delete', live);
      try {
        await objects.delete({
          apiVersion: live.apiVersion,
          kind: live.kind,
          metadata: { name: live.metadata?.name, namespace: live.metadata?.namespace },
        });
      } catch (err) {
        if (!isNotFound(err))
          throw new Error(`failed to delete ${live.kind ?? ''} ${keyString(keyOf(live))}`, { cause: err });
      }
      cache?.rememberDeleted(live);
    },
  };
}
