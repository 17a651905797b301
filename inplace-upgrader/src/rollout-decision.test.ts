import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type * as k8s from '#k8s';
import { ANNOTATIONS, LABELS } from '../../api/src/keys.js';
import { classifyNode, pickNodes, planRollout, type NodeView } from './rollout-decision.js';

const T = 'target';
const view = (name: string, phase: NodeView['phase'], extra: Partial<NodeView> = {}): NodeView => ({
  name,
  zone: '',
  phase,
  unavailable: false,
  ...extra,
});
const node = (
  annotations: Record<string, string>,
  opts: { ready?: boolean; unschedulable?: boolean; zone?: string } = {},
): k8s.V1Node => ({
  metadata: { name: 'n', annotations, labels: opts.zone ? { [LABELS.zone]: opts.zone } : {} },
  spec: { unschedulable: opts.unschedulable },
  status: { conditions: [{ type: 'Ready', status: opts.ready === false ? 'False' : 'True' }] },
});

describe('classifyNode', () => {
  const cases: { name: string; ann: Record<string, string>; phase: NodeView['phase']; reason?: RegExp }[] = [
    {
      name: 'a node at the target',
      ann: { [ANNOTATIONS.currentConfig]: T, [ANNOTATIONS.state]: 'Done' },
      phase: 'done',
    },
    { name: 'a node that booted at the target (no state yet)', ann: { [ANNOTATIONS.currentConfig]: T }, phase: 'done' },
    {
      name: 'a node on an old config',
      ann: { [ANNOTATIONS.currentConfig]: 'old', [ANNOTATIONS.state]: 'Done' },
      phase: 'idle',
    },
    { name: 'a node with no annotation', ann: {}, phase: 'idle' },
    {
      name: 'a node handed the target',
      ann: { [ANNOTATIONS.currentConfig]: 'old', [ANNOTATIONS.desiredConfig]: T },
      phase: 'updating',
    },
    {
      name: 'a node at the target still uncordoning',
      ann: {
        [ANNOTATIONS.currentConfig]: T,
        [ANNOTATIONS.desiredDrain]: `uncordon-${T}`,
        [ANNOTATIONS.lastAppliedDrain]: `drain-${T}`,
      },
      phase: 'updating',
    },
    {
      name: 'a node the agent is working on',
      ann: { [ANNOTATIONS.currentConfig]: T, [ANNOTATIONS.desiredConfig]: T, [ANNOTATIONS.state]: 'Working' },
      phase: 'updating',
    },
    {
      name: 'a degraded node on the target',
      ann: { [ANNOTATIONS.desiredConfig]: T, [ANNOTATIONS.state]: 'Degraded', [ANNOTATIONS.reason]: 'disk full' },
      phase: 'degraded',
      reason: /^disk full$/,
    },
    {
      name: 'a degraded node on an older target',
      ann: { [ANNOTATIONS.desiredConfig]: 'old', [ANNOTATIONS.state]: 'Degraded' },
      phase: 'updating',
    },
    {
      name: 'a node whose drain was given up',
      ann: {
        [ANNOTATIONS.desiredConfig]: T,
        [ANNOTATIONS.desiredDrain]: `drain-${T}`,
        [ANNOTATIONS.drainFailure]: `drain-${T}: nodeDrainTimeout 2s reached`,
      },
      phase: 'degraded',
      reason: /^drain failed: nodeDrainTimeout 2s reached$/,
    },
  ];
  for (const c of cases) {
    it(`when it sees ${c.name}, it should say ${c.phase}`, () => {
      const v = classifyNode(node(c.ann), T);
      assert.equal(v.phase, c.phase);
      if (c.reason) assert.match(v.reason ?? '', c.reason);
    });
  }

  it("when the agent marks a Degraded node as held by the rollout's ceiling at its desired config, it should say it waits for the window; a marker of another hash should not", () => {
    const reason = 'the update needs a reboot; waiting for the maintenance window (opens 2026-12-01T02:00Z)';
    const held = { [ANNOTATIONS.desiredConfig]: T, [ANNOTATIONS.state]: 'Degraded', [ANNOTATIONS.reason]: reason };
    const waiting = classifyNode(node({ ...held, [ANNOTATIONS.ceilingHeld]: T }), T);
    assert.deepEqual([waiting.phase, waiting.reason, waiting.waiting], ['degraded', reason, true]);
    const stale = classifyNode(node({ ...held, [ANNOTATIONS.ceilingHeld]: 'old' }), T);
    assert.deepEqual([stale.phase, stale.waiting], ['degraded', undefined]);
    assert.equal(classifyNode(node(held), T).waiting, undefined);
  });

  it("when a budget holds up the node's pending drain, it should say which one; once the drain is applied, it should ignore a stale block", () => {
    const blocked = {
      [ANNOTATIONS.drainBlocked]: 'shop/web-1 blocked by PodDisruptionBudget shop/web since 2026-08-01T10:00:00.000Z',
    };
    const draining = {
      [ANNOTATIONS.desiredConfig]: T,
      [ANNOTATIONS.state]: 'Working',
      [ANNOTATIONS.desiredDrain]: `drain-${T}`,
      ...blocked,
    };
    assert.deepEqual(classifyNode(node(draining), T), {
      name: 'n',
      zone: '',
      phase: 'updating',
      blockedBy: 'PodDisruptionBudget shop/web',
      unavailable: false,
      desiredConfig: T,
    });
    assert.equal(
      classifyNode(node({ ...draining, [ANNOTATIONS.lastAppliedDrain]: `drain-${T}` }), T).blockedBy,
      undefined,
    );
    assert.equal(
      classifyNode(node({ ...draining, [ANNOTATIONS.drainBlocked]: 'hand-edited' }), T).blockedBy,
      undefined,
    );
  });

  it('when the cache has not caught up with a desiredConfig this upgrader wrote, it should count the node as updating', () => {
    assert.equal(classifyNode(node({ [ANNOTATIONS.currentConfig]: 'old' }), T, T).phase, 'updating');
  });

  it('when a node is not Ready or is cordoned, it should be unavailable', () => {
    assert.equal(classifyNode(node({}, { ready: false }), T).unavailable, true);
    assert.equal(classifyNode(node({}, { unschedulable: true }), T).unavailable, true);
    assert.equal(classifyNode(node({}, { zone: 'z1' }), T).unavailable, false);
    assert.equal(classifyNode(node({}, { zone: 'z1' }), T).zone, 'z1');
  });
});

