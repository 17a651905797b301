/**
 * The in-place upgrader (management cluster). For each InPlace MachineSet (one with a target hash) whose
 * target differs from its current hash, it hands the payload and an agent Pod to as many idle nodes as
 * maxUnavailable leaves room for, retargets nodes in flight when the target moves, halts on a degraded
 * node, writes progress, and once every node is at the target records current = target and cleans up.
 * All state is in annotations of real objects, so a restarted upgrader carries on where it was.
 */
import * as k8s from '@kubernetes/client-node';
import { Counter, type Registry } from 'prom-client';
import { CAPI_API_VERSION, CAPI_GROUP, type Machine, type MachineSet } from '../../api/src/capi.js';
import { ANNOTATIONS, FIELD_MANAGERS, LABELS } from '../../api/src/keys.js';
import { createApplier, type Applier } from '../../support/src/apply.js';
import { isNotFound, NotReadyError } from '../../support/src/errors.js';
import { ResilientInformer } from '../../support/src/informer.js';
import type { Logger } from '../../support/src/logger.js';
import type { QueueMetrics } from '../../support/src/metrics.js';
import { WorkQueue, type ReconcileResult } from '../../support/src/queue.js';
import { GuestClusters, clusterKey, type GuestCluster } from '../../support/src/guest-clusters.js';
import { agentNodePolicy, agentPod, agentPodName, agentRbac, GUEST_NAMESPACE, guestNamespace, payloadSecret, payloadSecretName } from './desired.js';
import type { PayloadSource } from './payload.js';
import { classifyNode, planRollout, resolveMaxUnavailable, type RolloutPlan } from './select.js';

export interface UpgraderOptions {
  kubeConfig: k8s.KubeConfig;
  log: Logger;
  payloads: PayloadSource;
  agentImage: string;
  registry?: Registry;
  queueMetrics?: QueueMetrics;
  workers?: number;
  /** Level-based resync of a MachineSet in rollout, even without events. */
  resyncMs?: number;
}

type MS = MachineSet & k8s.KubernetesObject;

interface Session {
  cluster: GuestCluster;
  core: k8s.CoreV1Api;
  applier: Applier;
  nodes: ResilientInformer<k8s.V1Node>;
  pods: ResilientInformer<k8s.V1Pod>;
  secrets: ResilientInformer<k8s.V1Secret>;
  /** Namespace, agent-node policy and agent RBAC applied in this session. */
  baseReady: boolean;
  /** desiredConfig values written and not yet seen in the node cache. */
  expected: Map<string, string>;
}

interface RolloutContext {
  session: Session;
  ms: MS;
  pool: string;
  target: string;
  log: Logger;
}

const merge = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch);

function informer<T extends k8s.KubernetesObject>(opts: {
  kc: k8s.KubeConfig;
  path: string;
  list: () => Promise<k8s.KubernetesListObject<T>>;
  labelSelector?: string;
  log: Logger;
  onEvent: () => void;
}): ResilientInformer<T> {
  return new ResilientInformer<T>({ kubeConfig: opts.kc, path: opts.path, list: opts.list, labelSelector: opts.labelSelector, log: opts.log, onEvent: opts.onEvent });
}

export class InPlaceUpgrader {
  readonly queue: WorkQueue;
  #opts: UpgraderOptions;
  #log: Logger;
  #applier: Applier;
  #machineSets: ResilientInformer<MS>;
  #machines: ResilientInformer<Machine & k8s.KubernetesObject>;
  #clusters: GuestClusters<Session>;
  #started: Counter;

