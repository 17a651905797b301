/**
 * The in-place upgrader (management cluster). For each InPlace MachineSet (one with a target hash) whose
 * target differs from its current hash, it hands the payload and an agent Pod to as many idle nodes as
 * maxUnavailable leaves room for, retargets nodes in flight when the target moves, halts on a degraded
 * node, writes progress, and once every node is at the target records current = target and cleans up.
 * All state is in annotations of real objects, so a restarted upgrader carries on where it was.
 */
import * as k8s from '#k8s';
import { Counter, type Registry } from 'prom-client';
import { CAPI_API_VERSION, type Machine, type MachineSet } from '../../api/src/capi.js';
import { ANNOTATIONS, FIELD_MANAGERS, LABELS } from '../../api/src/keys.js';
import { createApplier, type Applier } from '../../support/src/apply.js';
import { isConflict, NotReadyError } from '../../support/src/errors.js';
import type { Namespaces } from '../../support/src/config.js';
import { customResource, type Informer } from '../../support/src/namespaced-informer.js';
import type { Logger } from '../../support/src/logger.js';
import type { QueueMetrics } from '../../support/src/metrics.js';
import type { ReconcileResult, WorkQueue } from '../../support/src/queue.js';
import { createController, type Controller } from '../../support/src/controller.js';
import { GuestClusters, clusterKey, type GuestCluster } from '../../support/src/guest-clusters.js';
import {
  agentObjectsMissing,
  cleanUpPool,
  createGuestSession,
  ensureAgentObjects,
  ensureBase,
  expectedDesired,
  handOutNode,
  setRolloutTaint,
  settleAll,
  startGuestSession,
  stopGuestSession,
  type AgentObjects,
  type GuestSession,
} from './guest.js';
import { bootedPayload, BootedWaits, type PayloadSource } from './payload.js';
import type { BootedPayload } from './desired.js';
import { classifyNode, planRollout, setMembers, type NodeView, type RolloutPlan } from './rollout-decision.js';
import { returnToRemediation, spareFromRemediation } from './remediation.js';
import { rolloutTaints, type RolloutPhase } from './taints.js';
import { resolveMaxUnavailable } from '../../support/src/int-or-percent.js';
import { RESOURCES } from '../../api/src/resources.js';
import { clusterScoped, keyOf, keyString, parseKey } from '../../support/src/object-key.js';

export interface UpgraderOptions {
  kubeConfig: k8s.KubeConfig;
  /** The tenant namespaces whose MachineSets, Machines and guest kubeconfig Secrets are watched (--namespaces). */
  namespaces: Namespaces;
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
  #controller: Controller;
  #log: Logger;
  #applier: Applier;
  #machineSets: Informer<MS>;
  #machines: Informer<Machine & k8s.KubernetesObject>;
  #clusters: GuestClusters<Session>;
  #started: Counter;
  #custom: k8s.CustomObjectsApi;
  #bootedWaits = new BootedWaits();