describe('pickNodes', () => {
  const cases: { name: string; nodes: NodeView[]; capacity: number; want: string[] }[] = [
    { name: 'no capacity', nodes: [view('a', 'idle')], capacity: 0, want: [] },
    {
      name: 'names only',
      nodes: [view('c', 'idle'), view('a', 'idle'), view('b', 'idle')],
      capacity: 2,
      want: ['a', 'b'],
    },
    {
      name: 'done and updating nodes',
      nodes: [view('a', 'done'), view('b', 'updating'), view('c', 'idle')],
      capacity: 3,
      want: ['c'],
    },
    {
      name: 'an unavailable node',
      nodes: [view('a', 'idle'), view('z', 'idle', { unavailable: true })],
      capacity: 1,
      want: ['z'],
    },
    {
      name: 'three zones',
      nodes: [
        view('a1', 'idle', { zone: 'a' }),
        view('a2', 'idle', { zone: 'a' }),
        view('a3', 'idle', { zone: 'a' }),
        view('b1', 'idle', { zone: 'b' }),
        view('c1', 'idle', { zone: 'c' }),
      ],
      capacity: 4,
      want: ['a1', 'b1', 'c1', 'a2'],
    },
    {
      name: 'a zone already busy',
      nodes: [
        view('a0', 'updating', { zone: 'a' }),
        view('a1', 'idle', { zone: 'a' }),
        view('b1', 'idle', { zone: 'b' }),
        view('b2', 'idle', { zone: 'b' }),
      ],
      capacity: 2,
      want: ['b1', 'a1'],
    },
    {
      name: 'an unavailable node and zones',
      nodes: [
        view('a1', 'idle', { zone: 'a' }),
        view('a2', 'idle', { zone: 'a', unavailable: true }),
        view('b1', 'idle', { zone: 'b' }),
      ],
      capacity: 2,
      want: ['a2', 'b1'],
    },
  ];
  for (const c of cases) {
    it(`when picking with ${c.name}, it should pick ${JSON.stringify(c.want)}`, () => {
      assert.deepEqual(pickNodes(c.nodes, c.capacity), c.want);
    });
  }
});

