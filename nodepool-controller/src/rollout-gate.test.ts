import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { HEALTH_GATE_CONSUMED } from '../../api/src/keys.js';
import { parseWindow } from './maintenance-window.js';
import { decideRolloutGate, overrideApplies, quietAction, type GateInput } from './rollout-gate.js';

const now = Date.parse('2026-11-30T12:00:00Z');
const healthy = { unavailable: [], maxUnavailable: 1 };
const base: GateInput = { now, health: healthy, healthGated: true, target: 'h2' };
const nightly = parseWindow({ schedule: '0 2 * * *', duration: '3h' });

describe('decideRolloutGate', () => {
  it('when the pool has no window and is healthy, it should allow the rollout', () => {
    assert.deepEqual(decideRolloutGate(base), {
      allowed: true,
      reason: 'AsExpected',
      message: 'Disruptive work may start',
    });
  });

  it('when the window is closed, it should hold with when it opens and look again then', () => {
    assert.deepEqual(decideRolloutGate({ ...base, window: nightly }), {
      allowed: false,
      reason: 'WaitingForMaintenanceWindow',
      message: 'waiting for the maintenance window (opens 2026-12-01T02:00Z)',
      recheckInMs: 14 * 3_600_000,
    });
  });

  it('when the window is open, it should allow the rollout and look again when it closes', () => {
    const v = decideRolloutGate({ ...base, window: nightly, now: Date.parse('2026-12-01T04:00:00Z') });
    assert.deepEqual([v.allowed, v.reason, v.recheckInMs], [true, 'AsExpected', 3_600_000]);
  });

  it('when the window cannot be read, it should hold and say why', () => {
    const v = decideRolloutGate({ ...base, window: new Error('schedule "x" is not a cron') });
    assert.deepEqual([v.allowed, v.reason], [false, 'WaitingForMaintenanceWindow']);
    assert.match(v.message, /cannot be read: schedule "x"/);
  });

  it('when more nodes are unavailable than maxUnavailable, it should hold and name them', () => {
    const v = decideRolloutGate({ ...base, health: { unavailable: ['m1', 'm2'], maxUnavailable: 1 } });
    assert.deepEqual(v, {
      allowed: false,
      reason: 'TooManyNodesUnavailable',
      message: 'the health gate holds the rollout: 2 node(s) are unavailable, more than maxUnavailable 1: m1, m2',
    });
  });

  it('when as many nodes are unavailable as maxUnavailable, it should allow the rollout', () => {
    assert.equal(decideRolloutGate({ ...base, health: { unavailable: ['m1'], maxUnavailable: 1 } }).allowed, true);
  });

  it('when a node is Degraded or the control plane is unreachable, it should hold with that reason (the control plane first)', () => {
    const degraded = decideRolloutGate({ ...base, health: { ...healthy, degraded: 'n1: kubelet refused its config' } });
    assert.deepEqual(
      [degraded.reason, degraded.message],
      ['NodeDegraded', 'the health gate holds the rollout: a node is Degraded: n1: kubelet refused its config'],
    );
    const both = decideRolloutGate({
      ...base,
      health: { ...healthy, degraded: 'n1: x', controlPlaneUnreachable: 'timeout' },
    });
    assert.equal(both.reason, 'ControlPlaneUnreachable');
  });

  it('when the gate fails and the override is set, it should allow the rollout once and mark the override consumed for this hash', () => {
    const sick = { unavailable: ['m1', 'm2'], maxUnavailable: 1 };
    const v = decideRolloutGate({ ...base, health: sick, override: 'node m2 is being repaired' });
    assert.deepEqual(
      [v.allowed, v.reason, v.consumeOverride],
      [true, 'HealthGateOverridden', `${HEALTH_GATE_CONSUMED}h2`],
    );
    const again = decideRolloutGate({ ...base, health: sick, override: `${HEALTH_GATE_CONSUMED}h2` });
    assert.deepEqual([again.allowed, again.consumeOverride], [true, undefined]);
    const next = decideRolloutGate({ ...base, target: 'h3', health: sick, override: `${HEALTH_GATE_CONSUMED}h2` });
    assert.deepEqual([next.allowed, next.reason], [false, 'TooManyNodesUnavailable']);
  });

  it('when the window is closed, it should hold even with the override set', () => {
    const v = decideRolloutGate({ ...base, window: nightly, override: 'go' });
    assert.deepEqual([v.allowed, v.reason, v.consumeOverride], [false, 'WaitingForMaintenanceWindow', undefined]);
  });

  it('when the rollout supersedes one under way, it should not apply the health gate (the new target may be the fix), only the window', () => {
    const sick = { ...healthy, degraded: 'n1: kubelet refused its config' };
    assert.equal(decideRolloutGate({ ...base, health: sick, healthGated: false }).allowed, true);
    assert.equal(decideRolloutGate({ ...base, health: sick, healthGated: false, window: nightly }).allowed, false);
  });

  it('when the override is unset, it should not apply', () => {
    assert.equal(overrideApplies(undefined, 'h2'), false);
  });

  it('when the window is closed and the change neither drains nor reboots, it should allow it, say the window does not hold it, and set the ceiling the agents obey', () => {
    assert.deepEqual(decideRolloutGate({ ...base, window: nightly, quiet: 'restart kubelet.service' }), {
      allowed: true,
      reason: 'AsExpected',
      message:
        'The change neither drains nor reboots a node (each node: restart kubelet.service): the maintenance window does not hold it',
      ceiling: 'waiting for the maintenance window (opens 2026-12-01T02:00Z)',
      recheckInMs: Date.parse('2026-12-01T02:00:00Z') - base.now,
    });
  });

  it("when a quiet change is let through, it should look again at the window's next edge (to lift or set the ceiling)", () => {
    const opens = Date.parse('2026-12-01T02:00:00Z');
    const closed = decideRolloutGate({ ...base, window: nightly, quiet: 'none' });
    assert.equal(closed.recheckInMs, opens - base.now);
    const open = decideRolloutGate({ ...base, window: nightly, quiet: 'none', now: opens + 60_000 });
    assert.deepEqual([open.ceiling, open.recheckInMs], [undefined, 3 * 3_600_000 - 60_000]);
  });

  it('when the window is open or the pool has none, it should set no ceiling on a quiet change', () => {
    const open = decideRolloutGate({
      ...base,
      window: nightly,
      quiet: 'none',
      now: Date.parse('2026-12-01T04:00:00Z'),
    });
    assert.deepEqual([open.allowed, open.ceiling], [true, undefined]);
    assert.equal(decideRolloutGate({ ...base, quiet: 'none' }).ceiling, undefined);
  });

  it('when the window is closed and a quiet change finds the pool unhealthy, it should still apply the health gate', () => {
    const sick = { unavailable: ['m1', 'm2'], maxUnavailable: 1 };
    const v = decideRolloutGate({ ...base, window: nightly, quiet: 'none', health: sick });
    assert.deepEqual([v.allowed, v.reason], [false, 'TooManyNodesUnavailable']);
  });
});

describe('quietAction', () => {
  const disruption = { action: 'none', drain: false, reboot: false, changes: [] };

  it('when the disruption policy gives the change neither a drain nor a reboot, it should name its action', () => {
    assert.equal(quietAction(disruption), 'none');
    assert.equal(quietAction({ ...disruption, action: 'reload crio.service' }), 'reload crio.service');
  });

  it('when the change drains, reboots, or its disruption is not known (a Replace rollout, inputs gone), it should be disruptive', () => {
    assert.equal(quietAction({ ...disruption, action: 'drain', drain: true }), undefined);
    assert.equal(quietAction({ ...disruption, action: 'drain, reboot', drain: true, reboot: true }), undefined);
    assert.equal(quietAction(undefined), undefined);
  });
});
