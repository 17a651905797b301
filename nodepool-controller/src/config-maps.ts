/**
 * The ConfigMaps the NodePools reference (`spec.config`), and no others: one list-and-watch per referenced name
 * (a `metadata.name` field selector in the pool's own namespace), opened when a pool starts naming it and closed
 * when no pool of that namespace does any more. A tenant's other ConfigMaps, however many or large, never reach
 * this process, and users label nothing.
 *
 * A name whose watch has not listed yet is not "missing": get throws NotReadyError, so the reconcile waits for it
 * quietly instead of reporting ConfigMapMissing for a ConfigMap that exists. The names are the tenant's (the CRD
 * takes any string): one that is not a DNS-1123 subdomain can name no ConfigMap, so it gets no watch (the
 * apiserver would refuse its selector, and the watch would never list) and get says at once that it is missing.
 */
import * as k8s from '#k8s';
import type { NodePool } from '../../api/src/nodepool.js';
import { NotReadyError } from '../../support/src/errors.js';
import { ResilientInformer, type WatchFn } from '../../support/src/informer.js';
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
  /** The apiserver's ConfigMap reads (default: the kubeconfig's); unit tests pass a fake. */
  configMapApi?: ConfigMapApi;
}

/** What the watches ask of the apiserver. */
export interface ConfigMapApi {
  list(namespace: string, fieldSelector: string): Promise<k8s.KubernetesListObject<ConfigMap>>;
  /** The watch requests (default: the informer's wireWatch). */
  watch?: (path: string) => WatchFn;
}

const NOT_LISTED_RETRY_MS = 250;

/** The longest object name the apiserver takes (a DNS-1123 subdomain). */
const MAX_NAME_LENGTH = 253;
const DNS1123_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

/** Whether `name` can name a ConfigMap at all (the apiserver validates object names as DNS-1123 subdomains). */
export const isConfigMapName = (name: string): boolean =>
  name.length <= MAX_NAME_LENGTH && DNS1123_SUBDOMAIN.test(name);

/** A value in a field selector, escaped as the apiserver parses selectors: a name can add no other term. */
export const selectorValue = (value: string): string => value.replace(/[\\,=]/g, (c) => `\\${c}`);

/** The ConfigMaps `pool` names that can exist, by `namespace/name`: each gets a watch. */
export const configMapKeys = (pool: NodePool): string[] =>
  (pool.spec.config ?? [])
    .filter((c) => isConfigMapName(c.name))
    .map((c) => keyString({ namespace: pool.metadata.namespace ?? '', name: c.name }));

function defaultApi(kc: k8s.KubeConfig): ConfigMapApi {
  const core = kc.makeApiClient(k8s.CoreV1Api);
  return { list: (namespace, fieldSelector) => core.listNamespacedConfigMap({ namespace, fieldSelector }) };
}

export class ReferencedConfigMaps implements CacheSource<ConfigMap> {
  readonly #opts: ReferencedConfigMapsOptions;
  readonly #api: ConfigMapApi;
  /** By `namespace/name`. */
  readonly #watches = new Map<string, ResilientInformer<ConfigMap>>();
  #stopped = false;

  constructor(opts: ReferencedConfigMapsOptions) {
    this.#opts = opts;
    this.#api = opts.configMapApi ?? defaultApi(opts.kubeConfig);
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
    if (!isConfigMapName(key.name)) return undefined;
    const watch = this.#watches.get(keyString(key));
    if (!watch?.synced) throw new NotReadyError(`ConfigMap ${keyString(key)} is being read`, NOT_LISTED_RETRY_MS);
    return watch.get(key);
  }

  list(namespace?: string): ConfigMap[] {
    return [...this.#watches.values()].flatMap((w) => w.list(namespace));
  }

  #open(namespace: string, key: string): void {
    const name = key.slice(namespace.length + 1);
    const fieldSelector = `metadata.name=${selectorValue(name)}`;
    const path = `/api/v1/namespaces/${namespace}/configmaps`;
    const watch = new ResilientInformer<ConfigMap>({
      kubeConfig: this.#opts.kubeConfig,
      path,
      fieldSelector,
      list: () => this.#api.list(namespace, fieldSelector),
      ...(this.#api.watch ? { watch: this.#api.watch(path) } : {}),
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