describe('planRollout', () => {
  it('when 10 idle nodes and maxUnavailable 3, it should start 3 and report progress', () => {
    const nodes = Array.from({ length: 10 }, (_, i) => view(`n${i}`, 'idle'));
    const plan = planRollout(nodes, T, 3);
    assert.deepEqual(plan.start, ['n0', 'n1', 'n2']);
    assert.equal(plan.progress, '0 of 10 updated');
    assert.equal(plan.complete, false);
  });

  it('when nodes are updating or unavailable, it should start only what is left of maxUnavailable', () => {
    const nodes = [
      view('a', 'updating', { desiredConfig: T }),
      view('b', 'done', { unavailable: true }),
      view('c', 'idle'),
      view('d', 'idle'),
    ];
    assert.deepEqual(planRollout(nodes, T, 3).start, ['c']);
  });

  it('when a node is in flight towards an older target, it should retarget it', () => {
    const nodes = [view('a', 'updating', { desiredConfig: 'old' }), view('b', 'updating', { desiredConfig: T })];
    assert.deepEqual(planRollout(nodes, T, 2).retarget, ['a']);
  });

  it('when a node is degraded, it should halt with its name and reason and start nothing', () => {
    const nodes = [view('a', 'idle'), view('b', 'degraded', { reason: 'boom', desiredConfig: T })];
    const plan = planRollout(nodes, T, 5);
    assert.deepEqual(plan.halted, { node: 'b', reason: 'boom' });
    assert.deepEqual(plan.start, []);
  });

  it('when the first degraded node only waits for the window, it should halt saying it waits, and start nothing', () => {
    const nodes = [view('a', 'idle'), view('b', 'degraded', { reason: 'held', desiredConfig: T, waiting: true })];
    const plan = planRollout(nodes, T, 5);
    assert.deepEqual(plan.halted, { node: 'b', reason: 'held', waiting: true });
    assert.deepEqual(plan.start, []);
  });

  it('when one node waits for the window and another failed, it should halt on the failure, whatever their names', () => {
    const waits = view('a', 'degraded', { reason: 'held', desiredConfig: T, waiting: true });
    const plan = planRollout([waits, view('b', 'degraded', { reason: 'boom', desiredConfig: T })], T, 5);
    assert.deepEqual(plan.halted, { node: 'b', reason: 'boom' });
  });

  it('when budgets hold up drains, the progress should name each node and budget after the "N of M updated" it starts with', () => {
    const blocked = (name: string, pdb: string): NodeView =>
      view(name, 'updating', { desiredConfig: T, blockedBy: `PodDisruptionBudget ${pdb}` });
    const plan = planRollout(
      [
        view('n01', 'done'),
        view('n02', 'done'),
        blocked('n04', 'shop/db'),
        blocked('n03', 'shop/x'),
        view('n05', 'updating'),
        view('n06', 'idle'),
      ],
      T,
      3,
    );
    assert.equal(
      plan.progress,
      '2 of 6 updated; n03 draining, blocked by PodDisruptionBudget shop/x; n04 draining, blocked by PodDisruptionBudget shop/db',
    );
    assert.match(plan.progress, /^2 of 6 updated/);
  });

  it('when more than 3 drains are held up, the progress should name 3 and count the rest', () => {
    const nodes = ['a', 'b', 'c', 'd', 'e'].map((n) =>
      view(n, 'updating', { desiredConfig: T, blockedBy: 'PodDisruptionBudget shop/x' }),
    );
    assert.equal(
      planRollout(nodes, T, 5).progress,
      `0 of 5 updated${['a', 'b', 'c'].map((n) => `; ${n} draining, blocked by PodDisruptionBudget shop/x`).join('')}; 2 more draining nodes blocked`,
    );
  });

  it('when every node is done, it should be complete', () => {
    const plan = planRollout([view('a', 'done'), view('b', 'done')], T, 1);
    assert.equal(plan.complete, true);
    assert.equal(plan.progress, '2 of 2 updated');
  });

  it('when every node is done but a Machine has no Node yet, it should not be complete, and the Machine should take no capacity', () => {
    const plan = planRollout([view('a', 'done'), view('b', 'idle')], T, 1, { pending: 1 });
    assert.equal(plan.complete, false);
    assert.equal(plan.progress, '1 of 3 updated');
    assert.deepEqual(plan.start, ['b']);
    assert.equal(planRollout([view('a', 'done')], T, 1, { pending: 1 }).complete, false);
  });

  it('when the pool is paused mid-rollout, it should start and retarget nothing, let the nodes in flight finish, and say where it stopped', () => {
    const nodes = [
      view('a', 'done'),
      view('b', 'done'),
      view('c', 'done'),
      view('d', 'updating', { desiredConfig: T }),
      view('e', 'updating', { desiredConfig: 'old' }),
      view('f', 'idle'),
    ];
    const plan = planRollout(nodes, T, 3, { paused: true });
    assert.deepEqual(plan.start, []);
    assert.deepEqual(plan.retarget, []);
    assert.equal(plan.complete, false);
    assert.equal(
      plan.progress,
      '3 of 6 updated; paused at 3 of 6 by spec.pausedUntil: no node is handed out until it clears, 2 node(s) handed out before the pause still finishing',
    );
    // Unpaused, the same nodes: the rollout goes on where it stopped.
    const resumed = planRollout(nodes, T, 3);
    assert.deepEqual(resumed.start, ['f']);
    assert.deepEqual(resumed.retarget, ['e']);
    assert.equal(resumed.progress, '3 of 6 updated');
  });

  it('when the pool is paused and nothing is in flight, it should say only where it stopped', () => {
    const plan = planRollout([view('a', 'done'), view('b', 'idle')], T, 1, { paused: true });
    assert.equal(
      plan.progress,
      '1 of 2 updated; paused at 1 of 2 by spec.pausedUntil: no node is handed out until it clears',
    );
    assert.deepEqual(plan.start, []);
  });

  it('when the maintenance window closes mid-rollout, it should hand out no node, let the node under way finish, and say why', () => {
    const nodes = [view('a', 'done'), view('b', 'updating', { desiredConfig: T }), view('c', 'idle')];
    const why = 'waiting for the maintenance window (opens 2026-12-01T02:00Z)';
    const plan = planRollout(nodes, T, 2, { held: why });
    assert.deepEqual([plan.start, plan.retarget, plan.complete], [[], [], false]);
    assert.equal(plan.progress, `1 of 3 updated; held at 1 of 3: ${why}, 1 node(s) handed out before still finishing`);
    // The window open again, the same nodes: the rollout resumes where it stopped.
    assert.deepEqual(planRollout(nodes, T, 2).start, ['c']);
  });
});
