/**
 * What the in-place engines do in a guest cluster, shared by both: the MachineSet upgrader (Kindling's own
 * annotations) and the Cluster API Runtime Extension (UpdateMachine). One session per guest cluster (Node,
 * agent Pod and payload Secret informers), handing a node its target (payload Secret, agent Pod,
 * desiredConfig), and cleaning up behind it. Everything here is idempotent: calling it again changes nothing.
 */
import * as k8s from '#k8s';
import { ANNOTATIONS, FIELD_MANAGERS, LABELS } from '../../api/src/keys.js';
import { createApplier, type Applier } from '../../support/src/apply.js';
import { isConflict, isNotFound, NotReadyError } from '../../support/src/errors.js';
import { forEachLimited } from '../../support/src/limited.js';
import type { GuestCluster } from '../../support/src/guest-clusters.js';
import { ResilientInformer } from '../../support/src/informer.js';
import { slimNode } from '../../support/src/slim-node.js';
import { agentNodePolicy, agentPod, agentRbac, guestNamespace, payloadSecret, type BootedPayload } from './desired.js';
import { agentPodName, GUEST_NAMESPACE, PAYLOAD_KEYS, payloadSecretName } from '../../api/src/node-agent.js';
import { withRolloutTaint, type RolloutTaint } from './taints.js';
import { clusterScoped } from '../../support/src/object-key.js';

export interface GuestSession {
  cluster: GuestCluster;
  core: k8s.CoreV1Api;
  applier: Applier;
  nodes: ResilientInformer<k8s.V1Node>;
  pods: ResilientInformer<k8s.V1Pod>;
  secrets: ResilientInformer<k8s.V1Secret>;
  /** Namespace and RBAC applied in this session. */
  baseReady: boolean;
  /** desiredConfig values written and not yet seen in the node cache. */
  expected: Map<string, string>;
  /**
   * The agent Pods and payload Secrets this process deleted, uid → name, while the caches may still show them:
   * such a Pod is no agent for a later hand-out (it is gone, or going), and the clean-up need not delete it twice.
   */
  deleted: { pods: Map<string, string>; secrets: Map<string, string> };
}

const merge = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch);

/** A session's informers (not started): Nodes, and the agent Pods and payload Secrets of GUEST_NAMESPACE. */
export function createGuestSession(cluster: GuestCluster, onEvent: () => void): GuestSession {
  const kc = cluster.kubeConfig;
  const core = kc.makeApiClient(k8s.CoreV1Api);
  const log = cluster.log;
  const ns = GUEST_NAMESPACE;
  const informer = <T extends k8s.KubernetesObject>(
    path: string,
    list: () => Promise<k8s.KubernetesListObject<T>>,
    labelSelector?: string,
    transform?: (o: T) => T,
  ): ResilientInformer<T> =>
    new ResilientInformer<T>({
      kubeConfig: kc,
      path,
      list,
      labelSelector,
      transform,
      quietWhenUnchanged: transform !== undefined,
      log,
      onEvent,
    });
  return {
    cluster,
    core,
    applier: createApplier(kc, FIELD_MANAGERS.inplaceUpgrader),
    nodes: informer('/api/v1/nodes', () => core.listNode(), undefined, slimNode),
    pods: informer(
      `/api/v1/namespaces/${ns}/pods`,
      () => core.listNamespacedPod({ namespace: ns, labelSelector: LABELS.agentPod }),
      LABELS.agentPod,
    ),
    secrets: informer(
      `/api/v1/namespaces/${ns}/secrets`,
      () => core.listNamespacedSecret({ namespace: ns, labelSelector: LABELS.payloadSecret }),
      LABELS.payloadSecret,
    ),
    baseReady: false,
    expected: new Map(),
    deleted: { pods: new Map(), secrets: new Map() },
  };
}

export async function startGuestSession(s: GuestSession): Promise<void> {
  await Promise.all([s.nodes.start(), s.pods.start(), s.secrets.start()]);
}

export async function stopGuestSession(s: GuestSession): Promise<void> {
  await Promise.all([s.nodes.stop(), s.pods.stop(), s.secrets.stop()]);
}

