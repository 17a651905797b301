import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type * as k8s from '#k8s';
import { ANNOTATIONS, LABELS, TAINTS } from '../../api/src/keys.js';
import type { Applier } from '../../support/src/apply.js';
import { NotReadyError } from '../../support/src/errors.js';
import type { GuestCluster } from '../../support/src/guest-clusters.js';
import type { ResilientInformer } from '../../support/src/informer.js';
import type { ObjectKey } from '../../support/src/object-key.js';
import { agentPodName, GUEST_NAMESPACE, PAYLOAD_KEYS, payloadSecretName } from '../../api/src/node-agent.js';
import {
  agentObjectsMissing,
  cleanUpPool,
  ensureAgentObjects,
  handOutNode,
  payloadCeilingStale,
  setRolloutTaint,
  settleAll,
  type GuestSession,
  type HandOut,
} from './guest.js';

const NODE = 'n1';
const POOL = 'pool';
const HASH = 'h2';
const HAND_OUT: HandOut = {
  node: NODE,
  pool: POOL,
  hash: HASH,
  config: Buffer.from('{}'),
  agentImage: 'kindling:test',
  disruptionPolicy: undefined,
  booted: undefined,
  ceiling: undefined,
};
const CEILING = 'waiting for the maintenance window (opens 2026-12-01T02:00Z)';

const pod = (uid: string, extra: Partial<k8s.V1ObjectMeta> = {}): k8s.V1Pod => ({
  metadata: {
    name: agentPodName(NODE),
    namespace: GUEST_NAMESPACE,
    uid,
    labels: { [LABELS.agentPod]: 'true', [LABELS.nodePool]: POOL },
    ...extra,
  },
});
const secret = (uid: string, hash: string, ceiling?: string): k8s.V1Secret => ({
  metadata: {
    name: payloadSecretName(NODE),
    namespace: GUEST_NAMESPACE,
    uid,
    labels: { [LABELS.payloadSecret]: 'true', [LABELS.nodePool]: POOL, [LABELS.configHash]: hash },
  },
  ...(ceiling === undefined
    ? {}
    : { data: { [PAYLOAD_KEYS.rolloutCeiling]: Buffer.from(ceiling).toString('base64') } }),
});
const terminating = { deletionTimestamp: new Date('2026-01-01T00:00:00Z') };

/** A cache that shows what the test puts in it, however stale that is. */
function cache<T extends k8s.KubernetesObject>(objects: readonly T[]): ResilientInformer<T> {
  const byName = new Map(objects.map((o) => [o.metadata?.name ?? '', o]));
  return {
    get: ({ name }: ObjectKey) => byName.get(name),
    list: () => [...byName.values()],
  } as unknown as ResilientInformer<T>;
}

interface Fake {
  session: GuestSession;
  /** Every write, in the order it was made: "<verb> <Kind> <name>[ <detail>]". */
  writes: string[];
}

/**
 * A session over fake caches and a fake apiserver that records each write. `answer`: what the apiserver returns
 * for an applied object (by default the object as sent); `deleteStatus`: the HTTP status deletes fail with.
 */
interface FakeOptions {
  pods?: k8s.V1Pod[];
  secrets?: k8s.V1Secret[];
  answer?: (o: k8s.KubernetesObject) => k8s.KubernetesObject;
  deleteStatus?: number;
  baseReady?: boolean;
  /** Called as each delete starts; the delete ends when the promise it returns does. */
  onDelete?: () => Promise<void>;
}

