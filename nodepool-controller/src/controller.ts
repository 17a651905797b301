/**
 * Wiring: ResilientInformers on NodePools, ConfigMaps, the pools' Secrets and Cluster API objects feed a
 * WorkQueue of `namespace/name` pool keys; the reconciler reads only the caches. A child's event maps to its
 * pool through LABELS.nodePool; a ConfigMap's to every pool of its namespace that references it. The CSR
 * approver (csr-approver.ts) runs beside it on the same caches and Event recorder.
 */
import * as k8s from '@kubernetes/client-node';
import type { Registry } from 'prom-client';
import { Counter } from 'prom-client';
import { FIELD_MANAGERS, LABELS } from '../../api/src/keys.js';
import { NODEPOOL_PLURAL, type NodePool } from '../../api/src/nodepool.js';
import { CAPI_GROUP } from '../../api/src/capi.js';
import { BOOTSTRAP_GROUP_NAME } from '../../api/src/bootstrap.js';
import { createApplier } from '../../support/src/apply.js';
import { ResilientInformer, type InformerEvent } from '../../support/src/informer.js';
import type { Logger } from '../../support/src/logger.js';
import type { QueueMetrics } from '../../support/src/metrics.js';
import { WorkQueue } from '../../support/src/queue.js';
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

type AnyInformer = ResilientInformer<k8s.KubernetesObject>;

function capiList(custom: k8s.CustomObjectsApi, plural: string) {
  return async (): Promise<k8s.KubernetesListObject<k8s.KubernetesObject>> =>
    (await custom.listClusterCustomObject({ group: CAPI_GROUP, version: 'v1beta2', plural, labelSelector: LABELS.nodePool })) as k8s.KubernetesListObject<k8s.KubernetesObject>;
}

