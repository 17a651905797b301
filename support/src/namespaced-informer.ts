/**
 * An informer over the tenant namespaces a component serves: one ResilientInformer per namespace (each with its
 * own list, watch, relist and watchdog), behind the interface of one, as controller-runtime's multi-namespace
 * cache does. An object outside them is never listed, watched nor cached, so it cannot wake anything, and the
 * component needs no right to read it. With 'all' (an explicit "*") it is one cluster-wide informer.
 */
import type * as k8s from '#k8s';
import type { Namespaces } from './config.js';
import { ResilientInformer, type InformerOptions, type WatchFn } from './informer.js';
import type { ObjectKey } from './object-key.js';

/** What callers read of an informer, whether it watches one namespace, several or all of them. */
export interface Informer<T extends k8s.KubernetesObject> {
  readonly synced: boolean;
  /** Restarts after errors, summed over the namespaces. */
  readonly restarts: number;
  start(): Promise<void>;
  stop(): Promise<void>;
  get(key: ObjectKey): T | undefined;
  list(namespace?: string): T[];
  /** The objects whose `indexLabel` has `value` (none without an `indexLabel`). */
  listIndexed(value: string, namespace?: string): T[];
}

export interface NamespacedInformerOptions<T extends k8s.KubernetesObject> extends Omit<
  InformerOptions<T>,
  'list' | 'watch'
> {
  /** The namespaces watched, each by its own informer; 'all': one cluster-wide informer. */
  namespaces: Namespaces;
  /** `path` is the cluster-wide collection (/api/v1/secrets); a namespace's is derived from it. */
  list: (namespace?: string) => Promise<k8s.KubernetesListObject<T>>;
  /** The watch requests of a collection path (default: the informer's wireWatch); unit tests pass a fake. */
  watch?: (path: string) => WatchFn;
}

/** `/api/v1/secrets` in `tenant-a`: `/api/v1/namespaces/tenant-a/secrets` (core and group alike). */
export function namespacedPath(path: string, namespace: string): string {
  const i = path.lastIndexOf('/');
  return `${path.slice(0, i)}/namespaces/${namespace}${path.slice(i)}`;
}

export class NamespacedInformer<T extends k8s.KubernetesObject> implements Informer<T> {
  /** By namespace; '' keys the cluster-wide informer of 'all'. */
  readonly #informers: ReadonlyMap<string, ResilientInformer<T>>;

  constructor(opts: NamespacedInformerOptions<T>) {
    const { namespaces, list, watch, path, log, ...rest } = opts;
    const one = (namespace: string): ResilientInformer<T> => {
      const scoped = namespace === '' ? path : namespacedPath(path, namespace);
      return new ResilientInformer<T>({
        ...rest,
        path: scoped,
        list: () => list(namespace === '' ? undefined : namespace),
        watch: watch?.(scoped),
        log: namespace === '' ? log : log.child({ namespace }),
      });
    };
    this.#informers = new Map((namespaces === 'all' ? [''] : namespaces).map((ns) => [ns, one(ns)]));
  }

  get synced(): boolean {
    return [...this.#informers.values()].every((i) => i.synced);
  }

  get restarts(): number {
    return [...this.#informers.values()].reduce((sum, i) => sum + i.restarts, 0);
  }

  /** Starts every namespace's informer; resolves once each has listed (or when stopped first). */
  async start(): Promise<void> {
    await Promise.all([...this.#informers.values()].map((i) => i.start()));
  }

  async stop(): Promise<void> {
    await Promise.all([...this.#informers.values()].map((i) => i.stop()));
  }

  get(key: ObjectKey): T | undefined {
    return this.#of(key.namespace)?.get(key);
  }

  list(namespace?: string): T[] {
    if (namespace) return this.#of(namespace)?.list(namespace) ?? [];
    return [...this.#informers.values()].flatMap((i) => i.list());
  }

  listIndexed(value: string, namespace?: string): T[] {
    if (namespace) return this.#of(namespace)?.listIndexed(value, namespace) ?? [];
    return [...this.#informers.values()].flatMap((i) => i.listIndexed(value));
  }

  /** The informer holding a namespace's objects; none for a namespace not served. */
  #of(namespace: string | undefined): ResilientInformer<T> | undefined {
    return this.#informers.get('') ?? this.#informers.get(namespace ?? '');
  }
}

export interface CustomResource {
  group: string;
  version: string;
  plural: string;
  labelSelector?: string;
}

/** The collection path and the list (of one namespace, or of all) of a custom resource, for a NamespacedInformer. */
export function customResource<T extends k8s.KubernetesObject>(
  api: k8s.CustomObjectsApi,
  resource: CustomResource,
): Pick<NamespacedInformerOptions<T>, 'path' | 'list' | 'labelSelector'> {
  const { group, version, plural, labelSelector } = resource;
  const selector = labelSelector === undefined ? {} : { labelSelector };
  return {
    path: `/apis/${group}/${version}/${plural}`,
    ...selector,
    list: async (namespace) =>
      (namespace === undefined
        ? await api.listClusterCustomObject({ group, version, plural, ...selector })
        : await api.listNamespacedCustomObject({
            group,
            version,
            namespace,
            plural,
            ...selector,
          })) as k8s.KubernetesListObject<T>,
  };
}
