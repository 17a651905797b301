/**
 * The central drainer (management cluster, never on nodes). For every guest cluster it watches Nodes; a Node
 * whose desiredDrain differs from lastAppliedDrain is drained (cordon, evict through the Eviction API, wait)
 * or uncordoned, and lastAppliedDrain is written only once that is done. A drain is level-based and
 * non-blocking: each reconcile cordons if needed, lists the node's pods, evicts those whose backoff passed
 * and requeues, so one slow PDB never holds a worker and a restarted drainer simply carries on.
 */
import * as k8s from '#k8s';
import { Gauge, Histogram, type Registry } from 'prom-client';
import { type Machine, type MachineSet } from '../../api/src/capi.js';
import { ANNOTATIONS, FIELD_MANAGERS, LABELS } from '../../api/src/keys.js';
import { ResilientInformer } from '../../support/src/informer.js';
import { slimNode } from '../../support/src/slim-node.js';
import type { Logger } from '../../support/src/logger.js';
import type { QueueMetrics } from '../../support/src/metrics.js';
import type { ReconcileResult, WorkQueue } from '../../support/src/queue.js';
import { createController, type Controller, type Source } from '../../support/src/controller.js';
import { realClock, type Clock } from '../../support/src/timers.js';
import { formatDuration, type Namespaces } from '../../support/src/config.js';
import { customResource, type Informer } from '../../support/src/namespaced-informer.js';
import { GuestClusters, type GuestCluster } from '../../support/src/guest-clusters.js';
import { BLOCKED_EVENT_INTERVAL_MS, blockedAnnotation, blockedEvent } from './blocked.js';
import { eventBody, EventRateLimiter, recordEvent, type EventNote } from '../../support/src/events.js';
import { Evictor, type Block } from './evict.js';
import {
  cordonPatch,
  drainedPatch,
  drainFailedPatch,
  drainRequest,
  drainTimeoutMs,
  planEvictions,
  podList,
  uncordonPatch,
} from './plan.js';
import { RESOURCES, type ResourceType } from '../../api/src/resources.js';
import { clusterScoped } from '../../support/src/object-key.js';

export interface DrainerOptions {
  kubeConfig: k8s.KubeConfig;
  /** The tenant namespaces whose Machines and guest kubeconfig Secrets are watched (--namespaces). */
  namespaces: Namespaces;
  log: Logger;
  registry: Registry;
  queueMetrics?: QueueMetrics;
  /** Drain timeout when the node's MachineSet/Machine says nothing (0: none). */
  defaultDrainTimeoutMs: number;
  /** Evictions in flight at once, per drain. */
  evictionConcurrency?: number;
  /** Nodes reconciled at once. */
  workers?: number;
  clock?: Clock;
  /** Least time between two DrainBlocked Events of one node and PodDisruptionBudget. */
  blockedEventIntervalMs?: number;
}

interface Session {
  cluster: GuestCluster;
  core: k8s.CoreV1Api;
  nodes: ResilientInformer<k8s.V1Node>;
}

interface DrainTarget {
  session: Session;
  node: k8s.V1Node;
  value: string;
  log: Logger;
}

interface DrainerMetrics {
  inProgress: Set<string>;
  duration: Histogram<'result'>;
}

const nodeKey = (clusterKey: string, node: string): string => `${clusterKey}/${node}`;
function parseKey(key: string): { clusterKey: string; node: string } {
  const i = key.lastIndexOf('/');
  return { clusterKey: key.slice(0, i), node: key.slice(i + 1) };
}

/** A Cluster API informer the drain reads (its timeout) and is not woken by. */
function capiSource<T extends k8s.KubernetesObject>(opts: DrainerOptions, resource: ResourceType): Source<T> {
  const api = opts.kubeConfig.makeApiClient(k8s.CustomObjectsApi);
  return {
    kubeConfig: opts.kubeConfig,
    namespaces: opts.namespaces,
    ...customResource<T>(api, resource),
  };
}

export class Drainer {
  readonly queue: WorkQueue;
  #opts: DrainerOptions;
  #controller: Controller;
  #clock: Clock;
  #clusters: GuestClusters<Session>;
  #machines: Informer<Machine & k8s.KubernetesObject>;
  #machineSets: Informer<MachineSet & k8s.KubernetesObject>;
  #evictor: Evictor;
  #blockedEvents: EventRateLimiter;
  #metrics: DrainerMetrics;