function fake(opts: FakeOptions = {}): Fake {
  const writes: string[] = [];
  const applier: Applier = {
    fieldManager: 'test',
    apply: <T extends k8s.KubernetesObject>(o: T): Promise<T> => {
      writes.push(`apply ${o.kind} ${o.metadata?.name}`);
      return Promise.resolve((opts.answer?.(o) ?? o) as T);
    },
    applyStatus: () => Promise.reject(new Error('not used')),
    mergePatch: () => Promise.reject(new Error('not used')),
  };
  const remove =
    (kind: string) =>
    (req: { name: string; body?: k8s.V1DeleteOptions }): Promise<unknown> => {
      writes.push(`delete ${kind} ${req.name} uid=${req.body?.preconditions?.uid}`);
      if (opts.deleteStatus) return Promise.reject(Object.assign(new Error('HTTP'), { code: opts.deleteStatus }));
      return opts.onDelete ? opts.onDelete() : Promise.resolve({});
    };
  const core = {
    patchNode: (req: {
      name: string;
      body: { metadata: { annotations: Record<string, string | null> } };
    }): Promise<unknown> => {
      writes.push(`patch Node ${req.name} desiredConfig=${req.body.metadata.annotations[ANNOTATIONS.desiredConfig]}`);
      return Promise.resolve({});
    },
    deleteNamespacedPod: remove('Pod'),
    deleteNamespacedSecret: remove('Secret'),
  } as unknown as k8s.CoreV1Api;
  const session: GuestSession = {
    cluster: {} as GuestCluster,
    core,
    applier,
    nodes: cache<k8s.V1Node>([]),
    pods: cache(opts.pods ?? []),
    secrets: cache(opts.secrets ?? []),
    baseReady: opts.baseReady ?? true,
    expected: new Map(),
    deleted: { pods: new Map(), secrets: new Map() },
  };
  return { session, writes };
}

const POINTED = `patch Node ${NODE} desiredConfig=${HASH}`;
const POD_APPLIED = `apply Pod ${agentPodName(NODE)}`;
const SECRET_APPLIED = `apply Secret ${payloadSecretName(NODE)}`;

