import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { RolloutRecord } from '../../api/src/nodepool.js';
import { sampleInPlacePool } from '../../api/testing/nodepool.js';
import { computeStatus, type Observations } from './status.js';

const NOW = '2026-11-24T00:00:00Z';
const GATE = 'n01: health check failed: 5m after the reboot into h2, the Node is not Ready (Ready=False, KubeletConfigInvalid: kubelet cannot start: invalid configuration: maxPods (--max-pods) -1 must not be a negative number); restored the previous files and units and rebooted';
const record: RolloutRecord = { from: 'h1', to: 'h2', since: NOW, changes: [{ input: 'release', detail: 'r:1.36.2 to r:1.36.3-broken-kubelet', strategy: 'InPlace' }] };

function observed(rollout: Observations['rollout'], why?: RolloutRecord): Observations {
  return { pool: sampleInPlacePool(), machines: [], healthCheckExists: false, effectiveHash: 'h2', rollout, why };
}
const condition = (o: Observations, type: string): { status: string; reason: string; message: string } | undefined => computeStatus({ observations: o, now: NOW }).conditions?.find((c) => c.type === type);

describe('pool status during an in-place rollout', () => {
  it('when the health gate rolled a node back and the rollout halted, UpdatingVersion should be False/Failed with the node and the reason', () => {
    const c = condition(observed({ from: 'h1', to: 'h2', changed: ['release'], progress: '0 of 3 updated', failure: GATE }), 'UpdatingVersion');
    assert.equal(c?.status, 'False');
    assert.equal(c?.reason, 'Failed');
    assert.equal(c?.message, `Updating the release (hash h1 to h2) failed: ${GATE}`);
  });

  it('when the pool is paused mid-rollout, UpdatingConfig should say where it stopped', () => {
    const progress = '3 of 6 updated; paused at 3 of 6 by spec.pausedUntil: no node is handed out until it clears';
    const c = condition(observed({ from: 'h1', to: 'h2', changed: ['config'], progress }), 'UpdatingConfig');
    assert.equal(c?.status, 'True');
    assert.equal(c?.message, `Updating the config (hash h1 to h2): ${progress}`);
  });

  it('when a rollout is under way, status.rollout should hold its record; once none is, no record', () => {
    assert.deepEqual(computeStatus({ observations: observed({ from: 'h1', to: 'h2', changed: ['release'] }, record), now: NOW }).rollout, record);
    assert.equal(computeStatus({ observations: observed(undefined), now: NOW }).rollout, undefined);
  });
});
