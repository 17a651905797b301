/**
 * UpdateMachine: one Machine's in-place update, driven through the same agent protocol as the MachineSet
 * path and with the same functions (guest.ts, rollout-decision.ts): the Machine's Node (status.nodeRef, in the guest
 * cluster of its `<cluster>-kubeconfig` Secret) gets the payload Secret, the agent Pod and desiredConfig;
 * the agent asks the central drainer for a drain, applies, reboots and reports through the Node's
 * annotations. Each call is one level-based step read from those annotations and caches, so a restarted
 * extension carries on where the Node is, and calling it again changes nothing. As on the MachineSet path, the
 * Machine's MachineDeployment (its deployment-name label) carries the health gate's timeout and the pause,
 * and the Machine is spared from remediation (remediation.ts) from hand-out until its node is done.
 */
import * as k8s from '#k8s';
import { type KindlingConfig } from '../../../api/src/bootstrap.js';
import { type Machine, type MachineDeployment } from '../../../api/src/capi.js';
import {
  ANNOTATIONS,
  DRAIN_PREFIX,
  LABELS,
  NODE_STATES,
  hashOfBootstrapTemplate,
  hashOfUserData,
} from '../../../api/src/keys.js';
import { type NodePool } from '../../../api/src/nodepool.js';
import { NotReadyError } from '../../../support/src/errors.js';
import { GuestClusters, clusterKey } from '../../../support/src/guest-clusters.js';
import type { Namespaces } from '../../../support/src/config.js';
import { customResource, NamespacedInformer, type Informer } from '../../../support/src/namespaced-informer.js';
import type { Logger } from '../../../support/src/logger.js';
import {
  agentObjectsMissing,
  cleanUpNode,
  payloadCeilingStale,
  createGuestSession,
  ensureAgentObjects,
  expectedDesired,
  handOutNode,
  startGuestSession,
  stopGuestSession,
  type AgentObjects,
  type GuestSession,
  type PayloadWant,
} from '../guest.js';
import { bootedPayload, BootedWaits, type PayloadSource } from '../payload.js';
import { annotateMachine, returnToRemediation, spareFromRemediation } from '../remediation.js';
import { classifyNode, type NodeView } from '../rollout-decision.js';
import { superseded, type UpdateOutcome } from './update-answer.js';
import type { ExtensionCache, UpdateTarget } from './update-check.js';
import { RESOURCES, type ResourceType } from '../../../api/src/resources.js';
import { clusterScoped } from '../../../support/src/object-key.js';

/** What the hook handler needs: one step towards the target (checked against the caches: update-check.ts). */
export interface MachineUpdates {
  update(target: UpdateTarget): Promise<UpdateOutcome>;
}

export interface MachineUpdaterOptions {
  kubeConfig: k8s.KubeConfig;
  /** The tenant namespaces whose Machines and guest kubeconfig Secrets are watched (--namespaces). */
  namespaces: Namespaces;
  log: Logger;
  payloads: PayloadSource;
  agentImage: string;
}

type MachineObject = Machine & k8s.KubernetesObject;
type DeploymentObject = MachineDeployment & k8s.KubernetesObject;
type ConfigObject = KindlingConfig & k8s.KubernetesObject;
type PoolObject = NodePool & k8s.KubernetesObject;

/** What one step works on: the Machine, its Node in its guest cluster, and its MachineDeployment if it has one. */
interface StepContext {
  session: GuestSession;
  node: k8s.V1Node;
  machine: MachineObject;
  deployment?: DeploymentObject;
}

const progress = (message: string): UpdateOutcome => ({ state: 'in-progress', message });
const haltKey = (t: UpdateTarget): string => `${t.namespace}/${t.machine}@${t.hash}`;

