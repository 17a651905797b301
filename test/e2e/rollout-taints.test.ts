/**
 * The rollout taints end to end on the local environment (`npm start`): the InPlace pool's three nodes move to
 * the next release one at a time under the sample workload's PodDisruptionBudget. The pods the drains evict
 * are placed by the guest's real kube-scheduler; once a node is updated, none lands on a node the rollout has
 * still to drain, which carries `kindling.dev/update-pending` (PreferNoSchedule) until its turn, and
 * `kindling.dev/updating` (NoSchedule) from its hand-out until it is done. After the rollout no node keeps one.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type * as k8s from '#k8s';
import { ANNOTATIONS, NODE_STATES, TAINTS } from '../../api/src/keys.js';
import { eventually, RestartingWatch } from '../bed/src/index.js';
import { useLocalEnvironment, LocalEnvironment, NS, WORKLOAD } from './environment.js';

const MINUTES = 60_000;

/** What the test saw of one inplace node, in its own clock: when it was handed the target and when it was done. */
interface NodeTimeline {
  handedAt?: number;
  doneAt?: number;
  /** Each rollout taint the node carried at some point, as `key:effect`. */
  taints: Set<string>;
}

/** Every inplace Node event: hand-out and done times for `target()`, and the rollout taints seen. */
class NodeRecorder {
  readonly nodes = new Map<string, NodeTimeline>();
  readonly #watch: RestartingWatch<k8s.V1Node>;
  target = '';

  constructor(kc: k8s.KubeConfig) {
    this.#watch = new RestartingWatch(kc, '/api/v1/nodes', { labelSelector: 'kindling.dev/pool=inplace' }, (_, n) =>
      this.#observe(n),
    );
  }

  start(): Promise<void> {
    return this.#watch.start();
  }

  stop(): void {
    this.#watch.stop();
  }

  #observe(node: k8s.V1Node): void {
    const name = node.metadata?.name ?? '';
    const t = this.nodes.get(name) ?? { taints: new Set<string>() };
    this.nodes.set(name, t);
    const ours = (node.spec?.taints ?? []).filter((x) => x.key.startsWith('kindling.dev/'));
    for (const taint of ours) t.taints.add(`${taint.key}:${taint.effect}`);
    if (this.target) stamp(t, node.metadata?.annotations ?? {}, this.target);
  }
}

/** The first time the node shows itself handed `target`, and done at it. */
function stamp(t: NodeTimeline, ann: Record<string, string>, target: string): void {
  const done = ann[ANNOTATIONS.currentConfig] === target && ann[ANNOTATIONS.state] === NODE_STATES.done;
  if (ann[ANNOTATIONS.desiredConfig] === target) t.handedAt ??= Date.now();
  if (done) t.doneAt ??= Date.now();
}

/** The node each new pod of the workload was placed on, and when the test saw it placed. */
class PlacementRecorder {
  readonly placed = new Map<string, { node: string; at: number }>();
  readonly #existing = new Set<string>();
  readonly #watch: RestartingWatch<k8s.V1Pod>;
  recording = false;

  constructor(kc: k8s.KubeConfig) {
    this.#watch = new RestartingWatch(
      kc,
      `/api/v1/namespaces/${WORKLOAD.namespace}/pods`,
      { labelSelector: WORKLOAD.labelSelector },
      (_, pod) => this.#observe(pod),
    );
  }

  start(): Promise<void> {
    return this.#watch.start();
  }

  stop(): void {
    this.#watch.stop();
  }

  #observe(pod: k8s.V1Pod): void {
    const name = pod.metadata?.name ?? '';
    if (!this.recording) {
      this.#existing.add(name);
      return;
    }
    const node = pod.spec?.nodeName;
    if (node && !this.#existing.has(name) && !this.placed.has(name)) this.placed.set(name, { node, at: Date.now() });
  }
}

describe('rollout taints on the local environment', { timeout: 25 * MINUTES }, () => {
  let env: LocalEnvironment;
  useLocalEnvironment('taints', (e) => (env = e));

  it('when the InPlace pool rolls its three nodes under the workload budget, it should place every pod evicted after the first node is updated on an updated node, never on a node still to be updated, and leave no rollout taint behind', async () => {
    await eventually('shop/web whole on the inplace nodes', () => env.workloadWhole(), 3 * MINUTES, 1000);
    const nodes = new NodeRecorder(env.guest);
    const pods = new PlacementRecorder(env.guest);
    await Promise.all([nodes.start(), pods.start()]);
    try {
      const next = (await env.pool('inplace')).spec.release.image.replace(/:1\.36\.2$/, ':1.36.3');
      assert.match(next, /:1\.36\.3$/);
      pods.recording = true;
      await env.patchPool('inplace', { spec: { release: { image: next } } });
      nodes.target = await eventually('the inplace MachineSet target', () => targetOf(env), 2 * MINUTES, 1000);
      await eventually('the inplace pool Ready at 1.36.3', () => rolledOut(env), 12 * MINUTES, 2000);
      await eventually('shop/web whole again', () => env.workloadWhole(), 2 * MINUTES, 1000);
    } finally {
      nodes.stop();
      pods.stop();
    }

    const timelines = [...nodes.nodes.entries()];
    assert.equal(timelines.length, 3, 'three inplace nodes');
    const firstDone = Math.min(...timelines.map(([, t]) => t.doneAt ?? Infinity));
    assert.ok(Number.isFinite(firstDone), 'a node was updated');
    const evicted = [...pods.placed.entries()];
    assert.ok(evicted.length >= 1, 'the drains evicted pods of shop/web');
    for (const [pod, { node, at }] of evicted) {
      if (at < firstDone) continue; // Evicted from the first node: no node was updated yet.
      const handedAt = nodes.nodes.get(node)?.handedAt ?? Infinity;
      assert.ok(handedAt < at, `${pod} was placed on ${node}, which the rollout had still to update`);
    }
    for (const [name, t] of timelines) {
      assert.ok(t.taints.has(`${TAINTS.updating}:NoSchedule`), `${name} was never tainted NoSchedule while updating`);
    }
    assert.ok(
      timelines.filter(([, t]) => t.taints.has(`${TAINTS.updatePending}:PreferNoSchedule`)).length >= 2,
      'the nodes waiting for their turn were not tainted PreferNoSchedule',
    );
    await eventually(
      'no rollout taint left on any inplace node',
      async () =>
        (await env.nodes('inplace')).every(
          (n) => !(n.spec?.taints ?? []).some((t) => t.key === TAINTS.updating || t.key === TAINTS.updatePending),
        ),
      MINUTES,
      1000,
    );
  });
});

async function targetOf(env: LocalEnvironment): Promise<string | undefined> {
  const set = (await env.custom.getNamespacedCustomObject({
    group: 'cluster.x-k8s.io',
    version: 'v1beta2',
    namespace: NS,
    plural: 'machinesets',
    name: 'inplace',
  })) as { metadata: { annotations?: Record<string, string> } };
  const ann = set.metadata.annotations ?? {};
  const target = ann[ANNOTATIONS.targetConfigHash];
  return target && target !== ann[ANNOTATIONS.currentConfigHash] ? target : undefined;
}

async function rolledOut(env: LocalEnvironment): Promise<boolean> {
  const conditions = (await env.pool('inplace')).status?.conditions ?? [];
  const updating = conditions.find((c) => c.type === 'UpdatingVersion');
  return (
    conditions.some((c) => c.type === 'Ready' && c.status === 'True') &&
    updating?.status === 'False' &&
    updating.reason === 'AsExpected'
  );
}
