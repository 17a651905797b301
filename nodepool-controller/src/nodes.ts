/**
 * The pool's nodeLabels, nodeAnnotations and taints on its guest Nodes (the Nodes its Machines' status.nodeRef names), by
 * server-side apply under the controller's field manager: labels it dropped are removed, labels others wrote
 * stay. Node spec.taints is an atomic list, so the applied list is the Node's other taints plus the pool's, the
 * pool's own are remembered in ANNOTATIONS.poolTaints (to remove them later), and the apply carries the Node's
 * resourceVersion so a taint another controller adds meanwhile makes a conflict, not a loss.
 */
import * as k8s from '#k8s';
import { ANNOTATIONS, FIELD_MANAGERS } from '../../api/src/keys.js';
import type { NodePool } from '../../api/src/nodepool.js';
import { createApplier } from '../../support/src/apply.js';
import { isConflict, isNotFound } from '../../support/src/errors.js';
import { forEachLimited } from '../../support/src/limited.js';
import { isUpToDate } from './diff.js';
import type { GuestKubeConfigs } from '../../support/src/guest-kubeconfigs.js';

type Taint = Pick<k8s.V1Taint, 'key' | 'value' | 'effect'>;

export interface NodeApply {
  apiVersion: 'v1';
  kind: 'Node';
  metadata: {
    name: string;
    resourceVersion?: string;
    labels: Record<string, string>;
    annotations: Record<string, string>;
  };
  spec: { taints: Taint[] };
}

const taintId = (t: Taint): string => `${t.key}:${t.effect}`;
const sameTaint = (a: Taint, b: Taint): boolean => taintId(a) === taintId(b) && (a.value ?? '') === (b.value ?? '');

function poolTaints(pool: NodePool): Taint[] {
  return (pool.spec.taints ?? []).map((t) => ({
    key: t.key,
    ...(t.value === undefined ? {} : { value: t.value }),
    effect: t.effect,
  }));
}

function previouslyOurs(node: k8s.V1Node): Set<string> {
  try {
    const ids: unknown = JSON.parse(node.metadata?.annotations?.[ANNOTATIONS.poolTaints] ?? '[]');
    return new Set(Array.isArray(ids) ? ids.map(String) : []);
  } catch {
    return new Set();
  }
}

const plain = (t: Taint): Taint => ({
  key: t.key,
  ...(t.value === undefined ? {} : { value: t.value }),
  effect: t.effect,
});

function sameTaints(a: readonly Taint[], b: readonly Taint[]): boolean {
  return a.length === b.length && a.every((t) => b.some((l) => sameTaint(l, t)));
}

/** The Node's taints as the pool wants them: everyone else's, then the pool's. */
function wantedTaints(pool: NodePool, live: k8s.V1Node): { taints: Taint[]; ids: string[]; hadOurs: boolean } {
  const ours = poolTaints(pool);
  const wanted = new Set(ours.map(taintId));
  const before = previouslyOurs(live);
  const others = (live.spec?.taints ?? []).filter((t) => !before.has(taintId(t)) && !wanted.has(taintId(t))).map(plain);
  return { taints: [...others, ...ours], ids: [...wanted].sort(), hadOurs: before.size > 0 };
}

function appliedBefore(live: k8s.V1Node): boolean {
  return (live.metadata?.managedFields ?? []).some(
    (m) => m.manager === FIELD_MANAGERS.nodepoolController && m.operation === 'Apply',
  );
}

function inPlace(live: k8s.V1Node, desired: NodeApply, hadOurs: boolean): boolean {
  if (!sameTaints(desired.spec.taints, live.spec?.taints ?? [])) return false;
  if (appliedBefore(live)) return isUpToDate(live, desired, FIELD_MANAGERS.nodepoolController);
  // A Node the pool never touched and has nothing to put on needs no write (and takes no field ownership).
  return (
    Object.keys(desired.metadata.labels).length === 0 &&
    Object.keys(desired.metadata.annotations).length === 0 &&
    !hadOurs
  );
}

/** What the pool applies onto one live Node, or undefined when the Node already is as the pool wants it. */
export function desiredNode(pool: NodePool, live: k8s.V1Node): NodeApply | undefined {
  const { taints, ids, hadOurs } = wantedTaints(pool, live);
  const desired: NodeApply = {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: {
      name: live.metadata?.name ?? '',
      labels: { ...(pool.spec.nodeLabels ?? {}) },
      annotations: {
        ...(pool.spec.nodeAnnotations ?? {}),
        ...(ids.length > 0 ? { [ANNOTATIONS.poolTaints]: JSON.stringify(ids) } : {}),
      },
    },
    spec: { taints },
  };
  if (inPlace(live, desired, hadOurs)) return undefined;
  return { ...desired, metadata: { ...desired.metadata, resourceVersion: live.metadata?.resourceVersion } };
}

/**
 * A pool's Node reads and writes in flight at once. All of a pool's Nodes at once opened a connection each to its
 * guest apiserver, each with its own TLS context and buffers, whose native memory outlives the burst until V8
 * collects the sockets; a few at a time ride the same kept-alive connections (8 guests of 2 pools of 25 Nodes: 68
 * MiB kept after the burst with all at once, 44 MiB with 4).
 */
const NODE_REQUESTS_IN_FLIGHT = 4;

export interface GuestNodes {
  /** Applies the pool's labels and taints onto the named guest Nodes; returns how many it wrote. */
  propagate(pool: NodePool, nodeNames: readonly string[]): Promise<number>;
  /** Node writes so far. */
  readonly count: number;
}

export function createGuestNodes(kubeConfigs: GuestKubeConfigs): GuestNodes {
  let count = 0;
  const clients = new WeakMap<k8s.KubeConfig, { core: k8s.CoreV1Api; applier: ReturnType<typeof createApplier> }>();
  const clientsOf = (kc: k8s.KubeConfig): { core: k8s.CoreV1Api; applier: ReturnType<typeof createApplier> } => {
    let c = clients.get(kc);
    if (!c) {
      c = { core: kc.makeApiClient(k8s.CoreV1Api), applier: createApplier(kc, FIELD_MANAGERS.nodepoolController) };
      clients.set(kc, c);
    }
    return c;
  };
  const one = async (pool: NodePool, name: string, c: ReturnType<typeof clientsOf>): Promise<number> => {
    let live: k8s.V1Node;
    try {
      live = await c.core.readNode({ name });
    } catch (err) {
      if (isNotFound(err)) return 0; // a stale nodeRef: the Machine's Node is gone
      throw err;
    }
    const desired = desiredNode(pool, live);
    if (!desired) return 0;
    count++;
    await c.applier.apply(desired);
    return 1;
  };
  return {
    get count() {
      return count;
    },
    async propagate(pool, nodeNames) {
      if (nodeNames.length === 0) return 0;
      const ns = pool.metadata.namespace ?? '';
      let kc: k8s.KubeConfig;
      try {
        kc = await kubeConfigs.get(ns, pool.spec.clusterName);
      } catch (err) {
        throw new Error(`failed to reach guest cluster ${pool.spec.clusterName}`, { cause: err });
      }
      const c = clientsOf(kc);
      try {
        let written = 0;
        await forEachLimited(nodeNames, NODE_REQUESTS_IN_FLIGHT, async (n) => (written += await one(pool, n, c)));
        return written;
      } catch (err) {
        if (!isConflict(err)) kubeConfigs.forget(ns, pool.spec.clusterName);
        throw new Error(
          `failed to propagate labels and taints to the Nodes of guest cluster ${pool.spec.clusterName}`,
          { cause: err },
        );
      }
    },
  };
}
