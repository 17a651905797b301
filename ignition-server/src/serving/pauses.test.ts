import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { watchPauses } from './pauses.js';

function busy(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end);
}

describe('watchPauses', () => {
  it('when the loop is held for 60 ms, it should report a delay of at least that once, and not at the next look', async () => {
    const pauses = watchPauses();
    await sleep(50);
    pauses.look();
    await sleep(30);
    busy(60);
    await sleep(30);
    const held = pauses.look();
    assert.ok(held.delayMaxMs >= 55, `max ${held.delayMaxMs} ms`);
    assert.ok(held.delayP50Ms < held.delayMaxMs);
    await sleep(50);
    const after = pauses.look();
    assert.ok(after.delayMaxMs < 40, `max ${after.delayMaxMs} ms`);
  });

  it('when the thread allocates, it should count its garbage-collector pauses', async () => {
    const pauses = watchPauses();
    let keep: number[][] = [];
    for (let i = 0; i < 200_000; i++) keep = i % 1000 === 0 ? [] : [...keep.slice(-10), [i]];
    assert.ok(keep.length > 0);
    // The observer is told of GC entries asynchronously.
    await sleep(20);
    const seen = pauses.look();
    assert.ok(seen.gcCount > 0, 'no GC pause seen');
    assert.ok(seen.gcTotalMs >= seen.gcMaxMs && seen.gcMaxMs > 0);
  });
});