describe('handOutNode', () => {
  it('when the cache shows neither agent Pod nor payload Secret, it should apply both before pointing the node at the target', async () => {
    const { session, writes } = fake();
    await handOutNode(session, HAND_OUT);
    assert.deepEqual(writes.slice(0, 2).sort(), [POD_APPLIED, SECRET_APPLIED]);
    assert.deepEqual(writes.slice(2), [POINTED]);
    assert.equal(session.expected.get(NODE), HASH);
  });

  it('when the cache shows the agent Pod running and the payload Secret at the target, it should only point the node at the target', async () => {
    const { session, writes } = fake({ pods: [pod('p1')], secrets: [secret('s1', HASH)] });
    await handOutNode(session, HAND_OUT);
    assert.deepEqual(writes, [POINTED]);
  });

  it('when the payload Secret in the cache holds another hash, it should apply it at the target and keep the running agent Pod', async () => {
    const { session, writes } = fake({ pods: [pod('p1')], secrets: [secret('s1', 'h1')] });
    await handOutNode(session, HAND_OUT);
    assert.deepEqual(writes, [SECRET_APPLIED, POINTED]);
  });

  it('when the payload Secret at the target holds a ceiling the pool no longer has, it should rewrite it at the same hash and keep the agent Pod', async () => {
    const { session, writes } = fake({ pods: [pod('p1')], secrets: [secret('s1', HASH, CEILING)] });
    assert.equal(agentObjectsMissing(session, HAND_OUT), true);
    assert.equal(payloadCeilingStale(session, HAND_OUT), true);
    await ensureAgentObjects(session, HAND_OUT);
    assert.deepEqual(writes, [SECRET_APPLIED]);
  });

  it('when the payload Secret at the target holds the ceiling the pool has, it should count it current and write nothing', async () => {
    const want = { ...HAND_OUT, ceiling: CEILING };
    const { session, writes } = fake({ pods: [pod('p1')], secrets: [secret('s1', HASH, CEILING)] });
    assert.deepEqual([agentObjectsMissing(session, want), payloadCeilingStale(session, want)], [false, false]);
    await ensureAgentObjects(session, want);
    assert.deepEqual(writes, []);
    assert.equal(
      payloadCeilingStale(session, { ...want, hash: 'h3' }),
      false,
      'a Secret at another hash is not stale, only old',
    );
  });

  it('when the agent Pod in the cache is terminating, it should apply a new one rather than take it for the agent', async () => {
    // The apiserver answers with a new Pod: the terminating one was gone by the time the apply arrived.
    const { session, writes } = fake({
      pods: [pod('p1', terminating)],
      secrets: [secret('s1', HASH)],
      answer: (o) => ({ ...o, metadata: { ...o.metadata, uid: 'p2' } }),
    });
    await handOutNode(session, HAND_OUT);
    assert.deepEqual(writes, [POD_APPLIED, POINTED]);
  });

  it('when the apiserver still holds the agent Pod terminating, it should not point the node at the target and say why, not ready', async () => {
    const { session, writes } = fake({
      pods: [pod('p1', terminating)],
      secrets: [secret('s1', HASH)],
      answer: (o) => ({ ...o, metadata: { ...o.metadata, uid: 'p1', ...terminating } }),
    });
    await assert.rejects(
      handOutNode(session, HAND_OUT),
      (err: unknown) => err instanceof NotReadyError && /agent Pod of node n1 is still terminating/.test(err.message),
    );
    assert.deepEqual(writes, [POD_APPLIED]);
    assert.equal(session.expected.has(NODE), false);
  });

  it('when the agent Pod and payload Secret in the cache are ones an earlier clean-up deleted, it should create both again', async () => {
    // The caches have not shown the deletions yet (the next rollout started right after the last one ended).
    const { session, writes } = fake({ pods: [pod('p1')], secrets: [secret('s1', HASH)] });
    await cleanUpPool(session, POOL);
    writes.length = 0;
    assert.equal(agentObjectsMissing(session, HAND_OUT), true);
    await handOutNode(session, HAND_OUT);
    assert.deepEqual(writes.slice(0, 2).sort(), [POD_APPLIED, SECRET_APPLIED]);
    assert.deepEqual(writes.slice(2), [POINTED]);
  });

  it('when a step the caller runs before it fails, it should not point the node at the target', async () => {
    const { session, writes } = fake();
    await assert.rejects(
      handOutNode(session, HAND_OUT, () => Promise.reject(new Error('Machine not spared'))),
      /Machine not spared/,
    );
    assert.equal(writes.includes(POINTED), false);
  });

  it('when the guest namespace and the agent RBAC are not there yet, it should apply the namespace and the node policy before any RBAC', async () => {
    const { session, writes } = fake({ baseReady: false });
    await handOutNode(session, HAND_OUT);
    const first = writes.findIndex((w) =>
      /^apply (ServiceAccount|ClusterRole|ClusterRoleBinding|Role|RoleBinding) /.test(w),
    );
    const before = writes.slice(0, first);
    for (const kind of ['Namespace', 'ValidatingAdmissionPolicy', 'ValidatingAdmissionPolicyBinding'])
      assert.ok(
        before.some((w) => w.startsWith(`apply ${kind} `)),
        `${kind} before the RBAC: ${writes.join(', ')}`,
      );
    assert.equal(writes.at(-1), POINTED);
  });
});

describe('cleanUpPool', () => {
  it("when the caches show the pool's agent Pod and payload Secret, it should delete each by its uid", async () => {
    const { session, writes } = fake({ pods: [pod('p1')], secrets: [secret('s1', HASH)] });
    await cleanUpPool(session, POOL);
    assert.deepEqual(writes.sort(), [
      `delete Pod ${agentPodName(NODE)} uid=p1`,
      `delete Secret ${payloadSecretName(NODE)} uid=s1`,
    ]);
  });

  it('when the caches still show what an earlier clean-up deleted, it should delete nothing again', async () => {
    const { session, writes } = fake({ pods: [pod('p1')], secrets: [secret('s1', HASH)] });
    await cleanUpPool(session, POOL);
    writes.length = 0;
    await cleanUpPool(session, POOL);
    assert.deepEqual(writes, []);
  });

  it('when the agent Pod in the cache is already terminating, it should leave it to go', async () => {
    const { session, writes } = fake({ pods: [pod('p1', terminating)] });
    await cleanUpPool(session, POOL);
    assert.deepEqual(writes, []);
  });

  for (const [status, meaning] of [
    [404, 'already gone'],
    [409, 'replaced by a newer one of the same name'],
  ] as const) {
    it(`when an object is ${meaning} (${status}), it should not fail`, async () => {
      const { session } = fake({ pods: [pod('p1')], deleteStatus: status });
      await cleanUpPool(session, POOL);
      assert.equal(agentObjectsMissing(session, HAND_OUT), true);
    });
  }

  it('when the pool has many nodes, it should delete every object, never more than 8 at once', async () => {
    const nodes = Array.from({ length: 30 }, (_, i) => `n${i}`);
    const labels = { [LABELS.nodePool]: POOL };
    const pods = nodes.map((n): k8s.V1Pod => ({ metadata: { name: agentPodName(n), uid: `p-${n}`, labels } }));
    const secrets = nodes.map((n): k8s.V1Secret => ({
      metadata: { name: payloadSecretName(n), uid: `s-${n}`, labels },
    }));
    let inFlight = 0;
    let most = 0;
    const onDelete = async (): Promise<void> => {
      most = Math.max(most, ++inFlight);
      await new Promise((r) => setTimeout(r, 1));
      inFlight--;
    };
    const { session, writes } = fake({ pods, secrets, onDelete });
    await cleanUpPool(session, POOL);
    assert.equal(writes.length, 60);
    assert.equal(most, 8);
  });

  it('when the apiserver refuses a delete otherwise, it should fail', async () => {
    const { session } = fake({ pods: [pod('p1')], deleteStatus: 403 });
    await assert.rejects(cleanUpPool(session, POOL), /HTTP/);
  });
});

