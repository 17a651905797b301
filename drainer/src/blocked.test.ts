import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { blockedAnnotation, blockedEvent } from './blocked.js';
import type { Block } from './evict.js';

const T0 = Date.parse('2026-08-01T10:00:00Z');
const block = (pod: string, pdb: string, since = T0): Block => ({
  pod,
  pdb,
  since,
  disruptionsAllowed: 0,
  detail: 'needs 3 healthy pods and has 3 currently',
});

describe('blockedAnnotation', () => {
  it('when a budget refuses a pod and the node shows nothing, it should name the pod, the budget and since when', () => {
    assert.equal(
      blockedAnnotation(undefined, [block('shop/web-1', 'shop/web')]),
      'shop/web-1 blocked by PodDisruptionBudget shop/web since 2026-08-01T10:00:00.000Z',
    );
  });

  it('when the node already shows that pod and budget, it should write nothing (even with another time, as after a restart)', () => {
    const shown = 'shop/web-1 blocked by PodDisruptionBudget shop/web since 2026-08-01T09:00:00.000Z';
    assert.equal(blockedAnnotation(shown, [block('shop/web-1', 'shop/web', T0 + 60_000)]), undefined);
  });

  it('when the oldest block is another pod now, it should rewrite it; when nothing blocks any more, remove it', () => {
    const shown = 'shop/web-1 blocked by PodDisruptionBudget shop/web since 2026-08-01T10:00:00.000Z';
    assert.match(
      blockedAnnotation(shown, [block('shop/web-2', 'shop/web', T0 + 5_000)]) ?? '',
      /^shop\/web-2 blocked by PodDisruptionBudget shop\/web since 2026-08-01T10:00:05\.000Z$/,
    );
    assert.equal(blockedAnnotation(shown, []), null);
    assert.equal(blockedAnnotation(undefined, []), undefined);
  });

  it('when several pods are blocked, it should show the first of the list it is given (the evictor sorts oldest first)', () => {
    assert.match(
      blockedAnnotation(undefined, [block('shop/a', 'shop/x'), block('shop/b', 'shop/y')]) ?? '',
      /^shop\/a blocked by PodDisruptionBudget shop\/x /,
    );
  });
});

describe('blockedEvent', () => {
  it('when a drain has no timeout, the Warning should name the pod, the budget and its disruptionsAllowed, and say it waits for the budget', () => {
    const e = blockedEvent(block('shop/web-1', 'shop/web'), 0);
    assert.equal(e.type, 'Warning');
    assert.equal(e.reason, 'DrainBlocked');
    assert.equal(
      e.message,
      'Eviction of shop/web-1 refused by PodDisruptionBudget shop/web (disruptionsAllowed 0: the budget needs 3 healthy pods and has 3 currently); no nodeDrainTimeout: retrying until the budget allows it',
    );
  });

  it('when the drain has a timeout or the budget is not computed yet, it should say so', () => {
    const e = blockedEvent(
      { pod: 'shop/web-1', pdb: 'shop/web', since: T0, detail: 'is still being processed by the server' },
      300_000,
    );
    assert.match(
      e.message,
      /\(disruptionsAllowed not computed yet: the budget is still being processed by the server\); retrying until nodeDrainTimeout 5m$/,
    );
  });
});
