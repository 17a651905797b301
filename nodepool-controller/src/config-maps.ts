/**
 * The ConfigMaps the NodePools reference (`spec.config`), and no others: one list-and-watch per referenced name
 * (a `metadata.name` field selector in the pool's own namespace), opened when a pool starts naming it and closed
 * when no pool of that namespace does any more. A tenant's other ConfigMaps, however many or large, never reach
 * this process, and users label nothing.
 *
 * A name whose watch has not listed yet is not "missing": get throws NotReadyError, so the reconcile waits for it
 * quietly instead of reporting ConfigMapMissing for a ConfigMap that exists.
 */
import * as k8s from '#k8s';
import type { NodePool } from '../../api/src/nodepool.js';
import { NotReadyError } from '../../support/src/errors.js';
import { ResilientInformer } from '../../support/src/informer.js';
import type { Logger } from '../../support/src/logger.js';
import type { Clock } from '../../support/src/timers.js';
import type { CacheSource } from './store.js';
import { keyString, type ObjectKey } from '../../support/src/object-key.js';

type ConfigMap = k8s.V1ConfigMap;

export interface ReferencedConfigMapsOptions {
  kubeConfig: k8s.KubeConfig;
  log: Logger;
  /** The NodePools of a namespace, from their informer. */
  pools: (namespace: string) => readonly NodePool[];
  /** A referenced object changed: the key of every pool naming it is woken. */
  wake: (poolKey: string) => void;
  clock?: Clock;
  /** Relist period of each watch. */
  watchdogMs?: number;
}

const NOT_LISTED_RETRY_MS = 250;

/** The ConfigMaps `pool` names, by `namespace/name`. */
export const configMapKeys = (pool: NodePool): string[] =>
  (pool.spec.config ?? []).map((c) => keyString({ namespace: pool.metadata.namespace ?? '', name: c.name }));

export class ReferencedConfigMaps implements CacheSource<ConfigMap> {
  readonly #opts: ReferencedConfigMapsOptions;
  readonly #core: k8s.CoreV1Api;
  /** By `namespace/name`. */
  readonly #watches = new Map<string, ResilientInformer<ConfigMap>>();
  #stopped = false;

  constructor(opts: ReferencedConfigMapsOptions) {
    this.#opts = opts;
    this.#core = opts.kubeConfig.makeApiClient(k8s.CoreV1Api);
  }

  /** Every watch has listed at least once. */
  get synced(): boolean {
    return [...this.#watches.values()].every((w) => w.synced);
  }

  /** A pool of the namespace changed: opens the watches of names newly referenced, closes the ones no longer. */
  poolChanged(namespace: string): void {
    if (this.#stopped) return;
    const wanted = new Set(this.#opts.pools(namespace).flatMap(configMapKeys));
    for (const key of wanted) if (!this.#watches.has(key)) this.#open(namespace, key);
    for (const [key, watch] of this.#watches)
      if (key.startsWith(`${namespace}/`) && !wanted.has(key)) {
        this.#watches.delete(key);
        void watch.stop();
      }
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    const watches = [...this.#watches.values()];
    this.#watches.clear();
    await Promise.all(watches.map((w) => w.stop()));
  }

  get(key: ObjectKey): ConfigMap | undefined {
    const watch = this.#watches.get(keyString(key));
    if (!watch?.synced) throw new NotReadyError(`ConfigMap ${keyString(key)} is being read`, NOT_LISTED_RETRY_MS);
    return watch.get(key);
  }

  list(namespace?: string): ConfigMap[] {
    return [...this.#watches.values()].flatMap((w) => w.list(namespace));
  }

  #open(namespace: string, key: string): void {
    const name = key.slice(namespace.length + 1);
    const fieldSelector = `metadata.name=${name}`;
    const watch = new ResilientInformer<ConfigMap>({
      kubeConfig: this.#opts.kubeConfig,
      path: `/api/v1/namespaces/${namespace}/configmaps`,
      fieldSelector,
      list: () => this.#core.listNamespacedConfigMap({ namespace, fieldSelector }),
      log: this.#opts.log.child({ configMap: key }),
      clock: this.#opts.clock,
      watchdogMs: this.#opts.watchdogMs,
      onEvent: () => {
        for (const pool of this.#opts.pools(namespace))
          if (configMapKeys(pool).includes(key)) this.#opts.wake(keyString({ namespace, name: pool.metadata.name }));
      },
    });
    this.#watches.set(key, watch);
    void watch.start();
  }
}