describe('settleAll', () => {
  it('when one write fails, it should wait for the others before failing with it', async () => {
    let slowDone = false;
    const slow = new Promise<void>((resolve) => setTimeout(() => resolve(void (slowDone = true)), 20));
    await assert.rejects(settleAll([Promise.reject(new Error('first')), slow, undefined]), /first/);
    assert.equal(slowDone, true);
  });
});

describe('setRolloutTaint', () => {
  const POOLS: k8s.V1Taint = { key: 'dedicated', value: 'shop', effect: 'NoSchedule' };
  const UNSCHEDULABLE: k8s.V1Taint = { key: 'node.kubernetes.io/unschedulable', effect: 'NoSchedule' };
  const node = (resourceVersion: string, taints: k8s.V1Taint[]): k8s.V1Node => ({
    metadata: { name: NODE, resourceVersion },
    spec: { taints },
  });

  /** A session whose Node cache shows `cached`; the apiserver holds `live` and refuses a stale resourceVersion. */
  function taintSession(cached: k8s.V1Node, live: k8s.V1Node): { session: GuestSession; patches: object[] } {
    const patches: object[] = [];
    const core = {
      patchNode: (req: { body: { metadata: { resourceVersion?: string } } }): Promise<unknown> => {
        patches.push(req.body);
        if (req.body.metadata.resourceVersion !== live.metadata?.resourceVersion)
          return Promise.reject(Object.assign(new Error('Conflict'), { code: 409 }));
        return Promise.resolve(live);
      },
      readNode: (): Promise<k8s.V1Node> => Promise.resolve(live),
    } as unknown as k8s.CoreV1Api;
    const session = { ...fake().session, core, nodes: cache([cached]) };
    return { session, patches };
  }

  it('when another writer added a taint after the cache was read, it should patch again from the live Node and keep that taint', async () => {
    const pending = { key: TAINTS.updatePending, effect: 'PreferNoSchedule' };
    const { session, patches } = taintSession(node('1', [POOLS, pending]), node('2', [POOLS, pending, UNSCHEDULABLE]));
    await setRolloutTaint(session, NODE, 'updating');
    const updating = { key: TAINTS.updating, effect: 'NoSchedule' };
    assert.deepEqual(patches, [
      { metadata: { resourceVersion: '1' }, spec: { taints: [POOLS, updating] } },
      { metadata: { resourceVersion: '2' }, spec: { taints: [POOLS, UNSCHEDULABLE, updating] } },
    ]);
  });

  it('when the node carries no rollout taint and none is wanted, it should write nothing', async () => {
    const { session, patches } = taintSession(node('1', [POOLS]), node('1', [POOLS]));
    await setRolloutTaint(session, NODE, undefined);
    assert.deepEqual(patches, []);
  });
});
