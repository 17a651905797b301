/**
 * Wiring: informers on the NodePools, pools' Secrets and Cluster API objects of the tenant namespaces served
 * (one per namespace; nothing elsewhere is seen) and on the ConfigMaps the pools reference, by name
 * (config-maps.ts), feed a WorkQueue of `namespace/name` pool keys; the reconciler reads only the caches. A
 * child's event maps to its pool through LABELS.nodePool; a ConfigMap's to every pool that references it. The CSR
 * approver (csr-approver.ts) runs beside it on the same caches and Event recorder.
 */
import * as k8s from '#k8s';
import type { Registry } from 'prom-client';
import { Counter } from 'prom-client';
import { FIELD_MANAGERS, LABELS } from '../../api/src/keys.js';
import { type NodePool } from '../../api/src/nodepool.js';
import { createApplier } from '../../support/src/apply.js';
import { createController, type Part, type Source } from '../../support/src/controller.js';
import type { Namespaces } from '../../support/src/config.js';
import { customResource, type Informer } from '../../support/src/namespaced-informer.js';
import type { Logger } from '../../support/src/logger.js';
import type { QueueMetrics } from '../../support/src/metrics.js';
import type { WorkQueue } from '../../support/src/queue.js';
import { realClock, type Clock } from '../../support/src/timers.js';
import type { InformerEvent } from '../../support/src/informer.js';
import { Caches, type CacheSources, type Observed } from './caches.js';
import { createGuestVersions, type ControlPlaneVersions } from './guest.js';
import { createGuestKubeConfigs } from '../../support/src/guest-kubeconfigs.js';
import { createGuestNodes, type GuestNodes } from './nodes.js';
import { TemplateCache, templateKeys } from './template-cache.js';
import type { ControllerConfig } from './phases.js';
import { NodePoolReconciler } from './reconciler.js';
import { tagVersionResolver, type ReleaseVersionResolver } from './release.js';
import { createWriter, type Writer } from './store.js';
import { createEventRecorder, type EventRecorder } from './events.js';
import { CsrApprover } from './csr-approver.js';
import { MintProgress } from './mint-progress.js';
import { configMapKeys, ReferencedConfigMaps } from './config-maps.js';
import { PoolReferences } from './pool-references.js';
import { RESOURCES, type ResourceType } from '../../api/src/resources.js';
import { keyOf, keyString, parseKey } from '../../support/src/object-key.js';
import { OwnWrites } from './own-writes.js';
import { NODEPOOL_KIND } from '../../api/src/nodepool.js';

const QUEUE_NAME = 'nodepool';

export interface ControllerOptions {
  kubeConfig: k8s.KubeConfig;
  /** The tenant namespaces whose NodePools (and their inputs and children) are reconciled (--namespaces). */
  namespaces: Namespaces;
  log: Logger;
  config: ControllerConfig;
  /** Reconciles in flight at once (different pools). */
  workers?: number;
  clock?: Clock;
  versions?: ControlPlaneVersions;
  releases?: ReleaseVersionResolver;
  queueMetrics?: QueueMetrics;
  registry?: Registry;
  /** Relist period of every informer (a full resync of every pool). */
  resyncMs?: number;
  /** How long a kubelet CSR may wait for its Machine's addresses (or its Node) before it is denied. */
  csrGraceMs?: number;
  /** Undecided kubelet CSRs of the last hour a guest may have beyond one per live Machine (then: batches). */
  maxPendingCsrsPerGuest?: number;
}

export interface NodePoolController {
  readonly queue: WorkQueue;
  readonly writer: Writer;
  readonly caches: Caches;
  readonly events: EventRecorder;
  /** Writes to guest Nodes. */
  readonly nodes: GuestNodes;
  readonly approver: CsrApprover;
  readonly synced: boolean;
  start(): Promise<void>;
  stop(): Promise<void>;
  /** Queues every pool (what a resync does). */
  resyncAll(): void;
}

type Controller = ReturnType<typeof createController>;

/** Cluster API's objects and Kindling's bootstrap provider's, each with the cache that reads it. */
const LABELLED: readonly (readonly [ResourceType, Observed])[] = [
  [RESOURCES.machineSets, 'machineSets'],
  [RESOURCES.machineDeployments, 'machineDeployments'],
  [RESOURCES.machineHealthChecks, 'healthChecks'],
  [RESOURCES.machines, 'machines'],
  [RESOURCES.kindlingConfigs, 'kindlingConfigs'],
  [RESOURCES.kindlingConfigTemplates, 'kindlingConfigTemplates'],
];

/** What the informers' events mean beyond the keys they wake. */
interface SourceEvents {
  pool: (pool: NodePool, event: InformerEvent) => void;
  mints: MintProgress;
  own: OwnWrites;
  /** Every event, for the overlay over that informer to forget the writes it has caught up with. */
  observe: (source: Observed, obj: k8s.KubernetesObject, event: InformerEvent) => void;
}

