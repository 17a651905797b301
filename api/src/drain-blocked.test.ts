import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { formatDrainBlocked, parseDrainBlocked } from './drain-blocked.js';

describe('the drain-blocked annotation', () => {
  it('when the drainer writes a block, the readers should get back the pod, the budget and the time', () => {
    const block = { pod: 'shop/web-7d9f', pdb: 'shop/web', since: '2026-08-01T10:00:00.000Z' };
    const text = formatDrainBlocked(block);
    assert.equal(text, 'shop/web-7d9f blocked by PodDisruptionBudget shop/web since 2026-08-01T10:00:00.000Z');
    assert.deepEqual(parseDrainBlocked(text), block);
  });

  it('when the value is absent or not in the format, it should read nothing', () => {
    assert.equal(parseDrainBlocked(undefined), undefined);
    assert.equal(parseDrainBlocked(''), undefined);
    assert.equal(parseDrainBlocked('blocked, ask Sam'), undefined);
  });
});