  constructor(opts: DrainerOptions) {
    this.#opts = opts;
    this.#clock = opts.clock ?? realClock;
    this.#metrics = createMetrics(opts.registry);
    this.#evictor = new Evictor({
      log: opts.log,
      clock: this.#clock,
      concurrency: opts.evictionConcurrency ?? 16,
      registry: opts.registry,
    });
    this.#blockedEvents = new EventRateLimiter(this.#clock, opts.blockedEventIntervalMs ?? BLOCKED_EVENT_INTERVAL_MS);
    this.#clusters = new GuestClusters<Session>({
      kubeConfig: opts.kubeConfig,
      namespaces: opts.namespaces,
      log: opts.log,
      create: (cluster) => this.#createSession(cluster),
      start: (s) => s.nodes.start(),
      close: (s) => s.nodes.stop(),
      onOpened: (cluster) =>
        this.#clusters
          .get(cluster.key)
          ?.nodes.list()
          .forEach((n) => this.#enqueue(cluster.key, n)),
    });
    // The nodes are watched per guest cluster, in sessions that open once the Cluster API caches are synced.
    this.#controller = createController({
      name: 'drainer',
      log: opts.log,
      clock: this.#clock,
      workers: opts.workers ?? 16,
      queueMetrics: opts.queueMetrics,
      keyField: 'node',
      failureMessage: 'Drain reconcile failed: retrying with backoff',
      reconcile: (key) => this.#reconcile(key),
      parts: [this.#clusters],
    });
    this.queue = this.#controller.queue;
    this.#machines = this.#controller.watch(capiSource<Machine & k8s.KubernetesObject>(opts, RESOURCES.machines));
    this.#machineSets = this.#controller.watch(
      capiSource<MachineSet & k8s.KubernetesObject>(opts, RESOURCES.machineSets),
    );
  }

  async start(): Promise<void> {
    await this.#controller.start();
  }

  async stop(): Promise<void> {
    await this.#controller.stop();
  }

  #createSession(cluster: GuestCluster): Session {
    const core = cluster.kubeConfig.makeApiClient(k8s.CoreV1Api);
    const nodes = new ResilientInformer<k8s.V1Node>({
      kubeConfig: cluster.kubeConfig,
      path: '/api/v1/nodes',
      list: () => core.listNode(),
      transform: slimNode,
      quietWhenUnchanged: true,
      log: cluster.log,
      onEvent: (node, event) =>
        event === 'delete'
          ? this.#forget(nodeKey(cluster.key, node.metadata?.name ?? ''))
          : this.#enqueue(cluster.key, node),
    });
    return { cluster, core, nodes };
  }

  #enqueue(clusterKey: string, node: k8s.V1Node): void {
    const key = nodeKey(clusterKey, node.metadata?.name ?? '');
    // A block left on a node whose request went away (a restart in between) still needs clearing.
    const idle =
      drainRequest(node).kind === 'none' && node.metadata?.annotations?.[ANNOTATIONS.drainBlocked] === undefined;
    if (idle && !this.#metrics.inProgress.has(key)) return;
    this.queue.add(key);
  }

  #forget(key: string): void {
    this.#metrics.inProgress.delete(key);
    this.queue.forget(key);
  }

  async #reconcile(key: string): Promise<ReconcileResult | void> {
    const { clusterKey, node: name } = parseKey(key);
    const session = this.#clusters.get(clusterKey);
    // Not open (yet): onOpened enqueues every node of the cluster once its informers are synced.
    if (!session) return;
    const node = session.nodes.get(clusterScoped(name));
    if (!node) return this.#forget(key);
    const log = session.cluster.log.child({ node: name });
    const request = drainRequest(node);
    switch (request.kind) {
      case 'drain':
        return this.#drain(session, node, request.value, log);
      case 'uncordon':
        return this.#uncordon(session, node, request.value, log);
      case 'invalid':
        log.warn({ desiredDrain: request.value }, 'desiredDrain is neither drain-<hash> nor uncordon-<hash>: ignored');
        return this.#clearBlock(session, node);
      default:
        // No drain (done, given up, or the request withdrawn): a block shown for it is over.
        this.#metrics.inProgress.delete(key);
        return this.#clearBlock(session, node);
    }
  }

  async #drain(session: Session, node: k8s.V1Node, value: string, log: Logger): Promise<ReconcileResult | void> {
    const name = node.metadata?.name ?? '';
    const current = await this.#cordon(session, node, value, log);
    const startedAt = startedAtOf(current, this.#clock.now());
    const pods = (await session.core.listPodForAllNamespaces({ fieldSelector: `spec.nodeName=${name}` })).items;
    const plan = planEvictions(pods);
    const target = { session, node: current, value, log };
    if (plan.evict.length === 0 && plan.waitFor.length === 0)
      return this.#drained(target, startedAt, plan.skipped.length);
    const timeoutMs = drainTimeoutMs({
      ...this.#capiObjectsOf(session.cluster, name),
      defaultMs: this.#opts.defaultDrainTimeoutMs,
    });
    const untilDeadline = timeoutMs > 0 ? timeoutMs - (this.#clock.now() - startedAt) : Infinity;
    if (untilDeadline <= 0)
      return this.#giveUp(target, { timeoutMs, startedAt, left: [...plan.evict, ...plan.waitFor] });
    const retryInMs = await this.#evictor.evictAll(session.core, plan.evict, log);
    // A block remembered from an earlier drain of the same pods (cancelled, then asked again) starts with this one.
    const blocks = this.#evictor.blocks(plan.evict).map((b) => ({ ...b, since: Math.max(b.since, startedAt) }));
    await this.#showBlocks(target, blocks, timeoutMs);
    return { requeueAfterMs: Math.min(retryInMs, Math.max(untilDeadline, 10)) };
  }

  /**
   * Makes the PodDisruptionBudgets refusing this drain visible: the oldest block on the Node (rewritten only
   * when it names another pod or budget, removed when none is left) and a Warning Event per budget, rate-limited.
   */
  async #showBlocks(target: DrainTarget, blocks: readonly Block[], timeoutMs: number): Promise<void> {
    const { session, node, log } = target;
    const name = node.metadata?.name ?? '';
    const value = blockedAnnotation(node.metadata?.annotations?.[ANNOTATIONS.drainBlocked], blocks);
    if (value !== undefined)
      await patchNode(session.core, name, { metadata: { annotations: { [ANNOTATIONS.drainBlocked]: value } } });
    for (const block of blocks) {
      if (!this.#blockedEvents.allow(`${nodeKey(session.cluster.key, name)} ${block.pdb}`)) continue;
      log.warn(
        { pod: block.pod, pdb: block.pdb, disruptionsAllowed: block.disruptionsAllowed, detail: block.detail },
        'Drain blocked by a PodDisruptionBudget: retrying',
      );
      await this.#event(session, node, blockedEvent(block, timeoutMs), log);
    }
  }

  async #clearBlock(session: Session, node: k8s.V1Node): Promise<void> {
    if (node.metadata?.annotations?.[ANNOTATIONS.drainBlocked] === undefined) return;
    await patchNode(session.core, node.metadata.name ?? '', {
      metadata: { annotations: { [ANNOTATIONS.drainBlocked]: null } },
    });
  }

  async #drained(target: DrainTarget, startedAt: number, skipped: number): Promise<void> {
    const { session, node, value, log } = target;
    const name = node.metadata?.name ?? '';
    await patchNode(session.core, name, drainedPatch(value));
    this.#finish(nodeKey(session.cluster.key, name), startedAt, 'success');
    log.info({ desiredDrain: value, skipped }, 'Drained');
    await this.#event(session, node, { type: 'Normal', reason: 'Drained', message: `Drained for ${value}` }, log);
  }

  /** Cordons (if not yet) and returns the node as it is now. */
  async #cordon(session: Session, node: k8s.V1Node, value: string, log: Logger): Promise<k8s.V1Node> {
    const name = node.metadata?.name ?? '';
    this.#metrics.inProgress.add(nodeKey(session.cluster.key, name));
    const cordon = cordonPatch(node, new Date(this.#clock.now()));
    if (!cordon) return node;
    const patched = await patchNode(session.core, name, cordon);
    log.info({ desiredDrain: value }, 'Cordoned: draining');
    return patched;
  }

  async #giveUp(target: DrainTarget, why: { timeoutMs: number; startedAt: number; left: k8s.V1Pod[] }): Promise<void> {
    const { session, node, value, log } = target;
    const name = node.metadata?.name ?? '';
    const refusals = this.#evictor.refusals(why.left);
    const message =
      `nodeDrainTimeout ${formatDuration(why.timeoutMs)} reached with ${why.left.length} pod(s) not evicted: ${podList(why.left)}` +
      (refusals ? ` (last refusal: ${refusals})` : '');
    await patchNode(session.core, name, drainFailedPatch(value, message));
    this.#finish(nodeKey(session.cluster.key, name), why.startedAt, 'timeout');
    log.warn({ desiredDrain: value, message }, 'Drain failed: gave up');
    await this.#event(session, node, { type: 'Warning', reason: 'DrainFailed', message }, log);
  }

  async #uncordon(session: Session, node: k8s.V1Node, value: string, log: Logger): Promise<void> {
    const name = node.metadata?.name ?? '';
    const patch = uncordonPatch(node, value);
    await patchNode(session.core, name, patch);
    this.#metrics.inProgress.delete(nodeKey(session.cluster.key, name));
    const kept = patch.spec === undefined && node.spec?.unschedulable === true;
    const message = kept ? `Left cordoned for ${value}: it was cordoned before the drain` : `Uncordoned for ${value}`;
    log.info({ desiredDrain: value, keptCordon: kept }, message);
    await this.#event(session, node, { type: 'Normal', reason: kept ? 'CordonKept' : 'Uncordoned', message }, log);
  }

  #finish(key: string, startedAt: number, result: 'success' | 'timeout'): void {
    this.#metrics.inProgress.delete(key);
    this.#metrics.duration.observe({ result }, Math.max(0, this.#clock.now() - startedAt) / 1000);
  }

  /** The node's Machine (status.nodeRef, same Cluster) and its MachineSet (label set-name). */
  #capiObjectsOf(cluster: GuestCluster, node: string): { machine?: Machine; machineSet?: MachineSet } {
    const machine = this.#machines
      .list(cluster.namespace)
      .find((m) => m.spec.clusterName === cluster.name && m.status?.nodeRef?.name === node);
    const setName = machine?.metadata.labels?.[LABELS.capiSetName];
    const machineSet = setName ? this.#machineSets.get({ namespace: cluster.namespace, name: setName }) : undefined;
    return { machine, machineSet };
  }

  async #event(session: Session, node: k8s.V1Node, note: EventNote, log: Logger): Promise<void> {
    const subject = {
      apiVersion: 'v1',
      kind: 'Node',
      metadata: { name: node.metadata?.name, uid: node.metadata?.uid },
    };
    await recordEvent(
      session.core,
      eventBody(
        subject,
        note,
        { component: FIELD_MANAGERS.drainer, instance: FIELD_MANAGERS.drainer },
        new Date(this.#clock.now()),
      ),
      log,
    );
  }
}

function startedAtOf(node: k8s.V1Node, now: number): number {
  const at = Date.parse(node.metadata?.annotations?.[ANNOTATIONS.drainStartedAt] ?? '');
  return Number.isNaN(at) ? now : at;
}

/** Merge patch of a Node: annotations only ever name the drainer's own keys. */
async function patchNode(core: k8s.CoreV1Api, name: string, body: object): Promise<k8s.V1Node> {
  try {
    return await core.patchNode({ name, body }, k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch));
  } catch (err) {
    throw new Error(`failed to patch Node ${name}`, { cause: err });
  }
}

function createMetrics(registry: Registry): DrainerMetrics {
  const inProgress = new Set<string>();
  new Gauge({
    name: 'kindling_drainer_drains_in_progress',
    help: 'Nodes being drained right now (cordoned, pods still to go).',
    registers: [registry],
    collect() {
      this.set(inProgress.size);
    },
  });
  const duration = new Histogram({
    name: 'kindling_drainer_drain_duration_seconds',
    help: 'Time from cordon to drained (success) or to giving up (timeout).',
    labelNames: ['result'],
    buckets: [0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800],
    registers: [registry],
  });
  return { inProgress, duration };
}
