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
import { NotReadyError } from '../../support/src/errors.js';
import { ResilientInformer } from '../../support/src/informer.js';
import type { Logger } from '../../support/src/logger.js';
import type { QueueMetrics } from '../../support/src/metrics.js';
import { WorkQueue, type ReconcileResult } from '../../support/src/queue.js';
import { GuestClusters, clusterKey, type GuestCluster } from '../../support/src/guest-clusters.js';
import { cleanUpPool, createGuestSession, ensureBase, expectedDesired, handOutNode, startGuestSession, stopGuestSession, type GuestSession } from './guest.js';
import type { PayloadSource } from './payload.js';
import { classifyNode, planRollout, type NodeView, type RolloutPlan } from './select.js';
import { setSkipRemediation } from './remediation.js';
import { resolveMaxUnavailable } from '../../support/src/int-or-percent.js';

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

type Session = GuestSession;
type MachineObject = Machine & k8s.KubernetesObject;

interface RolloutContext {
  session: Session;
  ms: MS;
  pool: string;
  target: string;
  log: Logger;
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
  #custom: k8s.CustomObjectsApi;

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
    this.#custom = custom;
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
    this.#machines = new ResilientInformer<MachineObject>({
      kubeConfig: opts.kubeConfig,
      path: `/apis/${CAPI_GROUP}/${version}/machines`,
      list: capiList('machines'),
      log: opts.log,
      onEvent: (m) => this.#enqueueSet(m.metadata.namespace ?? '', m.metadata.labels?.[LABELS.capiSetName]),
    });
    this.#clusters = new GuestClusters<Session>({
      kubeConfig: opts.kubeConfig,
      log: opts.log,
      create: (cluster) => createGuestSession(cluster, () => this.#enqueueCluster(cluster)),
      start: startGuestSession,
      close: stopGuestSession,
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
    if (ctx.ms.metadata.annotations?.[ANNOTATIONS.currentConfigHash] === ctx.target && (await this.#settled(ctx))) return cleanUpPool(ctx.session, ctx.pool);
    return this.#rollOut(ctx);
  }

  /**
   * No node of the set is updating or Degraded (and no Machine is left spared). A pool moved back to the config
   * it came from (after a failed update) has a current hash equal to its target again, but its failed node still
   * holds the other config: that node must be retargeted, and its Machine given back to remediation once done.
   */
  async #settled(ctx: RolloutContext): Promise<boolean> {
    const { nodes, machineOf } = this.#nodesOf(ctx.ms, ctx.session);
    const views = nodes.map((n) => classifyNode(n, ctx.target, expectedDesired(ctx.session, n)));
    if (views.some((v) => v.phase === 'updating' || v.phase === 'degraded')) return false;
    await this.#spareFromRemediation(views, machineOf);
    return true;
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
    const { nodes, pending, machineOf } = this.#nodesOf(ms, session);
    const views = nodes.map((n) => classifyNode(n, target, expectedDesired(session, n)));
    await this.#spareFromRemediation(views, machineOf);
    const paused = ms.metadata.annotations?.[ANNOTATIONS.capiPaused] !== undefined;
    const plan = planRollout(views, target, resolveMaxUnavailable(ms.metadata.annotations?.[ANNOTATIONS.maxUnavailable], views.length), { pending, paused });
    if (plan.complete) {
      await cleanUpPool(session, ctx.pool);
      await this.#writeStatus(ms, { current: target });
      log.info({ nodes: plan.total }, 'Rollout complete');
      return;
    }
    await this.#handOut(ctx, [...plan.retarget, ...plan.start], machineOf);
    await this.#writeStatus(ms, statusOf(plan));
    if (plan.halted) log.warn({ node: plan.halted.node, reason: plan.halted.reason }, 'Rollout halted on a degraded node');
    return { requeueAfterMs: this.#opts.resyncMs ?? 30_000 };
  }

  /**
   * The MachineSet's nodes: the Nodes (status.nodeRef) of its Machines (label set-name); and how many of
   * those Machines have no Node yet, leaving out Machines being deleted (scaled down: they will have none).
   */
  #nodesOf(ms: MS, session: Session): { nodes: k8s.V1Node[]; pending: number; machineOf: Map<string, MachineObject> } {
    const nodes: k8s.V1Node[] = [];
    const machineOf = new Map<string, MachineObject>();
    let pending = 0;
    const mine = (m: MachineObject): boolean => m.metadata.labels?.[LABELS.capiSetName] === ms.metadata.name && m.spec.clusterName === ms.spec.clusterName;
    for (const m of this.#machines.list(ms.metadata.namespace).filter(mine)) {
      const node = nodeOfMachine(m, session);
      if (node) {
        nodes.push(node);
        machineOf.set(node.metadata?.name ?? '', m);
      } else if (!m.metadata.deletionTimestamp) pending++;
    }
    return { nodes, pending, machineOf };
  }

  /** skip-remediation (remediation.ts) on the Machines whose node is updating or Degraded, off the others. */
  async #spareFromRemediation(views: readonly NodeView[], machineOf: Map<string, MachineObject>): Promise<void> {
    for (const v of views) {
      const machine = machineOf.get(v.name);
      if (machine) await setSkipRemediation(this.#custom, machine, v.phase === 'updating' || v.phase === 'degraded');
    }
  }

  /** Hands each node the target (see handOutNode), its Machine spared from remediation first. */
  async #handOut(ctx: RolloutContext, nodes: string[], machineOf: Map<string, MachineObject>): Promise<void> {
    if (nodes.length === 0) return;
    const { session, pool, target } = ctx;
    const config = await this.#opts.payloads.fetch({ namespace: ctx.ms.metadata.namespace ?? '', pool, hash: target });
    await ensureBase(session);
    await Promise.all(
      nodes.map(async (node) => {
        const machine = machineOf.get(node);
        if (machine) await setSkipRemediation(this.#custom, machine, true);
        const healthCheckTimeout = ctx.ms.metadata.annotations?.[ANNOTATIONS.healthCheckTimeout];
        await handOutNode(session, { node, pool, hash: target, config, agentImage: this.#opts.agentImage, healthCheckTimeout });
        this.#started.inc();
        ctx.log.info({ node }, 'Node handed the target config');
      }),
    );
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

function nodeOfMachine(m: MachineObject, session: Session): k8s.V1Node | undefined {
  return m.status?.nodeRef?.name ? session.nodes.get(m.status.nodeRef.name) : undefined;
}

function statusOf(plan: RolloutPlan): { progress: string; failure?: string } {
  return { progress: plan.progress, failure: plan.halted ? `${plan.halted.node}: ${plan.halted.reason}` : undefined };
}