/**
 * The desiredConfig this process wrote to a node and its informer has not shown yet (forgotten once the cache
 * shows it). Without it a stale cache would show the node idle, and it would be handed out twice.
 */
export function expectedDesired(session: GuestSession, node: k8s.V1Node): string | undefined {
  const name = node.metadata?.name ?? '';
  const expected = session.expected.get(name);
  if (expected === undefined || node.metadata?.annotations?.[ANNOTATIONS.desiredConfig] === expected) {
    session.expected.delete(name);
    return undefined;
  }
  return expected;
}

/**
 * Promise.all that settles every promise before it rejects (with the first failure): no write of a failed
 * pass outlives it, where the next pass would not see it (a node pointed at the target after the pass that
 * handed it out had ended would not be counted, and one node too many could be handed out).
 */
export async function settleAll(writes: readonly (Promise<unknown> | undefined)[]): Promise<void> {
  const failed = (await Promise.allSettled(writes.filter((w) => w !== undefined))).find((r) => r.status === 'rejected');
  if (failed) throw failed.reason instanceof Error ? failed.reason : new Error(String(failed.reason));
}

/** The guest namespace and the agent's RBAC, once per session. */
export async function ensureBase(session: GuestSession): Promise<void> {
  if (session.baseReady) return;
  const apply = (objs: k8s.KubernetesObject[]): Promise<void> =>
    settleAll(objs.map((obj) => session.applier.apply(obj)));
  // The policy before the RBAC: the agent's RBAC alone would let it patch every Node. The namespace with the
  // policy, before the ServiceAccount and Role that live in it (two rounds of writes, not eight).
  await apply([guestNamespace(), ...agentNodePolicy()]);
  await apply(agentRbac());
  session.baseReady = true;
}

/**
 * A node's payload Secret and agent Pod. The policy and the booted config are required keys (undefined when
 * there is none): a caller that leaves them out, as the recreation of a deleted Secret once did, does not compile.
 */
export interface AgentObjects {
  node: string;
  pool: string;
  hash: string;
  config: Buffer;
  agentImage: string;
  /** The pool's effective disruption policy (JSON, ANNOTATIONS.disruptionPolicy) for the payload Secret; unset: the defaults. */
  disruptionPolicy: string | undefined;
  /** The config the node booted with, for a node never updated in place (payload.ts bootedPayload). */
  booted: BootedPayload | undefined;
  /** The pool's ANNOTATIONS.rolloutCeiling for the payload Secret; unset: the agent may drain and reboot. */
  ceiling: string | undefined;
}

export interface HandOut extends AgentObjects {
  /** The pool's health gate timeout (a Go duration) for the agent; unset: the agent's default. */
  healthCheckTimeout?: string;
}

/** Neither terminating nor deleted by this process: an object the cache shows that is still there to be used. */
function usable(o: k8s.KubernetesObject, deleted: Map<string, string>): boolean {
  return !o.metadata?.deletionTimestamp && !deleted.has(o.metadata?.uid ?? '');
}

/**
 * The node's agent Pod as the cache shows it, if it can be the agent of a hand-out: a Pod that is terminating,
 * or that this process deleted (an earlier rollout's clean-up, not in the cache yet), is no agent.
 */
function agentPodOf(session: GuestSession, node: string): k8s.V1Pod | undefined {
  const pod = session.pods.get({ namespace: GUEST_NAMESPACE, name: agentPodName(node) });
  return pod && usable(pod, session.deleted.pods) ? pod : undefined;
}

/** What a node's payload Secret must say for the node's agent: its target and the rollout's ceiling. */
export type PayloadWant = Pick<AgentObjects, 'node' | 'hash' | 'ceiling'>;

/**
 * The node's payload Secret at the hash and ceiling wanted, as the cache shows it, if usable (see agentPodOf).
 * A Secret at the same hash with another ceiling is stale: the agent of a node Degraded by the ceiling tries
 * again once the Secret no longer has it.
 */
function payloadSecretOf(session: GuestSession, want: PayloadWant): k8s.V1Secret | undefined {
  const secret = payloadSecretAt(session, want);
  return secret && ceilingOf(secret) === want.ceiling ? secret : undefined;
}

