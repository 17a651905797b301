/**
 * Wiring: ResilientInformers on NodePools, ConfigMaps, the pools' Secrets and Cluster API objects feed a
 * WorkQueue of `namespace/name` pool keys; the reconciler reads only the caches. A child's event maps to its
 * pool through LABELS.nodePool; a ConfigMap's to every pool of its namespace that references it. The CSR
 * approver (csr-approver.ts) runs beside it on the same caches and Event recorder.
 */
import * as k8s from '#k8s';
import type { Registry } from 'prom-client';
import { Counter } from 'prom-client';
import { FIELD_MANAGERS, LABELS } from '../../api/src/keys.js';
import { NODEPOOL_PLURAL, type NodePool } from '../../api/src/nodepool.js';
import { CAPI_GROUP } from '../../api/src/capi.js';
import { BOOTSTRAP_GROUP_NAME } from '../../api/src/bootstrap.js';
import { createApplier } from '../../support/src/apply.js';
import { createController } from '../../support/src/controller.js';
import type { ResilientInformer } from '../../support/src/informer.js';
import type { Logger } from '../../support/src/logger.js';
import type { QueueMetrics } from '../../support/src/metrics.js';
import type { WorkQueue } from '../../support/src/queue.js';
import { realClock, type Clock } from '../../support/src/timers.js';
import { Caches, type CacheSources } from './caches.js';
import { createGuestVersions, type ControlPlaneVersions } from './guest.js';
import { createGuestKubeConfigs } from '../../support/src/guest-kubeconfigs.js';
import { createGuestNodes, type GuestNodes } from './nodes.js';
import type { ControllerConfig } from './phases.js';
import { NodePoolReconciler } from './reconciler.js';
import { tagVersionResolver, type ReleaseVersionResolver } from './release.js';
import { createWriter, type Writer } from './store.js';
import { createEventRecorder, type EventRecorder } from './events.js';
import { CsrApprover } from './csr-approver.js';

export const QUEUE_NAME = 'nodepool';