/** What a node in flight is doing, from its annotations. */
function describeNode(node: k8s.V1Node, hash: string): string {
  const ann = node.metadata?.annotations ?? {};
  const drain = ann[ANNOTATIONS.desiredDrain];
  if (drain !== undefined && drain !== ann[ANNOTATIONS.lastAppliedDrain])
    return `${drain.startsWith(DRAIN_PREFIX) ? 'draining' : 'uncordoning'} (${drain})`;
  if (ann[ANNOTATIONS.state] === NODE_STATES.working) return `the agent is applying ${hash}`;
  return `waiting for the agent to pick up ${hash}`;
}

/** Why no node may be handed out: paused by spec.pausedUntil, or held by the nodepool-controller's rollout gate
 * (the maintenance window is closed, the health gate fails). */
function holdOf(deployment: DeploymentObject | undefined): string | undefined {
  const ann = deployment?.metadata.annotations ?? {};
  if (ann[ANNOTATIONS.capiPaused] !== undefined)
    return `MachineDeployment ${deployment?.metadata.name} is paused by spec.pausedUntil, no node is handed out until it clears`;
  const held = ann[ANNOTATIONS.rolloutHold];
  return held === undefined ? undefined : `the rollout is held, ${held}`;
}

/** Why no node may drain or reboot now (the nodepool-controller's rollout gate), for the payload Secret. */
const ceilingOf = (deployment: DeploymentObject | undefined): string | undefined =>
  deployment?.metadata.annotations?.[ANNOTATIONS.rolloutCeiling];

/** What the node's payload Secret must say: the target, and the ceiling its MachineDeployment has now. */
const payloadWant = (t: UpdateTarget, view: NodeView, ctx: StepContext): PayloadWant => ({
  node: view.name,
  hash: t.hash,
  ceiling: ceilingOf(ctx.deployment),
});

/** The hash a MachineDeployment's template names (its KindlingConfigTemplate), if it names one. */
const deploymentHash = (pool: string, d: DeploymentObject | undefined): string | undefined =>
  hashOfBootstrapTemplate(pool, d?.spec.template.spec.bootstrap.configRef?.name);

export class MachineUpdater implements MachineUpdates, ExtensionCache {
  #opts: MachineUpdaterOptions;
  #custom: k8s.CustomObjectsApi;
  #machines: Informer<MachineObject>;
  #deployments: Informer<DeploymentObject>;
  #configs: Informer<ConfigObject>;
  #pools: Informer<PoolObject>;
  #clusters: GuestClusters<GuestSession>;
  /** The step under way per Machine: a second call joins it instead of racing it. */
  #inflight = new Map<string, Promise<UpdateOutcome>>();
  /** Per Machine and target, how many times it was answered halted in a row (its backoff: update-answer.ts). */
  #halts = new Map<string, number>();
  /** How long each node has waited for the payload it booted with (payload.ts bootedPayload). */
  #bootedWaits = new BootedWaits();

