import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Condition } from '../../api/src/conditions.js';
import { condition as cond } from '../../api/testing/conditions.js';
import type { NodePool } from '../../api/src/nodepool.js';
import { notReadyReport, waitUntilReady } from './pools.js';

const pool = (name: string, conditions: Condition[]): NodePool =>
  ({
    metadata: { name, namespace: 'tenant' },
    spec: { replicas: 2 },
    status: { replicas: 2, conditions },
  }) as unknown as NodePool;

const READY = pool('inplace', [
  cond('Ready', 'True', 'AsExpected', 'All machines are available at the desired config'),
]);
const HALTED = pool('capi', [
  cond('Ready', 'False', 'NotReady', '1 of 2 machines are available'),
  cond('UpdatingVersion', 'False', 'Failed', 'Updating the release (hash a to b) failed: n1: health check failed'),
  cond('AutoscalingEnabled', 'False', 'Disabled', 'spec.autoScaling is not set'),
]);

describe('waiting for the sample pools', () => {
  it('when a pool is not Ready in time, it should return a report naming it with the messages of its conditions that are not fine, not throw', async () => {
    const printed: string[] = [];
    const report = await waitUntilReady(
      () => Promise.resolve([READY, HALTED]),
      { timeoutMs: 0, pollMs: 1 },
      (l) => printed.push(l),
    );
    assert.deepEqual(report, [
      'capi: 2/2 not ready (1 of 2 machines are available)',
      '  UpdatingVersion False Failed: Updating the release (hash a to b) failed: n1: health check failed',
    ]);
    assert.deepEqual(printed, ['    inplace: 2/2 Ready', '    capi: 2/2 not ready (1 of 2 machines are available)']);
  });

  it('when every pool becomes Ready, it should return an empty report', async () => {
    const lists = [[HALTED], [READY]];
    const report = await waitUntilReady(
      () => Promise.resolve(lists.shift() ?? [READY]),
      { timeoutMs: 60_000, pollMs: 1 },
      () => undefined,
    );
    assert.deepEqual(report, []);
  });

  it('when every pool is Ready, it should report nothing', () => {
    assert.deepEqual(notReadyReport([READY]), []);
  });
});
