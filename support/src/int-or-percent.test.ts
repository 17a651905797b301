import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { resolveFenceposts, resolveIntOrPercent, resolveMaxUnavailable } from './int-or-percent.js';

describe('resolveIntOrPercent', () => {
  const cases: [number | string | undefined, number, 'down' | 'up', number | undefined][] = [
    [3, 10, 'down', 3],
    ['3', 10, 'down', 3],
    [' 30% ', 10, 'down', 3],
    ['25%', 10, 'down', 2],
    ['25%', 10, 'up', 3],
    ['0%', 7, 'up', 0],
    [2.7, 10, 'down', 2],
    [undefined, 10, 'down', undefined],
    ['banana', 10, 'down', undefined],
    ['-1', 10, 'down', undefined],
    [Number.NaN, 10, 'down', undefined],
  ];
  for (const [value, total, round, want] of cases) {
    it(`when the value is ${JSON.stringify(value) ?? 'undefined'} of ${total} rounded ${round}, it should resolve to ${String(want)}`, () => {
      assert.equal(resolveIntOrPercent(value, total, round), want);
    });
  }
});

describe('resolveMaxUnavailable', () => {
  const cases: [number | string | undefined, number, number][] = [
    [undefined, 10, 1],
    [3, 10, 3],
    [0, 10, 1],
    ['3', 10, 3],
    ['0', 10, 1],
    ['50%', 3, 1],
    ['25%', 10, 2],
    ['30%', 10, 3],
    ['5%', 10, 1],
    ['10%', 5, 1],
    ['100%', 7, 7],
    ['0%', 7, 1],
    ['banana', 10, 1],
  ];
  for (const [value, total, want] of cases) {
    it(`when maxUnavailable is ${String(value)} of ${total}, it should allow ${want} (never fewer than 1)`, () => {
      assert.equal(resolveMaxUnavailable(value, total), want);
    });
  }
});

describe('resolveFenceposts', () => {
  const cases: [
    number | string | undefined,
    number | string | undefined,
    number,
    { maxSurge: number; maxUnavailable: number },
  ][] = [
    ['25%', '25%', 10, { maxSurge: 3, maxUnavailable: 2 }],
    [1, 0, 3, { maxSurge: 1, maxUnavailable: 0 }],
    [0, 0, 3, { maxSurge: 0, maxUnavailable: 1 }],
    [undefined, undefined, 3, { maxSurge: 0, maxUnavailable: 1 }],
    ['10%', '10%', 3, { maxSurge: 1, maxUnavailable: 0 }],
    ['0%', '0%', 3, { maxSurge: 0, maxUnavailable: 1 }],
  ];
  for (const [surge, unavailable, replicas, want] of cases) {
    it(`when maxSurge is ${String(surge)} and maxUnavailable ${String(unavailable)} of ${replicas}, it should allow ${want.maxSurge} more and ${want.maxUnavailable} fewer`, () => {
      assert.deepEqual(resolveFenceposts(surge, unavailable, replicas), want);
    });
  }
});
