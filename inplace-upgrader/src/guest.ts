/**
 * What the in-place engines do in a guest cluster, shared by both: the MachineSet upgrader (Kindling's own
 * annotations) and the Cluster API Runtime Extension (UpdateMachine). One session per guest cluster (Node,
 * agent Pod and payload Secret informers), handing a node its target (payload Secret, agent Pod,
 * desiredConfig), and cleaning up behind it. Everything here is idempotent: calling it again changes nothing.
 */
import * as k8s from '@kubernetes/client-node';
import { ANNOTATIONS, FIELD_MANAGERS, LABELS } from '../../api/src/keys.js';
import { createApplier, type Applier } from '../../support/src/apply.js';
import { isNotFound } from '../../support/src/errors.js';
import type { GuestCluster } from '../../support/src/guest-clusters.js';
import { ResilientInformer } from '../../support/src/informer.js';
import { agentNodePolicy, agentPod, agentPodName, agentRbac, GUEST_NAMESPACE, guestNamespace, payloadSecret, payloadSecretName } from './desired.js';

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
}

const merge = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch);

/** A session's informers (not started): Nodes, and the agent Pods and payload Secrets of GUEST_NAMESPACE. */
export function createGuestSession(cluster: GuestCluster, onEvent: () => void): GuestSession {
  const kc = cluster.kubeConfig;
  const core = kc.makeApiClient(k8s.CoreV1Api);
  const log = cluster.log;
  const ns = GUEST_NAMESPACE;
  const informer = <T extends k8s.KubernetesObject>(path: string, list: () => Promise<k8s.KubernetesListObject<T>>, labelSelector?: string): ResilientInformer<T> =>
    new ResilientInformer<T>({ kubeConfig: kc, path, list, labelSelector, log, onEvent });
  return {
    cluster,
    core,
    applier: createApplier(kc, FIELD_MANAGERS.inplaceUpgrader),
    nodes: informer('/api/v1/nodes', () => core.listNode()),
    pods: informer(`/api/v1/namespaces/${ns}/pods`, () => core.listNamespacedPod({ namespace: ns, labelSelector: LABELS.agentPod }), LABELS.agentPod),
    secrets: informer(`/api/v1/namespaces/${ns}/secrets`, () => core.listNamespacedSecret({ namespace: ns, labelSelector: LABELS.payloadSecret }), LABELS.payloadSecret),
    baseReady: false,
    expected: new Map(),
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

/** The guest namespace and the agent's RBAC, once per session. */
export async function ensureBase(session: GuestSession): Promise<void> {
  if (session.baseReady) return;
  await session.applier.apply(guestNamespace());
  // The policy first: the agent's RBAC alone would let it patch every Node.
  for (const obj of [...agentNodePolicy(), ...agentRbac()]) await session.applier.apply(obj);
  session.baseReady = true;
}

export interface HandOut {
  node: string;
  pool: string;
  hash: string;
  config: Buffer;
  agentImage: string;
  /** The pool's health gate timeout (a Go duration) for the agent; unset: the agent's default. */
  healthCheckTimeout?: string;
}

/** A node's payload Secret, then its agent Pod, then desiredConfig with the health gate's timeout (so the agent finds its Secret). */
export async function handOutNode(session: GuestSession, h: HandOut): Promise<void> {
  await ensureBase(session);
  const secret = session.secrets.get(payloadSecretName(h.node), GUEST_NAMESPACE);
  if (secret?.metadata?.labels?.[LABELS.configHash] !== h.hash) await session.applier.apply(payloadSecret({ node: h.node, pool: h.pool, hash: h.hash, config: h.config }));
  if (!session.pods.get(agentPodName(h.node), GUEST_NAMESPACE)) await session.applier.apply(agentPod({ node: h.node, pool: h.pool, image: h.agentImage }));
  const annotations = { [ANNOTATIONS.desiredConfig]: h.hash, [ANNOTATIONS.healthCheckTimeout]: h.healthCheckTimeout ?? null };
  await session.core.patchNode({ name: h.node, body: { metadata: { annotations } } }, merge);
  session.expected.set(h.node, h.hash);
}

const ignoreGone = (err: unknown): void => {
  if (!isNotFound(err)) throw err;
};

async function deleteAgentObjects(session: GuestSession, pods: k8s.V1Pod[], secrets: k8s.V1Secret[]): Promise<void> {
  const namespace = GUEST_NAMESPACE;
  await Promise.all([
    ...pods.map((p) => session.core.deleteNamespacedPod({ name: p.metadata?.name ?? '', namespace, gracePeriodSeconds: 0 }).then(() => undefined, ignoreGone)),
    ...secrets.map((s) => session.core.deleteNamespacedSecret({ name: s.metadata?.name ?? '', namespace }).then(() => undefined, ignoreGone)),
  ]);
}

/** Removes a pool's agent Pods and payload Secrets (from what the caches show: nothing to do is free). */
export async function cleanUpPool(session: GuestSession, pool: string): Promise<void> {
  const mine = (o: k8s.KubernetesObject): boolean => o.metadata?.labels?.[LABELS.nodePool] === pool;
  await deleteAgentObjects(session, session.pods.list(GUEST_NAMESPACE).filter(mine), session.secrets.list(GUEST_NAMESPACE).filter(mine));
}

/** Removes one node's agent Pod and payload Secret (from what the caches show). */
export async function cleanUpNode(session: GuestSession, node: string): Promise<void> {
  const pod = session.pods.get(agentPodName(node), GUEST_NAMESPACE);
  const secret = session.secrets.get(payloadSecretName(node), GUEST_NAMESPACE);
  await deleteAgentObjects(session, pod ? [pod] : [], secret ? [secret] : []);
}