  constructor(opts: UpgraderOptions) {
    this.#opts = opts;
    this.#log = opts.log;
    this.#applier = createApplier(opts.kubeConfig, FIELD_MANAGERS.inplaceUpgrader);
    this.#started = new Counter({
      name: 'kindling_inplace_nodes_started_total',
      help: 'Nodes handed a target config (started or retargeted).',
      registers: opts.registry ? [opts.registry] : [],
    });
    this.#clusters = new GuestClusters<Session>({
      kubeConfig: opts.kubeConfig,
      namespaces: opts.namespaces,
      log: opts.log,
      create: (cluster) => createGuestSession(cluster, () => this.#enqueueCluster(cluster)),
      start: startGuestSession,
      close: stopGuestSession,
      onOpened: (cluster) => this.#enqueueCluster(cluster),
    });
    // Guest-cluster sessions open once the Cluster API caches are synced, and close after the last reconcile.
    this.#controller = createController({
      name: 'inplace-upgrader',
      log: opts.log,
      workers: opts.workers ?? 4,
      queueMetrics: opts.queueMetrics,
      keyField: 'machineSet',
      reconcile: (key) => this.#reconcile(key),
      parts: [this.#clusters],
    });
    this.queue = this.#controller.queue;
    const custom = opts.kubeConfig.makeApiClient(k8s.CustomObjectsApi);
    this.#custom = custom;
    const { kubeConfig, namespaces } = opts;
    this.#machineSets = this.#controller.watch<MS>({
      kubeConfig,
      namespaces,
      ...customResource<MS>(custom, RESOURCES.machineSets),
      toKeys: (ms) => this.#keysOf(ms),
    });
    this.#machines = this.#controller.watch<MachineObject>({
      kubeConfig,
      namespaces,
      ...customResource<MachineObject>(custom, RESOURCES.machines),
      toKeys: (m) => this.#keysOfSet(m.metadata.namespace ?? '', m.metadata.labels?.[LABELS.capiSetName]),
    });
  }

  async start(): Promise<void> {
    await this.#controller.start();
  }

  async stop(): Promise<void> {
    await this.#controller.stop();
  }

  /** An InPlace MachineSet (one with a target hash) is reconciled; any other is none of the upgrader's business. */
  #keysOf(ms: MS): string[] {
    return ms.metadata.annotations?.[ANNOTATIONS.targetConfigHash] ? [keyString(keyOf(ms))] : [];
  }

  #keysOfSet(namespace: string, name: string | undefined): string[] {
    const ms = name ? this.#machineSets.get({ namespace, name }) : undefined;
    return ms ? this.#keysOf(ms) : [];
  }

  #enqueueCluster(cluster: GuestCluster): void {
    const sets = this.#machineSets.list(cluster.namespace).filter((ms) => ms.spec.clusterName === cluster.name);
    for (const key of sets.flatMap((ms) => this.#keysOf(ms))) this.queue.add(key);
  }

  async #reconcile(key: string): Promise<ReconcileResult | void> {
    const ctx = this.#contextOf(key);
    if (!ctx) return;
    if (ctx.ms.metadata.annotations?.[ANNOTATIONS.currentConfigHash] === ctx.target && (await this.#settled(ctx)))
      return settleAll([cleanUpPool(ctx.session, ctx.pool), this.#clearTaints(ctx)]);
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
    const { namespace, name } = parseKey(key);
    const ms = this.#machineSets.get({ namespace, name });
    const target = ms?.metadata.annotations?.[ANNOTATIONS.targetConfigHash];
    if (!ms || !target) return undefined;
    const session = this.#clusters.get(clusterKey(namespace, ms.spec.clusterName));
    if (!session) throw new NotReadyError(`guest cluster ${ms.spec.clusterName} is not reachable yet`);
    return {
      session,
      ms,
      pool: ms.metadata.labels?.[LABELS.nodePool] ?? name,
      target,
      log: this.#log.child({ machineSet: key, target }),
    };
  }

  async #rollOut(ctx: RolloutContext): Promise<ReconcileResult | void> {
    const { session, ms, target, log } = ctx;
    const { nodes, pending, machineOf } = this.#nodesOf(ms, session);
    const views = nodes.map((n) => classifyNode(n, target, expectedDesired(session, n)));
    const paused = ms.metadata.annotations?.[ANNOTATIONS.capiPaused] !== undefined;
    // Held by the window or the health gate, for hours perhaps: like a pause, no pending taint meanwhile.
    const held = ms.metadata.annotations?.[ANNOTATIONS.rolloutHold];
    const plan = planRollout(
      views,
      target,
      resolveMaxUnavailable(ms.metadata.annotations?.[ANNOTATIONS.maxUnavailable], views.length),
      { pending, paused, held },
    );
    if (plan.complete) {
      // Recorded complete before the agent Pods and payload Secrets go (a delete each, seconds for a large
      // pool): a later hand-out does not take a Pod deleted here for an agent (agentPodOf), and a failed
      // clean-up is done by the next pass (current = target, settled), which gives the Machines back to
      // remediation too, should that fail here.
      await settleAll([
        this.#spareFromRemediation(views, machineOf),
        this.#writeStatus(ms, { current: target }),
        this.#setTaints(session, views, { active: false }),
      ]);
      log.info({ nodes: plan.total }, 'Rollout complete');
      await cleanUpPool(session, ctx.pool);
      return;
    }
    // A Done node's slot is what the rollout waits on: nothing else runs before the next nodes are handed out,
    // and the rest of the pass (progress, Machines given back to remediation) runs beside it. The nodes handed
    // out now are spared by #handOut, before their node is pointed at the target.
    const handed = [...plan.retarget, ...plan.start];
    // A Secret whose ceiling is not the set's now counts as missing: rewritten, the agent it held back tries again.
    const ceiling = ms.metadata.annotations?.[ANNOTATIONS.rolloutCeiling];
    const agentless = views
      .filter((v) => isHandedOut(v, target) && !handed.includes(v.name))
      .filter((v) => agentObjectsMissing(session, { node: v.name, hash: target, ceiling }))
      .map((v) => v.name);
    await settleAll([
      this.#handOut(ctx, handed, machineOf),
      this.#restoreAgents(ctx, agentless),
      this.#writeStatus(ms, statusOf(plan)),
      this.#setTaints(session, views, { active: !paused && held === undefined }, handed),
      this.#spareFromRemediation(
        views.filter((v) => !handed.includes(v.name)),
        machineOf,
      ),
    ]);
    if (plan.halted)
      log.warn({ node: plan.halted.node, reason: plan.halted.reason }, 'Rollout halted on a degraded node');
    return { requeueAfterMs: this.#opts.resyncMs ?? 30_000 };
  }

  /**
   * The MachineSet's nodes and how many of its Machines have no Node yet (rollout-decision.ts setMembers, the rule
   * `kindling plan` shows).
   */
  #nodesOf(ms: MS, session: Session): { nodes: k8s.V1Node[]; pending: number; machineOf: Map<string, MachineObject> } {
    const { members, pending } = setMembers(ms, this.#machines.list(ms.metadata.namespace), (name) =>
      session.nodes.get(clusterScoped(name)),
    );
    return {
      nodes: members.map((m) => m.node),
      pending,
      machineOf: new Map(members.map((m) => [m.node.metadata?.name ?? '', m.machine])),
    };
  }

  /**
   * Each node's rollout taint as rolloutTaints decides. Left out: the nodes handed out in this pass (handOutNode
   * taints them), and those whose cache does not show this upgrader's last hand-out yet (its taint neither).
   * A Node that keeps changing under the write (conflict) holds up nothing else: its change wakes the next pass.
   */
  async #setTaints(
    session: Session,
    views: readonly NodeView[],
    phase: RolloutPhase,
    handed: readonly string[] = [],
  ): Promise<void> {
    const current = views.filter((v) => !handed.includes(v.name) && !session.expected.has(v.name));
    await settleAll(
      [...rolloutTaints(current, phase)].map(([node, taint]) =>
        setRolloutTaint(session, node, taint).catch(unlessConflict),
      ),
    );
  }

  /** No node of the set keeps a rollout taint once its rollout is over (a killed upgrader's leftovers too). */
  async #clearTaints(ctx: RolloutContext): Promise<void> {
    const { nodes } = this.#nodesOf(ctx.ms, ctx.session);
    await settleAll(
      nodes.map((n) => setRolloutTaint(ctx.session, n.metadata?.name ?? '', undefined).catch(unlessConflict)),
    );
  }

  /** skip-remediation (remediation.ts) on the Machines whose node is updating or Degraded, off the others. */
  async #spareFromRemediation(views: readonly NodeView[], machineOf: Map<string, MachineObject>): Promise<void> {
    await Promise.all(
      views.map(async (v) => {
        const machine = machineOf.get(v.name);
        if (!machine) return;
        const busy = v.phase === 'updating' || v.phase === 'degraded';
        await (busy ? spareFromRemediation : returnToRemediation)(this.#custom, machine);
      }),
    );
  }

  /** Hands each node the target (see handOutNode), its Machine spared from remediation before its node is pointed at it. */
  async #handOut(ctx: RolloutContext, nodes: string[], machineOf: Map<string, MachineObject>): Promise<void> {
    if (nodes.length === 0) return;
    const [config] = await Promise.all([this.#payload(ctx), ensureBase(ctx.session)]);
    const healthCheckTimeout = ctx.ms.metadata.annotations?.[ANNOTATIONS.healthCheckTimeout];
    await settleAll(
      nodes.map(async (node) => {
        const machine = machineOf.get(node);
        const spare = machine ? (): Promise<boolean> => spareFromRemediation(this.#custom, machine) : undefined;
        await handOutNode(ctx.session, { ...(await this.#agentObjects(ctx, node, config)), healthCheckTimeout }, spare);
        this.#started.inc();
        ctx.log.info({ node }, 'Node handed the target config');
      }),
    );
  }

  /**
   * Nodes handed the target whose payload Secret or agent Pod is gone (deleted, or still terminating when it
   * was handed out): given them again, their desiredConfig left as it is.
   */
  async #restoreAgents(ctx: RolloutContext, nodes: string[]): Promise<void> {
    if (nodes.length === 0) return;
    const config = await this.#payload(ctx);
    await settleAll(
      nodes.map(async (node) => ensureAgentObjects(ctx.session, await this.#agentObjects(ctx, node, config))),
    );
    ctx.log.info({ nodes }, 'Agent Pods or payload Secrets given again to nodes handed the target');
  }

  /**
   * What a node's payload Secret and agent Pod are made of, the same for a first hand-out and for objects given
   * again: a recreated Secret without the pool's policy or the booted config would have the agent plan against
   * the host alone with the default policy (drain and reboot).
   */
  async #agentObjects(ctx: RolloutContext, node: string, config: Buffer): Promise<AgentObjects> {
    return {
      node,
      pool: ctx.pool,
      hash: ctx.target,
      config,
      agentImage: this.#opts.agentImage,
      disruptionPolicy: ctx.ms.metadata.annotations?.[ANNOTATIONS.disruptionPolicy],
      booted: await this.#booted(ctx, node),
      ceiling: ctx.ms.metadata.annotations?.[ANNOTATIONS.rolloutCeiling],
    };
  }

  /**
   * The config a node booted with, when the agent never updated it (payload.ts bootedPayload): the set's
   * current hash, which its nodes are at until a rollout completes. Not its Machine's data Secret name:
   * Cluster API's MachineSet copies its template's onto every Machine, so that names the target.
   */
  async #booted(ctx: RolloutContext, node: string): Promise<BootedPayload | undefined> {
    const view = ctx.session.nodes.get(clusterScoped(node));
    if (!view) return undefined;
    const booted = ctx.ms.metadata.annotations?.[ANNOTATIONS.currentConfigHash];
    const at = { namespace: ctx.ms.metadata.namespace ?? '', pool: ctx.pool, target: ctx.target, node: view, booted };
    return bootedPayload(this.#opts.payloads, at, this.#bootedWaits, ctx.log);
  }

  #payload(ctx: RolloutContext): Promise<Buffer> {
    return this.#opts.payloads.fetch({ namespace: ctx.ms.metadata.namespace ?? '', pool: ctx.pool, hash: ctx.target });
  }

  /**
   * The upgrader's MachineSet annotations, applied as one set under its field manager: a key left out
   * (progress once complete, failure once cleared) is removed. Written only when something changed.
   */
  async #writeStatus(ms: MS, status: RolloutStatus & { current?: string }): Promise<void> {
    const ann = ms.metadata.annotations ?? {};
    const current = status.current ?? ann[ANNOTATIONS.currentConfigHash];
    const want: Record<string, string> = {};
    if (current !== undefined) want[ANNOTATIONS.currentConfigHash] = current;
    if (status.progress !== undefined) want[ANNOTATIONS.inPlaceProgress] = status.progress;
    if (status.halt !== undefined) want[status.halt.key] = status.halt.text;
    const keys = [
      ANNOTATIONS.currentConfigHash,
      ANNOTATIONS.inPlaceProgress,
      ANNOTATIONS.inPlaceFailure,
      ANNOTATIONS.inPlaceWaiting,
    ];
    if (keys.every((k) => ann[k] === want[k])) return;
    await this.#applier.apply({
      apiVersion: CAPI_API_VERSION,
      kind: 'MachineSet',
      metadata: { name: ms.metadata.name, namespace: ms.metadata.namespace, annotations: want },
    });
  }
}

/** A rollout taint's write lost to another write of its Node: the Node's event brings the next pass. */
const unlessConflict = (err: unknown): void => {
  if (!isConflict(err)) throw err;
};

/** Handed this target and not done: the node's agent needs its Pod and payload Secret. */
const isHandedOut = (v: NodeView, target: string): boolean =>
  (v.phase === 'updating' || v.phase === 'degraded') && v.desiredConfig === target;

/** The MachineSet's rollout annotations: the progress, and where it halted, under the key that says whether
 * the halting node failed or waits for the maintenance window. */
interface RolloutStatus {
  progress?: string;
  halt?: { key: typeof ANNOTATIONS.inPlaceFailure | typeof ANNOTATIONS.inPlaceWaiting; text: string };
}

function statusOf(plan: RolloutPlan): RolloutStatus {
  const h = plan.halted;
  if (!h) return { progress: plan.progress };
  const key = h.waiting ? ANNOTATIONS.inPlaceWaiting : ANNOTATIONS.inPlaceFailure;
  return { progress: plan.progress, halt: { key, text: `${h.node}: ${h.reason}` } };
}
