/**
 * UpdateMachine: one Machine's in-place update, driven through the same agent protocol as the MachineSet
 * path and with the same functions (guest.ts, select.ts): the Machine's Node (status.nodeRef, in the guest
 * cluster of its `<cluster>-kubeconfig` Secret) gets the payload Secret, the agent Pod and desiredConfig;
 * the agent asks the central drainer for a drain, applies, reboots and reports through the Node's
 * annotations. Each call is one level-based step read from those annotations and caches, so a restarted
 * extension carries on where the Node is, and calling it again changes nothing.
 */
import * as k8s from '@kubernetes/client-node';
import { CAPI_API_VERSION, CAPI_GROUP, type Machine } from '../../../api/src/capi.js';
import { ANNOTATIONS, DRAIN_PREFIX, NODE_STATES } from '../../../api/src/keys.js';
import { NotReadyError } from '../../../support/src/errors.js';
import { GuestClusters, clusterKey } from '../../../support/src/guest-clusters.js';
import { ResilientInformer } from '../../../support/src/informer.js';
import type { Logger } from '../../../support/src/logger.js';
import { cleanUpNode, createGuestSession, expectedDesired, handOutNode, startGuestSession, stopGuestSession, type GuestSession } from '../guest.js';
import type { PayloadSource } from '../payload.js';
import { classifyNode } from '../select.js';

/** The Machine to update and the payload it should reach (from its user-data Secret name). */
export interface UpdateTarget {
  namespace: string;
  machine: string;
  pool: string;
  hash: string;
}

export type UpdateOutcome = { state: 'in-progress' | 'done' | 'failed'; message: string };

/** What the hook handler needs: one step towards the target. */
export interface MachineUpdates {
  update(target: UpdateTarget): Promise<UpdateOutcome>;
}

export interface MachineUpdaterOptions {
  kubeConfig: k8s.KubeConfig;
  log: Logger;
  payloads: PayloadSource;
  agentImage: string;
}

type MachineObject = Machine & k8s.KubernetesObject;

const progress = (message: string): UpdateOutcome => ({ state: 'in-progress', message });

/** What a node in flight is doing, from its annotations. */
function describeNode(node: k8s.V1Node, hash: string): string {
  const ann = node.metadata?.annotations ?? {};
  const drain = ann[ANNOTATIONS.desiredDrain];
  if (drain !== undefined && drain !== ann[ANNOTATIONS.lastAppliedDrain]) return `${drain.startsWith(DRAIN_PREFIX) ? 'draining' : 'uncordoning'} (${drain})`;
  if (ann[ANNOTATIONS.state] === NODE_STATES.working) return `the agent is applying ${hash}`;
  return `waiting for the agent to pick up ${hash}`;
}

export class MachineUpdater implements MachineUpdates {
  #opts: MachineUpdaterOptions;
  #machines: ResilientInformer<MachineObject>;
  #clusters: GuestClusters<GuestSession>;
  /** The step under way per Machine: a second call joins it instead of racing it. */
  #inflight = new Map<string, Promise<UpdateOutcome>>();

  constructor(opts: MachineUpdaterOptions) {
    this.#opts = opts;
    const custom = opts.kubeConfig.makeApiClient(k8s.CustomObjectsApi);
    const version = CAPI_API_VERSION.split('/')[1] ?? '';
    this.#machines = new ResilientInformer<MachineObject>({
      kubeConfig: opts.kubeConfig,
      path: `/apis/${CAPI_GROUP}/${version}/machines`,
      list: async () => (await custom.listClusterCustomObject({ group: CAPI_GROUP, version, plural: 'machines' })) as k8s.KubernetesListObject<MachineObject>,
      log: opts.log,
      onEvent: () => undefined,
    });
    this.#clusters = new GuestClusters<GuestSession>({
      kubeConfig: opts.kubeConfig,
      log: opts.log,
      // The hook is called again by Cluster API (retryAfterSeconds): nothing to wake on guest events.
      create: (cluster) => createGuestSession(cluster, () => undefined),
      start: startGuestSession,
      close: stopGuestSession,
    });
  }

  get synced(): boolean {
    return this.#machines.synced;
  }

  async start(): Promise<void> {
    await this.#machines.start();
    await this.#clusters.start();
  }

  async stop(): Promise<void> {
    await Promise.allSettled(this.#inflight.values());
    await Promise.all([this.#clusters.stop(), this.#machines.stop()]);
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
    const { session, node } = this.#nodeOf(t);
    const name = node.metadata?.name ?? '';
    const view = classifyNode(node, t.hash, expectedDesired(session, node));
    if (view.phase === 'done') {
      await cleanUpNode(session, name);
      return { state: 'done', message: `Node ${name} is at ${t.hash}` };
    }
    if (view.phase === 'degraded') return { state: 'failed', message: `Node ${name}: ${view.reason ?? 'Degraded'}` };
    if (view.phase === 'updating' && view.desiredConfig === t.hash) return progress(`Node ${name}: ${describeNode(node, t.hash)}`);
    // Idle, or in flight towards an older target: hand it this one (the agent starts over from its host).
    const config = await this.#opts.payloads.fetch({ namespace: t.namespace, pool: t.pool, hash: t.hash });
    await handOutNode(session, { node: name, pool: t.pool, hash: t.hash, config, agentImage: this.#opts.agentImage });
    this.#opts.log.info({ machine: `${t.namespace}/${t.machine}`, node: name, hash: t.hash }, 'Node handed the target config');
    return progress(`Node ${name} handed payload ${t.hash}`);
  }

  /** The Machine's Node and its guest cluster's session; NotReadyError while either cannot be had yet. */
  #nodeOf(t: UpdateTarget): { session: GuestSession; node: k8s.V1Node } {
    const machine = this.#machines.get(t.machine, t.namespace);
    if (!machine) throw new NotReadyError(`Machine ${t.namespace}/${t.machine} is not in the cache yet`);
    const nodeName = machine.status?.nodeRef?.name;
    if (!nodeName) throw new NotReadyError(`Machine ${t.namespace}/${t.machine} has no Node yet`);
    const session = this.#clusters.get(clusterKey(t.namespace, machine.spec.clusterName));
    if (!session) throw new NotReadyError(`guest cluster ${machine.spec.clusterName} is not reachable yet`);
    const node = session.nodes.get(nodeName);
    if (!node) throw new NotReadyError(`Node ${nodeName} is not in guest cluster ${machine.spec.clusterName}`);
    return { session, node };
  }
}