/** The informers the reconciler and the approver read: every event maps to the key of its pool. */
function watchSources(
  controller: Controller,
  opts: ControllerOptions,
  on: SourceEvents,
  configMaps: ReferencedConfigMaps,
): CacheSources {
  const { kubeConfig: kc, namespaces } = opts;
  // The echo of the controller's own apply wakes nothing: the reconcile that wrote it saw it (own-writes.ts).
  const unlessOwn =
    <T extends k8s.KubernetesObject>(kind: string, toKeys: (o: T) => string[]) =>
    (o: T, event: InformerEvent): string[] => {
      const later = (): void => toKeys(o).forEach((key) => controller.queue.add(key));
      return on.own.route(kind, o, event, later) ? toKeys(o) : [];
    };
  const core = kc.makeApiClient(k8s.CoreV1Api);
  const custom = kc.makeApiClient(k8s.CustomObjectsApi);
  const informer = <T extends k8s.KubernetesObject>(
    { kind, cache, ...source }: Pick<Source<T>, 'path' | 'list' | 'labelSelector'> & { kind: string; cache: Observed },
    onEvent?: (o: T) => void,
  ): Informer<T> =>
    // Indexed by pool: every reconcile lists its pool's Secrets and Cluster API objects several times.
    controller.watch<T>({
      kubeConfig: kc,
      namespaces,
      ...source,
      toKeys: unlessOwn(kind, byLabel),
      onEvent: (o, event) => {
        on.observe(cache, o, event);
        onEvent?.(o);
      },
      watchdogMs: opts.resyncMs,
      indexLabel: LABELS.nodePool,
    });
  const byLabel = (o: k8s.KubernetesObject): string[] => {
    const pool = o.metadata?.labels?.[LABELS.nodePool];
    return pool === undefined ? [] : [keyString({ namespace: o.metadata?.namespace ?? '', name: pool })];
  };
  // The primary informer: children and Secrets start first, so the first reconciles see complete caches.
  const pools = controller.watch<NodePool>({
    kubeConfig: kc,
    namespaces,
    ...customResource<NodePool>(custom, RESOURCES.nodePools),
    watchdogMs: opts.resyncMs,
    primary: true,
    toKeys: unlessOwn(NODEPOOL_KIND, (p: NodePool) => [keyString(keyOf(p))]),
    onEvent: (p, event) => {
      on.observe('nodePools', p, event);
      on.pool(p, event);
    },
  });
  const labelSelector = LABELS.nodePool;
  const secrets = informer<k8s.V1Secret>(
    {
      kind: 'Secret',
      cache: 'secrets',
      path: '/api/v1/secrets',
      labelSelector,
      list: (namespace) =>
        namespace === undefined
          ? core.listSecretForAllNamespaces({ labelSelector })
          : core.listNamespacedSecret({ namespace, labelSelector }),
    },
    (secret) => on.mints.observe(secret, (opts.clock ?? realClock).now()),
  );
  // Cluster API's objects and Kindling's own bootstrap provider's: a KindlingConfig's event (Cluster API cloned or
  // rewrote it) wakes its pool.
  const labelled = ([resource, cache]: readonly [ResourceType, Observed]): Informer<k8s.KubernetesObject> =>
    informer({ ...customResource(custom, { ...resource, labelSelector }), kind: resource.kind, cache });
  const [machineSets, machineDeployments, healthChecks, machines, kindlingConfigs, kindlingConfigTemplates] =
    LABELLED.map(labelled);
  return {
    nodePools: pools,
    configMaps,
    secrets,
    machineSets,
    machineDeployments,
    healthChecks,
    machines,
    kindlingConfigs,
    kindlingConfigTemplates,
  } as unknown as CacheSources;
}

/** The referenced ConfigMaps' watches open with their pools; stopped with the controller, synced in its `synced`. */
const configMapsPart = (configMaps: () => ReferencedConfigMaps): Part => ({
  start: () => Promise.resolve(),
  stop: () => configMaps().stop(),
  get synced() {
    return configMaps().synced;
  },
});

/** The templates' watches open with the reconciles that read them (a GET stands in until they list): stopped
 * with the controller, not counted in its `synced`. */
const templatesPart = (templates: () => TemplateCache): Part => ({
  start: () => Promise.resolve(),
  stop: () => templates().stop(),
});

const writesOf = ({ registry }: ControllerOptions): Counter<'verb' | 'kind'> | undefined =>
  registry
    ? new Counter({
        name: 'kindling_nodepool_writes_total',
        help: 'Writes by the NodePool controller, by verb and kind.',
        labelNames: ['verb', 'kind'] as const,
        registers: [registry],
      })
    : undefined;

