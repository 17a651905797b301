/**
 * The infrastructure templates of the pools that may scale to zero, read from watches: one list-and-watch per
 * referenced template (a `metadata.name` field selector in the pool's namespace, as config-maps.ts does for
 * ConfigMaps), opened the first time a reconcile asks for it and closed when no such pool of the namespace names
 * it any more. A reconcile then makes no read call, and a template whose capacity changes wakes its pools.
 *
 * Until a template's watch has listed, each ask falls back to one GET, so a template that cannot be read still
 * says why in the pool's condition. The references are tenant input, so the watches are bounded: at most
 * MAX_WATCHES_PER_NAMESPACE per namespace, and none of a template whose list the apiserver refused (403);
 * those templates are read by GET instead.
 */
import * as k8s from '#k8s';
import type { NodePool, ObjectRef } from '../../api/src/nodepool.js';
import { statusCode } from '../../support/src/errors.js';
import { ResilientInformer, type WatchFn } from '../../support/src/informer.js';
import { keyString } from '../../support/src/object-key.js';
import type { TemplateCapacity } from './capacity.js';
import { selectorValue, type ReferencedConfigMapsOptions } from './config-maps.js';
import {
  createInfrastructureTemplates,
  pluralOf,
  preferredVersions,
  reportedCapacity,
  type InfrastructureTemplate,
  type InfrastructureTemplates,
} from './templates.js';

/** What the cache asks of the apiserver; unit tests pass a fake that counts. */
export interface TemplateApi {
  /** The served version of the template's group. */
  versionOf(ref: ObjectRef): Promise<string>;
  /** The one template, listed by name. */
  list(at: WatchedTemplate): Promise<k8s.KubernetesListObject<InfrastructureTemplate>>;
  /** One read, while the watch has not listed. */
  fallback: InfrastructureTemplates;
  /** The watch requests (default: the informer's wireWatch). */
  watch?: (path: string) => WatchFn;
}

/** A template as one watch sees it. */
export interface WatchedTemplate {
  namespace: string;
  ref: ObjectRef;
  version: string;
}

/** The same wiring as the ConfigMaps pools name: watches opened and closed by the pools that reference them. */
export interface TemplateCacheOptions extends ReferencedConfigMapsOptions {
  api?: TemplateApi;
}

/** `namespace/group/kind/name`: one watch per template. */
const templateKey = (namespace: string, ref: ObjectRef): string =>
  `${namespace}/${ref.apiGroup}/${ref.kind}/${ref.name}`;

const readsTemplate = (p: NodePool): boolean => p.spec.autoScaling?.min === 0;

/** The template `pool` reads, by its watch's key: none unless the pool may scale to zero. */
export const templateKeys = (pool: NodePool): string[] =>
  readsTemplate(pool) ? [templateKey(pool.metadata.namespace ?? '', pool.spec.platform.infrastructureTemplateRef)] : [];

/** Each pool may name its own template: past this many watches in a namespace, the others are read by GET. */
export const MAX_WATCHES_PER_NAMESPACE = 8;

const nameSelector = (ref: ObjectRef): string => `metadata.name=${selectorValue(ref.name)}`;

function defaultApi(kc: k8s.KubeConfig): TemplateApi {
  const custom = kc.makeApiClient(k8s.CustomObjectsApi);
  const versionOf = preferredVersions(kc);
  return {
    versionOf,
    fallback: createInfrastructureTemplates(kc, versionOf),
    list: ({ namespace, ref, version }) =>
      custom.listNamespacedCustomObject({
        group: ref.apiGroup,
        version,
        namespace,
        plural: pluralOf(ref),
        fieldSelector: nameSelector(ref),
      }) as Promise<k8s.KubernetesListObject<InfrastructureTemplate>>,
  };
}

export class TemplateCache implements InfrastructureTemplates {
  readonly #opts: TemplateCacheOptions;
  readonly #api: TemplateApi;
  readonly #watches = new Map<string, ResilientInformer<InfrastructureTemplate>>();
  /** Templates whose list the apiserver refused: read by GET while a pool names them. */
  readonly #forbidden = new Set<string>();
  #stopped = false;

