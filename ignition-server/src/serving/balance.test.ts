import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ConnectionBalance } from './balance.js';

/** Threads over one shared buffer, each with `open[i]` connections opened. */
function threads(open: number[]): ConnectionBalance[] {
  const buffer = ConnectionBalance.buffer(open.length);
  return open.map((n, i) => {
    const b = new ConnectionBalance(buffer, i);
    for (let k = 0; k < n; k++) b.opened();
    return b;
  });
}

/** How many of a thread's next `requests` responses ask for a close. */
const closes = (b: ConnectionBalance, requests: number): number =>
  Array.from({ length: requests }, () => b.shouldClose()).filter(Boolean).length;

describe('ConnectionBalance', () => {
  it('when a thread holds 53 of 64 connections, it should ask exactly the excess over its share (and one) to close, and the other thread none', () => {
    const [crowded, idle] = threads([53, 11]) as [ConnectionBalance, ConnectionBalance];
    // Share 32, one of slack: 53 − 33 = 20 closes, however many requests come before they close.
    assert.equal(closes(crowded, 100), 20);
    assert.equal(closes(idle, 100), 0);
  });

  it('when the connections asked to close have closed and others opened elsewhere, it should ask again only for a new excess', () => {
    const [crowded, idle] = threads([53, 11]) as [ConnectionBalance, ConnectionBalance];
    assert.equal(closes(crowded, 100), 20);
    for (let k = 0; k < 20; k++) crowded.closed(true);
    // The clients reconnected: 15 to the idle thread, 5 back to the crowded one (38 of 64).
    for (let k = 0; k < 15; k++) idle.opened();
    for (let k = 0; k < 5; k++) crowded.opened();
    assert.equal(closes(crowded, 100), 5);
    assert.equal(closes(idle, 100), 0);
  });

  it('when the connections are even, or off by the slack, it should ask none to close', () => {
    for (const open of [
      [32, 32],
      [33, 31],
      [0, 0],
      [1, 0],
    ]) {
      const [a, b] = threads(open) as [ConnectionBalance, ConnectionBalance];
      assert.equal(closes(a, 10) + closes(b, 10), 0, `${open.join('/')}`);
    }
  });

  it('when a connection closes on its own (not asked), it should count it gone without forgetting the ones asked', () => {
    const [crowded] = threads([10, 0]) as [ConnectionBalance, ConnectionBalance];
    // Share 5, slack 1: four asked to close.
    assert.equal(closes(crowded, 10), 4);
    crowded.closed(false);
    // 9 open, 4 of them closing: 5 counted, within its share (5) and the slack.
    assert.equal(closes(crowded, 10), 0);
  });

  it('when there is one thread, it should never ask', () => {
    const [only] = threads([100]) as [ConnectionBalance];
    assert.equal(closes(only, 10), 0);
  });

  it('when the process holds its cap of connections over two threads, it should refuse the next on either thread, counting the refused while they are open, until one closes', () => {
    const buffer = ConnectionBalance.buffer(2);
    const [a, b] = [new ConnectionBalance(buffer, 0, 3), new ConnectionBalance(buffer, 1, 3)];
    assert.deepEqual([a.opened(), a.opened(), b.opened()], [true, true, true]);
    assert.equal(b.opened(), false, 'the fourth, on the thread holding one');
    assert.equal(a.opened(), false);
    // The two refused close after their 503, then one admitted closes.
    b.closed(false);
    a.closed(false);
    a.closed(false);
    assert.equal(b.opened(), true);
  });
});