export interface ControllerOptions {
  kubeConfig: k8s.KubeConfig;
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

function labelledList(custom: k8s.CustomObjectsApi, group: string, version: string, plural: string) {
  return async (): Promise<k8s.KubernetesListObject<k8s.KubernetesObject>> =>
    (await custom.listClusterCustomObject({
      group,
      version,
      plural,
      labelSelector: LABELS.nodePool,
    })) as k8s.KubernetesListObject<k8s.KubernetesObject>;
}

type Controller = ReturnType<typeof createController>;

/** The informers the reconciler and the approver read: every event maps to the key of its pool. */
function watchSources(
  controller: Controller,
  opts: ControllerOptions,
  onPoolAdded: (pool: NodePool) => void,
): CacheSources {
  const kc = opts.kubeConfig;
  const core = kc.makeApiClient(k8s.CoreV1Api);
  const custom = kc.makeApiClient(k8s.CustomObjectsApi);
  const informer = <T extends k8s.KubernetesObject>(
    path: string,
    list: () => Promise<k8s.KubernetesListObject<T>>,
    toKeys: (o: T) => string[],
    labelSelector?: string,
  ): ResilientInformer<T> =>
    controller.watch<T>({ kubeConfig: kc, path, list, toKeys, labelSelector, watchdogMs: opts.resyncMs });
  const byLabel = (o: k8s.KubernetesObject): string[] => {
    const pool = o.metadata?.labels?.[LABELS.nodePool];
    return pool === undefined ? [] : [`${o.metadata?.namespace ?? ''}/${pool}`];
  };
  // The primary informer: children and Secrets start first, so the first reconciles see complete caches.
  const pools = controller.watch<NodePool>({
    kubeConfig: kc,
    path: `/apis/kindling.dev/v1beta1/${NODEPOOL_PLURAL}`,
    list: async () =>
      (await custom.listClusterCustomObject({
        group: 'kindling.dev',
        version: 'v1beta1',
        plural: NODEPOOL_PLURAL,
      })) as k8s.KubernetesListObject<NodePool>,
    watchdogMs: opts.resyncMs,
    primary: true,
    toKeys: (p) => [`${p.metadata.namespace ?? ''}/${p.metadata.name}`],
    onEvent: (p, e) => {
      if (e === 'add') onPoolAdded(p);
    },
  });
  const configMaps = informer<k8s.V1ConfigMap>(
    '/api/v1/configmaps',
    () => core.listConfigMapForAllNamespaces(),
    (cm) => {
      const ns = cm.metadata?.namespace ?? '';
      return pools
        .list(ns)
        .filter((p) => p.spec.config?.some((c) => c.name === cm.metadata?.name))
        .map((p) => `${ns}/${p.metadata.name}`);
    },
  );
  const secrets = informer<k8s.V1Secret>(
    '/api/v1/secrets',
    () => core.listSecretForAllNamespaces({ labelSelector: LABELS.nodePool }),
    byLabel,
    LABELS.nodePool,
  );
  // Cluster API's objects and Kindling's own bootstrap provider's: a KindlingConfig's event (Cluster API cloned or
  // rewrote it) wakes its pool.
  const labelled = (group: string, version: string) => (plural: string) =>
    informer(
      `/apis/${group}/${version}/${plural}`,
      labelledList(custom, group, version, plural),
      byLabel,
      LABELS.nodePool,
    );
  const [machineSets, machineDeployments, healthChecks, machines] = [
    'machinesets',
    'machinedeployments',
    'machinehealthchecks',
    'machines',
  ].map(labelled(CAPI_GROUP, 'v1beta2'));
  const [kindlingConfigs, kindlingConfigTemplates] = ['kindlingconfigs', 'kindlingconfigtemplates'].map(
    labelled(BOOTSTRAP_GROUP_NAME, 'v1beta1'),
  );
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

export function createNodePoolController(opts: ControllerOptions): NodePoolController {
  const { kubeConfig: kc, log } = opts;
  const core = kc.makeApiClient(k8s.CoreV1Api);
  const counter = opts.registry
    ? new Counter({
        name: 'kindling_nodepool_writes_total',
        help: 'Writes by the NodePool controller, by verb and kind.',
        labelNames: ['verb', 'kind'] as const,
        registers: [opts.registry],
      })
    : undefined;
  const writer = createWriter(kc, createApplier(kc, FIELD_MANAGERS.nodepoolController), counter);
  const clock = opts.clock ?? realClock;
  const controller = createController({
    name: QUEUE_NAME,
    log,
    clock,
    workers: opts.workers ?? 4,
    queueMetrics: opts.queueMetrics,
    keyField: 'nodePool',
    reconcile: (key) => reconciler.reconcile(key),
    // The approver decides from the Machine cache, so it starts once that is synced.
    parts: [
      {
        start: () => approver.start(),
        stop: () => approver.stop(),
        get synced() {
          return approver.synced;
        },
      },
    ],
  });
  const caches = new Caches(watchSources(controller, opts, (p) => approver.poolChanged(p)));
  const kubeConfigs = createGuestKubeConfigs((namespace, name) => core.readNamespacedSecret({ namespace, name }));
  const versions = opts.versions ?? createGuestVersions({ kubeConfigs, clock: opts.clock });
  const nodes = createGuestNodes(kubeConfigs);
  const events = createEventRecorder(kc, () => clock.now());
  const reconciler = new NodePoolReconciler({
    caches,
    writer,
    events,
    nodes,
    versions,
    releases: opts.releases ?? tagVersionResolver,
    clock,
    config: opts.config,
    log,
  });
  const approver = new CsrApprover({
    kubeConfig: kc,
    log: log.child({ controller: 'csr-approver' }),
    caches,
    events,
    registry: opts.registry,
    queueMetrics: opts.queueMetrics,
    clock: opts.clock,
    graceMs: opts.csrGraceMs,
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
