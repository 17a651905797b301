import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type * as k8s from '#k8s';
import { TAINTS } from '../../api/src/keys.js';
import type { NodeView } from './rollout-decision.js';
import { rolloutTaints, withRolloutTaint } from './taints.js';

const view = (name: string, phase: NodeView['phase']): Pick<NodeView, 'name' | 'phase'> => ({ name, phase });
const PENDING: k8s.V1Taint = { key: TAINTS.updatePending, effect: 'PreferNoSchedule' };
const UPDATING: k8s.V1Taint = { key: TAINTS.updating, effect: 'NoSchedule' };
const UNSCHEDULABLE: k8s.V1Taint = { key: 'node.kubernetes.io/unschedulable', effect: 'NoSchedule' };
const POOLS: k8s.V1Taint = { key: 'dedicated', value: 'shop', effect: 'NoSchedule' };

describe('rolloutTaints', () => {
  // A 3-node rollout, maxUnavailable 1, after its first node is done: n2 is being updated, n3 waits.
  const midway = [view('n1', 'done'), view('n2', 'updating'), view('n3', 'idle')];

  it('when a rollout goes on, it should taint the node being updated NoSchedule and the nodes still to be updated PreferNoSchedule, and leave the updated node free', () => {
    assert.deepEqual(
      [...rolloutTaints(midway, { active: true })],
      [
        ['n1', undefined],
        ['n2', 'updating'],
        ['n3', 'updatePending'],
      ],
    );
  });

  it('when the rollout is paused, it should keep NoSchedule only on the node still finishing its update', () => {
    assert.deepEqual(
      [...rolloutTaints(midway, { active: false })],
      [
        ['n1', undefined],
        ['n2', 'updating'],
        ['n3', undefined],
      ],
    );
  });

  it('when the rollout is complete, it should leave no rollout taint on any node', () => {
    const done = [view('n1', 'done'), view('n2', 'done'), view('n3', 'done')];
    assert.deepEqual([...rolloutTaints(done, { active: false }).values()], [undefined, undefined, undefined]);
  });

  it('when the rollout is halted on a degraded node, it should mark that node still to be updated, not being updated', () => {
    const halted = [view('n1', 'degraded'), view('n2', 'idle')];
    assert.deepEqual([...rolloutTaints(halted, { active: true }).values()], ['updatePending', 'updatePending']);
  });
});

describe('withRolloutTaint', () => {
  it('when a node is handed out, it should swap PreferNoSchedule for NoSchedule and keep every other taint as it is', () => {
    assert.deepEqual(withRolloutTaint([UNSCHEDULABLE, PENDING, POOLS], 'updating'), [UNSCHEDULABLE, POOLS, UPDATING]);
  });

  it('when the node already carries exactly the wanted taint, it should want no write', () => {
    assert.equal(withRolloutTaint([POOLS, UPDATING], 'updating'), undefined);
    assert.equal(withRolloutTaint([POOLS], undefined), undefined);
  });

  it('when the node is done, it should remove both rollout taints and nothing else', () => {
    assert.deepEqual(withRolloutTaint([UPDATING, POOLS, PENDING], undefined), [POOLS]);
  });

  it('when someone gave one of Kindling rollout taints another effect or a value, it should write it back as Kindling wants it', () => {
    assert.deepEqual(withRolloutTaint([{ ...PENDING, effect: 'NoSchedule' }], 'updatePending'), [PENDING]);
    assert.deepEqual(withRolloutTaint([{ ...UPDATING, value: 'x' }], 'updating'), [UPDATING]);
  });
});
