import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { EventEmitter } from 'node:events';
import { watchPauses } from './pauses.js';

/** A connection opened on the watch: close it with `emit('close')`. */
function connection(pauses: ReturnType<typeof watchPauses>): EventEmitter {
  const c = new EventEmitter();
  pauses.track(c);
  return c;
}

function busy(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end);
}

describe('watchPauses', () => {
  it('when the loop is held for 60 ms with a connection open, it should report a delay of at least that once, and not at the next look', async () => {
    const pauses = watchPauses();
    const open = connection(pauses);
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
    assert.ok(after.delayMaxMs < 55, `max ${after.delayMaxMs} ms`);
    open.emit('close');
  });

  it('when no connection is open, it should not sample the loop (an idle thread is not woken), and sample again once one opens', async () => {
    const pauses = watchPauses();
    const [a, b] = [connection(pauses), connection(pauses)];
    a.emit('close');
    b.emit('close');
    // Sampled until its next sample finds no connection open.
    await sleep(30);
    pauses.look();
    busy(60);
    await sleep(30);
    assert.equal(pauses.look().delayMaxMs, 0);
    const open = connection(pauses);
    await sleep(30);
    busy(60);
    await sleep(30);
    assert.ok(pauses.look().delayMaxMs >= 55);
    open.emit('close');
  });

  it('when a thread serves again after an idle spell, it should not count the idle spell as a delay', async () => {
    const pauses = watchPauses();
    connection(pauses).emit('close');
    await sleep(300);
    const open = connection(pauses);
    await sleep(30);
    const seen = pauses.look();
    open.emit('close');
    assert.ok(seen.delayMaxMs < 150, `max ${seen.delayMaxMs} ms`);
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