  constructor(opts: MachineUpdaterOptions) {
    this.#opts = opts;
    const custom = opts.kubeConfig.makeApiClient(k8s.CustomObjectsApi);
    this.#custom = custom;
    const informer = <T extends k8s.KubernetesObject>(resource: ResourceType): Informer<T> =>
      new NamespacedInformer<T>({
        kubeConfig: opts.kubeConfig,
        namespaces: opts.namespaces,
        ...customResource<T>(custom, resource),
        log: opts.log,
        onEvent: () => undefined,
      });
    this.#machines = informer<MachineObject>(RESOURCES.machines);
    this.#deployments = informer<DeploymentObject>(RESOURCES.machineDeployments);
    this.#configs = informer<ConfigObject>(RESOURCES.kindlingConfigs);
    this.#pools = informer<PoolObject>(RESOURCES.nodePools);
    this.#clusters = new GuestClusters<GuestSession>({
      kubeConfig: opts.kubeConfig,
      namespaces: opts.namespaces,
      log: opts.log,
      // The hook is called again by Cluster API (retryAfterSeconds): nothing to wake on guest events.
      create: (cluster) => createGuestSession(cluster, () => undefined),
      start: startGuestSession,
      close: stopGuestSession,
    });
  }

  get #informers(): Pick<Informer<k8s.KubernetesObject>, 'synced' | 'start' | 'stop'>[] {
    return [this.#machines, this.#deployments, this.#configs, this.#pools];
  }

  get synced(): boolean {
    return this.#informers.every((i) => i.synced);
  }

  async start(): Promise<void> {
    await Promise.all(this.#informers.map((i) => i.start()));
    await this.#clusters.start();
  }

  async stop(): Promise<void> {
    await Promise.allSettled(this.#inflight.values());
    await Promise.all([this.#clusters.stop(), ...this.#informers.map((i) => i.stop())]);
  }

  machine(namespace: string, name: string): Machine | undefined {
    return this.#machines.get({ namespace, name });
  }

  kindlingConfig(namespace: string, name: string): KindlingConfig | undefined {
    return this.#configs.get({ namespace, name });
  }

  nodePool(namespace: string, name: string): NodePool | undefined {
    return this.#pools.get({ namespace, name });
  }

  update(target: UpdateTarget): Promise<UpdateOutcome> {
    const key = `${target.namespace}/${target.machine}@${target.hash}`;
    const running = this.#inflight.get(key);
    if (running) return running;
    const step = this.#step(target)
      .catch((err: unknown): UpdateOutcome => {
        if (err instanceof NotReadyError) return progress(err.message);
        this.#opts.log.warn({ err, machine: `${target.namespace}/${target.machine}` }, 'UpdateMachine step failed');
        return { state: 'failed', message: `${(err as Error).message} (Cluster API calls again)` };
      })
      .finally(() => this.#inflight.delete(key));
    this.#inflight.set(key, step);
    return step;
  }

  async #step(t: UpdateTarget): Promise<UpdateOutcome> {
    const ctx = this.#contextOf(t);
    const { session, node, machine } = ctx;
    const view = classifyNode(node, t.hash, expectedDesired(session, node));
    if (view.phase !== 'degraded') this.#halts.delete(haltKey(t));
    if (view.phase === 'done') return this.#done(t, ctx);
    const next = await this.#supersededBy(t, ctx, view);
    if (next !== undefined) {
      // The update towards this hash is over: no backoff is kept for it.
      this.#halts.delete(haltKey(t));
      return this.#superseded(t, ctx, next);
    }
    // Handed out (or Degraded, the rollback's reboot included): the MachineHealthCheck keeps off it.
    if (view.phase !== 'idle') await spareFromRemediation(this.#custom, machine);
    if (view.phase === 'degraded') return this.#degraded(t, ctx, view);
    await this.#setFailure(machine, undefined);
    if (view.phase === 'updating' && view.desiredConfig === t.hash) {
      if (agentObjectsMissing(session, payloadWant(t, view, ctx))) await this.#giveAgentBack(t, ctx);
      return progress(`Node ${view.name}: ${describeNode(node, t.hash)}`);
    }
    return this.#handOut(t, ctx);
  }

  async #done(t: UpdateTarget, { session, node, machine }: StepContext): Promise<UpdateOutcome> {
    const name = node.metadata?.name ?? '';
    await cleanUpNode(session, name);
    await returnToRemediation(this.#custom, machine);
    await this.#setFailure(machine, undefined);
    return { state: 'done', message: `Node ${name} is at ${t.hash}` };
  }

  /**
   * Degraded: halted. A node Degraded towards this target by a ceiling lifted (or changed) since gets its payload
   * Secret rewritten, on which its agent tries again; any other Degraded node keeps its agent as it is.
   */
  async #degraded(t: UpdateTarget, ctx: StepContext, view: NodeView): Promise<UpdateOutcome> {
    if (view.desiredConfig === t.hash && payloadCeilingStale(ctx.session, payloadWant(t, view, ctx)))
      await this.#giveAgentBack(t, ctx);
    return this.#halted(t, ctx.machine, view);
  }

  /** The node is Degraded towards the target: the Machine says why (read by the NodePool's status), as a failure or
   * as a wait for the maintenance window (NodeView.waiting). A failure's answer backs off (update-answer.ts); a
   * wait is asked about again at the usual pace, so the node moves on soon after the window opens. */
  async #halted(t: UpdateTarget, machine: MachineObject, view: NodeView): Promise<UpdateOutcome> {
    const failure = `${view.name}: ${view.reason ?? 'Degraded'}`;
    await this.#setFailure(machine, failure, view.waiting === true);
    if (view.waiting) return { state: 'in-progress', message: `Node ${failure}` };
    const attempt = this.#halts.get(haltKey(t)) ?? 0;
    this.#halts.set(haltKey(t), attempt + 1);
    return {
      state: 'halted',
      attempt,
      message: `Node ${failure} (update halted; moving the pool to another release or config retargets it)`,
    };
  }

  /**
   * The hash the Machine's MachineDeployment names now, when it supersedes the target (update-answer.ts). A
   * stale cache must not end an update that is not superseded (the Machine would be left claiming a config its
   * node never reached): the MachineDeployment is read again from the apiserver before that is decided.
   */
  async #supersededBy(t: UpdateTarget, { deployment }: StepContext, view: NodeView): Promise<string | undefined> {
    if (!deployment || !superseded(t.hash, deploymentHash(t.pool, deployment), view.phase)) return undefined;
    const live = await this.#liveDeployment(deployment);
    const hash = deploymentHash(t.pool, live);
    return live && hash !== undefined && superseded(t.hash, hash, view.phase) ? hash : undefined;
  }

  /** The MachineDeployment as the apiserver has it now: a list by name is a quorum read the Role already allows. */
  async #liveDeployment(d: DeploymentObject): Promise<DeploymentObject | undefined> {
    const list = (await this.#custom.listNamespacedCustomObject({
      ...RESOURCES.machineDeployments,
      namespace: d.metadata.namespace ?? '',
      fieldSelector: `metadata.name=${d.metadata.name}`,
    })) as { items: DeploymentObject[] };
    return list.items[0];
  }

  /** The update towards a superseded hash is over without touching the node: see update-answer.ts. */
  async #superseded(t: UpdateTarget, { node, machine }: StepContext, next: string): Promise<UpdateOutcome> {
    const name = node.metadata?.name ?? '';
    await this.#setFailure(machine, undefined);
    this.#opts.log.info(
      { machine: `${t.namespace}/${t.machine}`, node: name, hash: t.hash, next },
      'In-place update superseded: ended so that Cluster API moves the Machine to the hash its MachineDeployment names',
    );
    return {
      state: 'done',
      message: `Node ${name}: ${t.hash} is superseded by ${next}; the node is left as it is, and Cluster API updates it to ${next} next`,
    };
  }

  /** Writes (or, undefined, removes) ANNOTATIONS.inPlaceFailure on the Machine, or ANNOTATIONS.inPlaceWaiting when
   * the node only waits for the window, removing the other; only when the cache shows otherwise. */
  async #setFailure(machine: MachineObject, failure: string | undefined, waiting = false): Promise<void> {
    const want = {
      [ANNOTATIONS.inPlaceFailure]: waiting ? null : (failure ?? null),
      [ANNOTATIONS.inPlaceWaiting]: waiting ? (failure ?? null) : null,
    };
    const ann = machine.metadata.annotations ?? {};
    if (Object.entries(want).every(([k, v]) => (ann[k] ?? null) === v)) return;
    await annotateMachine(this.#custom, machine, want);
  }

  /** Handed the target, but its payload Secret or agent Pod is gone (deleted mid-update): given them again. */
  async #giveAgentBack(t: UpdateTarget, ctx: StepContext): Promise<void> {
    await ensureAgentObjects(ctx.session, await this.#agentObjects(t, ctx));
    this.#opts.log.info(
      { machine: `${t.namespace}/${t.machine}`, node: ctx.node.metadata?.name, hash: t.hash },
      'Agent Pod or payload Secret given again to a node handed the target',
    );
  }

  /**
   * Idle, or in flight towards an older target: hand it this one (the agent starts over from its host).
   * Paused (spec.pausedUntil) or held (the rollout gate): no node is handed this target; one handed it before
   * finishes (#step).
   */
  async #handOut(t: UpdateTarget, ctx: StepContext): Promise<UpdateOutcome> {
    const name = ctx.node.metadata?.name ?? '';
    const hold = holdOf(ctx.deployment);
    if (hold !== undefined) return progress(`Node ${name} not handed ${t.hash}: ${hold}`);
    const objects = await this.#agentObjects(t, ctx);
    await spareFromRemediation(this.#custom, ctx.machine);
    const healthCheckTimeout = ctx.deployment?.metadata.annotations?.[ANNOTATIONS.healthCheckTimeout];
    await handOutNode(ctx.session, { ...objects, healthCheckTimeout });
    this.#opts.log.info(
      { machine: `${t.namespace}/${t.machine}`, node: name, hash: t.hash, healthCheckTimeout },
      'Node handed the target config',
    );
    return progress(`Node ${name} handed payload ${t.hash}`);
  }

  /**
   * What a node's payload Secret and agent Pod are made of, the same for a first hand-out and for objects given
   * again: a recreated Secret without the pool's policy or the booted config would have the agent plan against
   * the host alone with the default policy (drain and reboot).
   */
  async #agentObjects(t: UpdateTarget, { node, machine, deployment }: StepContext): Promise<AgentObjects> {
    const config = await this.#opts.payloads.fetch({ namespace: t.namespace, pool: t.pool, hash: t.hash });
    // The Machine keeps the data Secret it booted from until its update is over (nodepool-controller bootstrap.ts).
    const bootedHash = hashOfUserData(t.pool, machine.spec.bootstrap.dataSecretName);
    const at = { namespace: t.namespace, pool: t.pool, target: t.hash, node, booted: bootedHash };
    return {
      node: node.metadata?.name ?? '',
      pool: t.pool,
      hash: t.hash,
      config,
      agentImage: this.#opts.agentImage,
      disruptionPolicy: deployment?.metadata.annotations?.[ANNOTATIONS.disruptionPolicy],
      booted: await bootedPayload(this.#opts.payloads, at, this.#bootedWaits, this.#opts.log),
      ceiling: ceilingOf(deployment),
    };
  }

  /**
   * The Machine, its Node, its guest cluster's session and its MachineDeployment; NotReadyError while any
   * cannot be had yet. A Machine outside a MachineDeployment (no deployment-name label) has none: no pause,
   * the agent's default timeout.
   */
  #contextOf(t: UpdateTarget): StepContext {
    const machine = this.#machines.get({ namespace: t.namespace, name: t.machine });
    if (!machine) throw new NotReadyError(`Machine ${t.namespace}/${t.machine} is not in the cache yet`);
    const nodeName = machine.status?.nodeRef?.name;
    if (!nodeName) throw new NotReadyError(`Machine ${t.namespace}/${t.machine} has no Node yet`);
    const session = this.#clusters.get(clusterKey(t.namespace, t.cluster));
    if (!session) throw new NotReadyError(`guest cluster ${t.cluster} is not reachable yet`);
    const node = session.nodes.get(clusterScoped(nodeName));
    if (!node) throw new NotReadyError(`Node ${nodeName} is not in guest cluster ${t.cluster}`);
    const deploymentName = machine.metadata.labels?.[LABELS.capiDeploymentName];
    if (deploymentName === undefined) return { session, node, machine };
    const deployment = this.#deployments.get({ namespace: t.namespace, name: deploymentName });
    if (!deployment)
      throw new NotReadyError(
        `MachineDeployment ${t.namespace}/${deploymentName} of Machine ${t.machine} is not in the cache yet`,
      );
    return { session, node, machine, deployment };
  }
}