  constructor(opts: UpgraderOptions) {
    this.#opts = opts;
    this.#log = opts.log;
    this.#applier = createApplier(opts.kubeConfig, FIELD_MANAGERS.inplaceUpgrader);
    this.#started = new Counter({
      name: 'kindling_inplace_nodes_started_total',
      help: 'Nodes handed a target config (started or retargeted).',
      registers: opts.registry ? [opts.registry] : [],
    });
    this.queue = new WorkQueue({
      name: 'inplace-upgrader',
      concurrency: opts.workers ?? 4,
      reconcile: (key) => this.#reconcile(key),
      onDone: (key, outcome, ms, err) => {
        opts.queueMetrics?.observe('inplace-upgrader', outcome, ms);
        if (outcome === 'error') this.#log.warn({ err, machineSet: key }, 'Reconcile failed: retrying with backoff');
      },
    });
    opts.queueMetrics?.watch(this.queue);
    const custom = opts.kubeConfig.makeApiClient(k8s.CustomObjectsApi);
    const version = CAPI_API_VERSION.split('/')[1] ?? '';
    const capiList = <T extends k8s.KubernetesObject>(plural: string) => async (): Promise<k8s.KubernetesListObject<T>> =>
      (await custom.listClusterCustomObject({ group: CAPI_GROUP, version, plural })) as k8s.KubernetesListObject<T>;
    this.#machineSets = new ResilientInformer<MS>({
      kubeConfig: opts.kubeConfig,
      path: `/apis/${CAPI_GROUP}/${version}/machinesets`,
      list: capiList<MS>('machinesets'),
      log: opts.log,
      onEvent: (ms) => this.#enqueue(ms),
    });
    this.#machines = new ResilientInformer<Machine & k8s.KubernetesObject>({
      kubeConfig: opts.kubeConfig,
      path: `/apis/${CAPI_GROUP}/${version}/machines`,
      list: capiList('machines'),
      log: opts.log,
      onEvent: (m) => this.#enqueueSet(m.metadata.namespace ?? '', m.metadata.labels?.[LABELS.capiSetName]),
    });
    this.#clusters = new GuestClusters<Session>({
      kubeConfig: opts.kubeConfig,
      log: opts.log,
      create: (cluster) => this.#createSession(cluster),
      start: async (s) => void (await Promise.all([s.nodes.start(), s.pods.start(), s.secrets.start()])),
      close: async (s) => void (await Promise.all([s.nodes.stop(), s.pods.stop(), s.secrets.stop()])),
      onOpened: (cluster) => this.#enqueueCluster(cluster),
    });
  }

  async start(): Promise<void> {
    await Promise.all([this.#machineSets.start(), this.#machines.start()]);
    await this.#clusters.start();
  }

  async stop(): Promise<void> {
    await this.queue.stop();
    await Promise.all([this.#clusters.stop(), this.#machineSets.stop(), this.#machines.stop()]);
  }

  #createSession(cluster: GuestCluster): Session {
    const kc = cluster.kubeConfig;
    const core = kc.makeApiClient(k8s.CoreV1Api);
    const onEvent = (): void => this.#enqueueCluster(cluster);
    const log = cluster.log;
    const ns = GUEST_NAMESPACE;
    return {
      cluster,
      core,
      applier: createApplier(kc, FIELD_MANAGERS.inplaceUpgrader),
      nodes: informer({ kc, path: '/api/v1/nodes', list: () => core.listNode(), log, onEvent }),
      pods: informer({ kc, path: `/api/v1/namespaces/${ns}/pods`, labelSelector: LABELS.agentPod, list: () => core.listNamespacedPod({ namespace: ns, labelSelector: LABELS.agentPod }), log, onEvent }),
      secrets: informer({ kc, path: `/api/v1/namespaces/${ns}/secrets`, labelSelector: LABELS.payloadSecret, list: () => core.listNamespacedSecret({ namespace: ns, labelSelector: LABELS.payloadSecret }), log, onEvent }),
      baseReady: false,
      expected: new Map(),
    };
  }

  #enqueue(ms: MS): void {
    if (ms.metadata.annotations?.[ANNOTATIONS.targetConfigHash]) this.queue.add(`${ms.metadata.namespace}/${ms.metadata.name}`);
  }

  #enqueueSet(namespace: string, name: string | undefined): void {
    const ms = name ? this.#machineSets.get(name, namespace) : undefined;
    if (ms) this.#enqueue(ms);
  }

  #enqueueCluster(cluster: GuestCluster): void {
    for (const ms of this.#machineSets.list(cluster.namespace)) if (ms.spec.clusterName === cluster.name) this.#enqueue(ms);
  }

  async #reconcile(key: string): Promise<ReconcileResult | void> {
    const ctx = this.#contextOf(key);
    if (!ctx) return;
    if (ctx.ms.metadata.annotations?.[ANNOTATIONS.currentConfigHash] === ctx.target) return this.#cleanUp(ctx.session, ctx.pool);
    return this.#rollOut(ctx);
  }

  /** The MachineSet, if it is InPlace, and its guest cluster's session (NotReadyError while there is none). */
  #contextOf(key: string): RolloutContext | undefined {
    const [namespace = '', name = ''] = key.split('/');
    const ms = this.#machineSets.get(name, namespace);
    const target = ms?.metadata.annotations?.[ANNOTATIONS.targetConfigHash];
    if (!ms || !target) return undefined;
    const session = this.#clusters.get(clusterKey(namespace, ms.spec.clusterName));
    if (!session) throw new NotReadyError(`guest cluster ${ms.spec.clusterName} is not reachable yet`);
    return { session, ms, pool: ms.metadata.labels?.[LABELS.nodePool] ?? name, target, log: this.#log.child({ machineSet: key, target }) };
  }

  async #rollOut(ctx: RolloutContext): Promise<ReconcileResult | void> {
    const { session, ms, target, log } = ctx;
    const { nodes, pending } = this.#nodesOf(ms, session);
    const views = nodes.map((n) => classifyNode(n, target, this.#expectation(session, n)));
    const plan = planRollout(views, target, resolveMaxUnavailable(ms.metadata.annotations?.[ANNOTATIONS.maxUnavailable], views.length), pending);
    if (plan.complete) {
      await this.#cleanUp(session, ctx.pool);
      await this.#writeStatus(ms, { current: target });
      log.info({ nodes: plan.total }, 'Rollout complete');
      return;
    }
    await this.#handOut(ctx, [...plan.retarget, ...plan.start]);
    await this.#writeStatus(ms, statusOf(plan));
    if (plan.halted) log.warn({ node: plan.halted.node, reason: plan.halted.reason }, 'Rollout halted on a degraded node');
    return { requeueAfterMs: this.#opts.resyncMs ?? 30_000 };
  }

  /**
   * The MachineSet's nodes: the Nodes (status.nodeRef) of its Machines (label set-name); and how many of
   * those Machines have no Node yet, leaving out Machines being deleted (scaled down: they will have none).
   */
  #nodesOf(ms: MS, session: Session): { nodes: k8s.V1Node[]; pending: number } {
    const nodes: k8s.V1Node[] = [];
    let pending = 0;
    for (const m of this.#machines.list(ms.metadata.namespace)) {
      if (m.metadata.labels?.[LABELS.capiSetName] !== ms.metadata.name || m.spec.clusterName !== ms.spec.clusterName) continue;
      const node = m.status?.nodeRef?.name ? session.nodes.get(m.status.nodeRef.name) : undefined;
      if (node) nodes.push(node);
      else if (!m.metadata.deletionTimestamp) pending++;
    }
    return { nodes, pending };
  }

  #expectation(session: Session, node: k8s.V1Node): string | undefined {
    const name = node.metadata?.name ?? '';
    const expected = session.expected.get(name);
    if (expected === undefined || node.metadata?.annotations?.[ANNOTATIONS.desiredConfig] === expected) {
      session.expected.delete(name);
      return undefined;
    }
    return expected;
  }

  /** For each node: its payload Secret, then its agent Pod, then desiredConfig (so the agent finds its Secret). */
  async #handOut(ctx: RolloutContext, nodes: string[]): Promise<void> {
    if (nodes.length === 0) return;
    const { session, pool, target } = ctx;
    const config = await this.#opts.payloads.fetch({ namespace: ctx.ms.metadata.namespace ?? '', pool, hash: target });
    await this.#ensureBase(session);
    await Promise.all(
      nodes.map(async (node) => {
        const secret = session.secrets.get(payloadSecretName(node), GUEST_NAMESPACE);
        if (secret?.metadata?.labels?.[LABELS.configHash] !== target) await session.applier.apply(payloadSecret({ node, pool, hash: target, config }));
        if (!session.pods.get(agentPodName(node), GUEST_NAMESPACE)) await session.applier.apply(agentPod({ node, pool, image: this.#opts.agentImage }));
        await session.core.patchNode({ name: node, body: { metadata: { annotations: { [ANNOTATIONS.desiredConfig]: target } } } }, merge);
        session.expected.set(node, target);
        this.#started.inc();
        ctx.log.info({ node }, 'Node handed the target config');
      }),
    );
  }

  async #ensureBase(session: Session): Promise<void> {
    if (session.baseReady) return;
    await session.applier.apply(guestNamespace());
    // The policy first: the agent's RBAC alone would let it patch every Node.
    for (const obj of [...agentNodePolicy(), ...agentRbac()]) await session.applier.apply(obj);
    session.baseReady = true;
  }

  /** Removes the pool's agent Pods and payload Secrets (from what the caches show: nothing to do is free). */
  async #cleanUp(session: Session, pool: string): Promise<void> {
    const mine = (o: k8s.KubernetesObject): boolean => o.metadata?.labels?.[LABELS.nodePool] === pool;
    const ignoreGone = (err: unknown): void => {
      if (!isNotFound(err)) throw err;
    };
    const namespace = GUEST_NAMESPACE;
    await Promise.all([
      ...session.pods.list(namespace).filter(mine).map((p) => session.core.deleteNamespacedPod({ name: p.metadata?.name ?? '', namespace, gracePeriodSeconds: 0 }).then(() => undefined, ignoreGone)),
      ...session.secrets.list(namespace).filter(mine).map((s) => session.core.deleteNamespacedSecret({ name: s.metadata?.name ?? '', namespace }).then(() => undefined, ignoreGone)),
    ]);
  }

  /**
   * The upgrader's MachineSet annotations, applied as one set under its field manager: a key left out
   * (progress once complete, failure once cleared) is removed. Written only when something changed.
   */
  async #writeStatus(ms: MS, status: { current?: string; progress?: string; failure?: string }): Promise<void> {
    const ann = ms.metadata.annotations ?? {};
    const current = status.current ?? ann[ANNOTATIONS.currentConfigHash];
    const want: Record<string, string> = {};
    if (current !== undefined) want[ANNOTATIONS.currentConfigHash] = current;
    if (status.progress !== undefined) want[ANNOTATIONS.inPlaceProgress] = status.progress;
    if (status.failure !== undefined) want[ANNOTATIONS.inPlaceFailure] = status.failure;
    const keys = [ANNOTATIONS.currentConfigHash, ANNOTATIONS.inPlaceProgress, ANNOTATIONS.inPlaceFailure];
    if (keys.every((k) => ann[k] === want[k])) return;
    await this.#applier.apply({
      apiVersion: CAPI_API_VERSION,
      kind: 'MachineSet',
      metadata: { name: ms.metadata.name, namespace: ms.metadata.namespace, annotations: want },
    });
  }
}

function statusOf(plan: RolloutPlan): { progress: string; failure?: string } {
  return { progress: plan.progress, failure: plan.halted ? `${plan.halted.node}: ${plan.halted.reason}` : undefined };
}
