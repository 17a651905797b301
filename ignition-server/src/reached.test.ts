import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Clock } from '../../support/src/timers.js';
import { ReachedRecords, releaseDueAt } from './reached.js';

/** A clock whose timers fire only as time is moved on. */
function steppedClock(): Clock & { advance(ms: number): void } {
  let now = 0;
  let timers: { at: number; fn: () => void }[] = [];
  return {
    now: () => now,
    setTimeout(fn, ms) {
      const timer = { at: now + ms, fn };
      timers.push(timer);
      return timer;
    },
    clearTimeout: (h) => void (timers = timers.filter((t) => t !== h)),
    advance(ms) {
      const end = now + ms;
      for (;;) {
        const next = timers.filter((t) => t.at <= end).sort((a, b) => a.at - b.at)[0];
        if (!next) break;
        timers = timers.filter((t) => t !== next);
        now = next.at;
        next.fn();
      }
      now = end;
    },
  };
}

function records(): { clock: ReturnType<typeof steppedClock>; released: string[][]; reached: ReachedRecords } {
  const clock = steppedClock();
  const released: string[][] = [];
  const reached = new ReachedRecords({
    clock,
    quietMs: 2_000,
    maxHoldMs: 30_000,
    release: (keys) => void released.push(keys),
  });
  return { clock, released, reached };
}

describe('first-fetch records', () => {
  it('when first fetches are held, it should be due after a quiet spell, or once the oldest waited its longest', () => {
    const opts = { quietMs: 2_000, maxHoldMs: 30_000 };
    assert.equal(releaseDueAt({ firstMs: 0, lastMs: 500 }, opts), 2_500);
    assert.equal(releaseDueAt({ firstMs: 0, lastMs: 29_000 }, opts), 30_000);
  });

  it('when hosts keep booting, it should hand nothing over until they stop, then all at once, each with the time of its fetch', () => {
    const { clock, released, reached } = records();
    for (let i = 0; i < 100; i++) {
      reached.add(`ns/s${i}`, clock.now());
      clock.advance(50);
    }
    assert.equal(released.length, 0, 'nothing while the storm lasts (5 s)');
    clock.advance(2_000);
    assert.equal(released.length, 1, 'released once fetches stopped for 2 s');
    assert.equal(released[0]?.length, 100);
    assert.equal(reached.at('ns/s0'), 0, 'the time of the fetch, not of the write');
    assert.equal(reached.at('ns/s99'), 4_950);
    reached.done('ns/s0');
    assert.equal(reached.at('ns/s0'), undefined, 'written: nothing left to write');
  });

  it('when a storm outlasts the longest hold, it should hand over what waited that long while hosts still boot', () => {
    const { clock, released, reached } = records();
    for (let i = 0; i < 400; i++) {
      reached.add(`ns/s${i}`, clock.now());
      clock.advance(100);
    }
    assert.equal(released.length, 1);
    assert.equal(released[0]?.length, 300, 'the records of the first 30 s');
    clock.advance(2_000);
    assert.equal(released.length, 2, 'the rest once the storm is over');
    assert.equal(released[1]?.length, 100);
  });

  it('when a Secret is fetched again before its record is written, it should keep the first time and hand it over once', () => {
    const { clock, released, reached } = records();
    reached.add('ns/a', 10);
    clock.advance(1_000);
    reached.add('ns/a', clock.now());
    clock.advance(3_000);
    assert.deepEqual(released, [['ns/a']]);
    assert.equal(reached.at('ns/a'), 10);
  });

  it('when the server stops, it should hand every held record over at once', () => {
    const { released, reached } = records();
    reached.add('ns/a', 0);
    reached.add('ns/b', 0);
    reached.releaseNow();
    assert.deepEqual(released, [['ns/a', 'ns/b']]);
    reached.releaseNow();
    assert.equal(released.length, 1, 'nothing held: nothing handed over');
  });
});