export function createNodePoolController(opts: ControllerOptions): NodePoolController {
  const { kubeConfig: kc, log } = opts;
  const core = kc.makeApiClient(k8s.CoreV1Api);
  const custom = kc.makeApiClient(k8s.CustomObjectsApi);
  const counter = opts.registry
    ? new Counter({ name: 'kindling_nodepool_writes_total', help: 'Writes by the NodePool controller, by verb and kind.', labelNames: ['verb', 'kind'] as const, registers: [opts.registry] })
    : undefined;
  const writer = createWriter(kc, createApplier(kc, FIELD_MANAGERS.nodepoolController), counter);
  const queue: WorkQueue = new WorkQueue({
    name: QUEUE_NAME,
    reconcile: (key) => reconciler.reconcile(key),
    concurrency: opts.workers ?? 4,
    clock: opts.clock ?? realClock,
    onDone: (key, outcome, ms, err) => {
      opts.queueMetrics?.observe(QUEUE_NAME, outcome, ms);
      if (outcome === 'error') log.warn({ nodePool: key, err }, 'Reconcile failed: retrying with backoff');
    },
  });
  const enqueue = (key: string): void => queue.add(key);
  const informer = <T extends k8s.KubernetesObject>(path: string, list: () => Promise<k8s.KubernetesListObject<T>>, onEvent: (o: T, e: InformerEvent) => void, labelSelector?: string): ResilientInformer<T> =>
    new ResilientInformer<T>({ kubeConfig: kc, path, list, log, onEvent, labelSelector, watchdogMs: opts.resyncMs, clock: opts.clock });
  const byLabel = (o: k8s.KubernetesObject): void => {
    const pool = o.metadata?.labels?.[LABELS.nodePool];
    if (pool !== undefined) enqueue(`${o.metadata?.namespace ?? ''}/${pool}`);
  };
  const pools = informer<NodePool>(`/apis/kindling.dev/v1beta1/${NODEPOOL_PLURAL}`, async () => (await custom.listClusterCustomObject({ group: 'kindling.dev', version: 'v1beta1', plural: NODEPOOL_PLURAL })) as k8s.KubernetesListObject<NodePool>, (p, e) => {
    const key = `${p.metadata.namespace ?? ''}/${p.metadata.name}`;
    if (e === 'delete') queue.forget(key);
    else enqueue(key);
    if (e === 'add') approver.poolChanged(p);
  });
  const configMaps = informer<k8s.V1ConfigMap>('/api/v1/configmaps', () => core.listConfigMapForAllNamespaces(), (cm) => {
    const ns = cm.metadata?.namespace ?? '';
    for (const p of pools.list(ns)) if (p.spec.config?.some((c) => c.name === cm.metadata?.name)) enqueue(`${ns}/${p.metadata.name}`);
  });
  const secrets = informer<k8s.V1Secret>('/api/v1/secrets', () => core.listSecretForAllNamespaces({ labelSelector: LABELS.nodePool }), byLabel, LABELS.nodePool);
  const capi = (plural: string): AnyInformer => informer(`/apis/${CAPI_GROUP}/v1beta2/${plural}`, capiList(custom, plural), byLabel, LABELS.nodePool);
  const [machineSets, machineDeployments, healthChecks, machines] = ['machinesets', 'machinedeployments', 'machinehealthchecks', 'machines'].map(capi) as [AnyInformer, AnyInformer, AnyInformer, AnyInformer];
  // Kindling's own bootstrap provider: a KindlingConfig's event (Cluster API cloned or rewrote it) wakes its pool.
  const bootstrap = (plural: string): AnyInformer =>
    informer(`/apis/${BOOTSTRAP_GROUP_NAME}/v1beta1/${plural}`, async () => (await custom.listClusterCustomObject({ group: BOOTSTRAP_GROUP_NAME, version: 'v1beta1', plural, labelSelector: LABELS.nodePool })) as k8s.KubernetesListObject<k8s.KubernetesObject>, byLabel, LABELS.nodePool);
  const [kindlingConfigs, kindlingConfigTemplates] = ['kindlingconfigs', 'kindlingconfigtemplates'].map(bootstrap) as [AnyInformer, AnyInformer];
  const informers: AnyInformer[] = [pools, configMaps, secrets, machineSets, machineDeployments, healthChecks, machines, kindlingConfigs, kindlingConfigTemplates] as AnyInformer[];
  const caches = new Caches({ nodePools: pools, configMaps, secrets, machineSets, machineDeployments, healthChecks, machines, kindlingConfigs, kindlingConfigTemplates } as unknown as CacheSources);
  const kubeConfigs = createGuestKubeConfigs((namespace, name) => core.readNamespacedSecret({ namespace, name }));
  const versions = opts.versions ?? createGuestVersions({ kubeConfigs, clock: opts.clock });
  const nodes = createGuestNodes(kubeConfigs);
  const clock = opts.clock ?? realClock;
  const events = createEventRecorder(kc, () => clock.now());
  const reconciler = new NodePoolReconciler({ caches, writer, events, nodes, versions, releases: opts.releases ?? tagVersionResolver, clock, config: opts.config, log });
  const approver = new CsrApprover({ kubeConfig: kc, log: log.child({ controller: 'csr-approver' }), caches, events, registry: opts.registry, queueMetrics: opts.queueMetrics, clock: opts.clock, graceMs: opts.csrGraceMs });
  opts.queueMetrics?.watch(queue);
  return {
    queue,
    writer,
    caches,
    events,
    nodes,
    approver,
    get synced() {
      return informers.every((i) => i.synced) && approver.synced;
    },
    // Children and Secrets first, pools last: the first reconciles then see complete caches. The approver
    // decides from the Machine cache, so it starts once that is synced.
    async start() {
      await Promise.all(informers.slice(1).map((i) => i.start()));
      await pools.start();
      await approver.start();
    },
    async stop() {
      await Promise.all([queue.stop(), approver.stop()]);
      await Promise.all(informers.map((i) => i.stop()));
    },
    resyncAll() {
      for (const p of pools.list()) queue.add(`${p.metadata.namespace ?? ''}/${p.metadata.name}`);
    },
  };
}