/** What pools name beside their children, each watched while a pool names it: the config ConfigMaps and (pools
 * that may scale to zero) the infrastructure templates. A change wakes the pools naming it. */
function referencedInputs(
  opts: ControllerOptions,
  controller: Controller,
  pools: () => CacheSources['nodePools'],
): { configMaps: ReferencedConfigMaps; templates: TemplateCache } {
  const shared = {
    ...opts,
    pools: (namespace: string) => pools().list(namespace),
    wake: (key: string) => controller.queue.add(key),
    watchdogMs: opts.resyncMs,
  };
  return {
    configMaps: new ReferencedConfigMaps({ ...shared, log: opts.log.child({ cache: 'configmaps' }) }),
    templates: new TemplateCache({ ...shared, log: opts.log.child({ cache: 'templates' }) }),
  };
}

/** What a pool's event changes beside its key's reconcile: the watches of what the pools reference (worked out
 * again only when that pool's own references changed), the approver's view of new pools. */
function poolEvents(parts: {
  configMaps: ReferencedConfigMaps;
  templates: TemplateCache;
  approver: () => CsrApprover;
}): (p: NodePool, e: InformerEvent) => void {
  const references = { configMaps: new PoolReferences(configMapKeys), templates: new PoolReferences(templateKeys) };
  return (p, e) => {
    const namespace = p.metadata.namespace ?? '';
    references.configMaps.onChange(p, e, () => parts.configMaps.poolChanged(namespace));
    references.templates.onChange(p, e, () => parts.templates.poolChanged(namespace));
    if (e === 'add') parts.approver().poolChanged(p);
  };
}

export function createNodePoolController(opts: ControllerOptions): NodePoolController {
  const { kubeConfig: kc, log } = opts;
  const core = kc.makeApiClient(k8s.CoreV1Api);
  const own = new OwnWrites();
  const writer = createWriter(kc, createApplier(kc, FIELD_MANAGERS.nodepoolController), writesOf(opts), own);
  const clock = opts.clock ?? realClock;
  const workers = opts.workers ?? 4;
  const controller = createController({
    name: QUEUE_NAME,
    log,
    clock,
    workers,
    // A tenant's pools wait behind each other, not in front of another tenant's; and a tenant whose guest hangs
    // (its reconciles each waiting on it up to the request deadline) never holds the last worker.
    groupOf: (key) => parseKey(key).namespace,
    maxInFlightPerGroup: Math.max(1, workers - 1),
    queueMetrics: opts.queueMetrics,
    keyField: 'nodePool',
    reconcile: (key) => reconciler.reconcile(key),
    // The approver decides from the Machine cache, so it starts once that is synced.
    parts: [
      configMapsPart(() => configMaps),
      templatesPart(() => templates),
      {
        start: () => approver.start(),
        stop: () => approver.stop(),
        get synced() {
          return approver.synced;
        },
      },
    ],
  });
  const { configMaps, templates } = referencedInputs(opts, controller, () => pools());
  const onPool = poolEvents({ configMaps, templates, approver: () => approver });
  const mints = new MintProgress();
  const observe = (...event: Parameters<Caches['observe']>): void => caches.observe(...event);
  const sources = watchSources(controller, opts, { pool: onPool, mints, own, observe }, configMaps);
  const pools = (): CacheSources['nodePools'] => sources.nodePools;
  const caches = new Caches(sources);
  const kubeConfigs = createGuestKubeConfigs((namespace, name) => core.readNamespacedSecret({ namespace, name }));
  const versions = opts.versions ?? createGuestVersions({ kubeConfigs, clock: opts.clock });
  const nodes = createGuestNodes(kubeConfigs);
  const events = createEventRecorder(kc, () => clock.now());
  const reconciler = new NodePoolReconciler({
    caches,
    writer,
    events,
    nodes,
    templates,
    mints,
    versions,
    releases: opts.releases ?? tagVersionResolver,
    clock,
    config: opts.config,
    log,
  });
  const approver = new CsrApprover({
    kubeConfig: kc,
    namespaces: opts.namespaces,
    log: log.child({ controller: 'csr-approver' }),
    caches,
    events,
    registry: opts.registry,
    queueMetrics: opts.queueMetrics,
    clock: opts.clock,
    graceMs: opts.csrGraceMs,
    maxPendingPerGuest: opts.maxPendingCsrsPerGuest,
  });
  return {
    queue: controller.queue,
    writer,
    caches,
    events,
    nodes,
    approver,
    get synced() {
      return controller.synced;
    },
    start: () => controller.start(),
    stop: () => controller.stop(),
    resyncAll: () => controller.resyncAll(),
  };
}