  constructor(opts: TemplateCacheOptions) {
    this.#opts = opts;
    this.#api = opts.api ?? defaultApi(opts.kubeConfig);
  }

  async capacityOf(namespace: string, ref: ObjectRef): Promise<TemplateCapacity | undefined> {
    const key = templateKey(namespace, ref);
    let watch = this.#watches.get(key);
    if (!watch && this.#mayOpen(namespace, key)) {
      const version = await this.#api.versionOf(ref);
      // Meanwhile another reconcile may have opened it, or the pool let go of it (poolChanged ran already).
      watch =
        this.#watches.get(key) ?? (this.#mayOpen(namespace, key) ? this.#open({ namespace, ref, version }) : undefined);
    }
    if (!watch?.synced) return this.#api.fallback.capacityOf(namespace, ref);
    const template = watch.get({ namespace, name: ref.name });
    if (!template) throw new Error(`${ref.kind} ${namespace}/${ref.name} does not exist`);
    return reportedCapacity(template);
  }

  /** A pool of the namespace changed: closes the watches of templates no pool that may scale to zero names. */
  poolChanged(namespace: string): void {
    const wanted = this.#wanted(namespace);
    for (const [key, watch] of this.#watches)
      if (key.startsWith(`${namespace}/`) && !wanted.has(key)) {
        this.#watches.delete(key);
        void watch.stop();
      }
    for (const key of this.#forbidden)
      if (key.startsWith(`${namespace}/`) && !wanted.has(key)) this.#forbidden.delete(key);
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    const watches = [...this.#watches.values()];
    this.#watches.clear();
    await Promise.all(watches.map((w) => w.stop()));
  }

  #wanted(namespace: string): Set<string> {
    return new Set(this.#opts.pools(namespace).flatMap(templateKeys));
  }

  /** A watch of the template may open: a pool still names it, the apiserver did not refuse it, there is room. */
  #mayOpen(namespace: string, key: string): boolean {
    if (this.#stopped || this.#forbidden.has(key) || !this.#wanted(namespace).has(key)) return false;
    const open = [...this.#watches.keys()].filter((k) => k.startsWith(`${namespace}/`)).length;
    return open < MAX_WATCHES_PER_NAMESPACE;
  }

  /** The apiserver refused to list the template: its watch stops, and GETs say why in the pool's condition. */
  #refused(key: string, watch: ResilientInformer<InfrastructureTemplate>): void {
    if (this.#watches.get(key) !== watch) return;
    this.#watches.delete(key);
    this.#forbidden.add(key);
    void watch.stop();
  }

  #open(at: WatchedTemplate): ResilientInformer<InfrastructureTemplate> {
    const { namespace, ref, version } = at;
    const key = templateKey(namespace, ref);
    const segments = [ref.apiGroup, version, 'namespaces', namespace, pluralOf(ref)];
    const path = `/apis/${segments.map(encodeURIComponent).join('/')}`;
    const watch: ResilientInformer<InfrastructureTemplate> = new ResilientInformer<InfrastructureTemplate>({
      kubeConfig: this.#opts.kubeConfig,
      path,
      fieldSelector: nameSelector(ref),
      list: () =>
        this.#api.list(at).catch((err: unknown) => {
          if (statusCode(err) === 403) this.#refused(key, watch);
          throw err;
        }),
      ...(this.#api.watch ? { watch: this.#api.watch(path) } : {}),
      log: this.#opts.log.child({ template: key }),
      clock: this.#opts.clock,
      watchdogMs: this.#opts.watchdogMs,
      onEvent: () => {
        for (const pool of this.#opts.pools(namespace))
          if (templateKeys(pool).includes(key)) this.#opts.wake(keyString({ namespace, name: pool.metadata.name }));
      },
    });
    this.#watches.set(key, watch);
    void watch.start();
    return watch;
  }
}