/** The node's usable payload Secret at the hash wanted, whatever its ceiling. */
function payloadSecretAt(session: GuestSession, want: PayloadWant): k8s.V1Secret | undefined {
  const secret = session.secrets.get({ namespace: GUEST_NAMESPACE, name: payloadSecretName(want.node) });
  return secret && usable(secret, session.deleted.secrets) && secret.metadata?.labels?.[LABELS.configHash] === want.hash
    ? secret
    : undefined;
}

function ceilingOf(secret: k8s.V1Secret): string | undefined {
  const value = secret.data?.[PAYLOAD_KEYS.rolloutCeiling];
  return value === undefined ? undefined : Buffer.from(value, 'base64').toString();
}

/** Whether the node's payload Secret at the hash wanted holds another ceiling than the pool's now: a node Degraded
 * by the ceiling gets it rewritten, and nothing else (a node Degraded otherwise keeps its agent as it is). */
export function payloadCeilingStale(session: GuestSession, want: PayloadWant): boolean {
  const secret = payloadSecretAt(session, want);
  return secret !== undefined && ceilingOf(secret) !== want.ceiling;
}

/** Whether a node handed a hash lacks its payload Secret as wanted or its agent Pod (gone since, never written, or
 * the Secret's ceiling is not the pool's now). */
export function agentObjectsMissing(session: GuestSession, want: PayloadWant): boolean {
  return !payloadSecretOf(session, want) || !agentPodOf(session, want.node);
}

/**
 * The node's payload Secret at h.hash and its agent Pod, each applied unless the cache shows it usable. A Pod
 * still terminating on the server cannot be replaced yet (one name per node): NotReadyError, and its deletion
 * wakes the session, whose next pass creates it.
 */
export async function ensureAgentObjects(session: GuestSession, h: AgentObjects): Promise<void> {
  const [, pod] = await Promise.all([
    payloadSecretOf(session, h)
      ? undefined
      : session.applier.apply(
          payloadSecret({
            node: h.node,
            pool: h.pool,
            hash: h.hash,
            config: h.config,
            disruptionPolicy: h.disruptionPolicy,
            booted: h.booted,
            ...(h.ceiling === undefined ? {} : { ceiling: h.ceiling }),
          }),
        ),
    agentPodOf(session, h.node)
      ? undefined
      : session.applier.apply(agentPod({ node: h.node, pool: h.pool, image: h.agentImage })),
  ]);
  if (pod?.metadata?.deletionTimestamp)
    throw new NotReadyError(
      `the agent Pod of node ${h.node} is still terminating: a new one is created once it is gone`,
      2_000,
    );
}

/**
 * A node's payload Secret and agent Pod (ensureAgentObjects), then desiredConfig with the health gate's
 * timeout, so the agent finds its Secret. `before`: the caller's own step that must precede desiredConfig
 * (sparing the Machine from remediation); it runs beside the Secret and the Pod, since every write in
 * sequence here is one more round trip between a node's Done and the next node's start.
 */
export async function handOutNode(session: GuestSession, h: HandOut, before?: () => Promise<unknown>): Promise<void> {
  await ensureBase(session);
  await settleAll([before?.(), ensureAgentObjects(session, h), setRolloutTaint(session, h.node, 'updating')]);
  const annotations = {
    [ANNOTATIONS.desiredConfig]: h.hash,
    [ANNOTATIONS.healthCheckTimeout]: h.healthCheckTimeout ?? null,
  };
  await session.core.patchNode({ name: h.node, body: { metadata: { annotations } } }, merge);
  session.expected.set(h.node, h.hash);
}

/**
 * Makes `want` the node's only rollout taint (taints.ts), its other taints kept. Node spec.taints is an atomic
 * list (a server-side apply would own all of it), so this is a merge patch of the whole list under the
 * resourceVersion it was computed from: a taint another writer added meanwhile makes a conflict, not a loss,
 * and the patch is computed again once from the live Node. Nothing is written when the Node has it already,
 * or is not in the cache (the node's next event brings the next pass).
 */
export async function setRolloutTaint(
  session: GuestSession,
  name: string,
  want: RolloutTaint | undefined,
): Promise<void> {
  const patch = async (node: k8s.V1Node): Promise<void> => {
    const taints = withRolloutTaint(node.spec?.taints ?? [], want);
    if (!taints) return;
    const resourceVersion = node.metadata?.resourceVersion;
    await session.core.patchNode({ name, body: { metadata: { resourceVersion }, spec: { taints } } }, merge);
  };
  const cached = session.nodes.get(clusterScoped(name));
  if (!cached) return;
  try {
    await patch(cached);
  } catch (err) {
    if (isNotFound(err)) return;
    if (!isConflict(err)) throw err;
    await patch(await session.core.readNode({ name }));
  }
}

/** Gone already (404), or the name now holds a newer object than the one deleted (409: the uid precondition). */
const ignoreGone = (err: unknown): void => {
  if (!isNotFound(err) && !isConflict(err)) throw err;
};

/** Forgets the deleted objects the cache no longer shows (or shows replaced by a newer one of the same name). */
function forgetGone(deleted: Map<string, string>, cached: (name: string) => k8s.KubernetesObject | undefined): void {
  for (const [uid, name] of deleted) if (cached(name)?.metadata?.uid !== uid) deleted.delete(uid);
}

/**
 * Deletes at most this many at once. A pool's clean-up is two deletes per node, each a connection of its own,
 * and nothing waits on it (the rollout is recorded complete before): hundreds at once would crowd out the
 * work that does wait, in this process and in the guest apiserver.
 */
const DELETES_AT_ONCE = 8;

/**
 * Deletes what the caches show, each by its uid (a stale cache must not delete a newer object of the same
 * name), skipping what is terminating or already deleted here, and remembers each one deleted.
 */
async function deleteAgentObjects(session: GuestSession, pods: k8s.V1Pod[], secrets: k8s.V1Secret[]): Promise<void> {
  const namespace = GUEST_NAMESPACE;
  const { deleted } = session;
  forgetGone(deleted.pods, (name) => session.pods.get({ namespace, name }));
  forgetGone(deleted.secrets, (name) => session.secrets.get({ namespace, name }));
  const each = <T extends k8s.KubernetesObject>(
    objs: T[],
    gone: Map<string, string>,
    del: (name: string, uid: string) => Promise<unknown>,
  ): (() => Promise<void>)[] =>
    objs
      .filter((o) => usable(o, gone))
      .map((o) => async () => {
        const { name = '', uid = '' } = o.metadata ?? {};
        await del(name, uid).then(() => undefined, ignoreGone);
        gone.set(uid, name);
      });
  const deletes = [
    ...each(pods, deleted.pods, (name, uid) =>
      session.core.deleteNamespacedPod({ name, namespace, gracePeriodSeconds: 0, body: { preconditions: { uid } } }),
    ),
    ...each(secrets, deleted.secrets, (name, uid) =>
      session.core.deleteNamespacedSecret({ name, namespace, body: { preconditions: { uid } } }),
    ),
  ];
  await forEachLimited(deletes, DELETES_AT_ONCE, (del) => del());
}

/** Removes a pool's agent Pods and payload Secrets (from what the caches show: nothing to do is free). */
export async function cleanUpPool(session: GuestSession, pool: string): Promise<void> {
  const mine = (o: k8s.KubernetesObject): boolean => o.metadata?.labels?.[LABELS.nodePool] === pool;
  await deleteAgentObjects(
    session,
    session.pods.list(GUEST_NAMESPACE).filter(mine),
    session.secrets.list(GUEST_NAMESPACE).filter(mine),
  );
}

/** Removes one node's agent Pod, payload Secret (from what the caches show) and rollout taint: it is done. */
export async function cleanUpNode(session: GuestSession, node: string): Promise<void> {
  const pod = session.pods.get({ namespace: GUEST_NAMESPACE, name: agentPodName(node) });
  const secret = session.secrets.get({ namespace: GUEST_NAMESPACE, name: payloadSecretName(node) });
  await settleAll([
    deleteAgentObjects(session, pod ? [pod] : [], secret ? [secret] : []),
    setRolloutTaint(session, node, undefined),
  ]);
}
