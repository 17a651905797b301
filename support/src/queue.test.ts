import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { WorkQueue, type Outcome } from './queue.js';
import { NotReadyError, TerminalError } from './errors.js';
import { manualClock } from '../testing/index.js';

const tick = (): Promise<void> => new Promise((r) => setImmediate(r));

describe('WorkQueue', () => {
  it('when a key is added twice before it runs, it should reconcile it once', async () => {
    const seen: string[] = [];
    const q = new WorkQueue({ name: 't', reconcile: async (k) => void seen.push(k) });
    q.add('a');
    q.add('a');
    q.add('b');
    await q.drained();
    assert.deepEqual(seen, ['a', 'b']);
  });

  it('when a key is added while it runs, it should run it again afterwards and never twice at once', async () => {
    let inFlight = 0;
    let maxInFlight = 0;
    let runs = 0;
    let release!: () => void;
    const q = new WorkQueue({
      name: 't',
      concurrency: 4,
      reconcile: async () => {
        inFlight++;
        maxInFlight = Math.max(maxInFlight, inFlight);
        runs++;
        if (runs === 1) await new Promise<void>((r) => (release = r));
        inFlight--;
      },
    });
    q.add('a');
    await tick();
    q.add('a');
    q.add('a');
    release();
    await q.drained();
    assert.equal(runs, 2);
    assert.equal(maxInFlight, 1);
  });

  it('when reconcile fails repeatedly, it should requeue with exponential backoff up to the cap', async () => {
    const clock = manualClock();
    const outcomes: Outcome[] = [];
    const q = new WorkQueue({
      name: 't',
      clock,
      baseBackoffMs: 100,
      maxBackoffMs: 350,
      reconcile: async () => {
        throw new Error('boom');
      },
      onDone: (_k, o) => outcomes.push(o),
    });
    q.add('a');
    const delays: number[] = [];
    for (let i = 0; i < 4; i++) {
      await q.drained();
      delays.push(clock.pending()[0] ?? -1);
      clock.advance(delays.at(-1) ?? 0);
    }
    assert.deepEqual(delays, [100, 200, 350, 350]);
    assert.ok(outcomes.every((o) => o === 'error'));
    await q.stop();
  });

  it('when reconcile throws a TerminalError, it should not retry', async () => {
    const clock = manualClock();
    const q = new WorkQueue({
      name: 't',
      clock,
      reconcile: async () => Promise.reject(new TerminalError('bad spec', 'Invalid')),
    });
    q.add('a');
    await q.drained();
    assert.deepEqual(clock.pending(), []);
  });

  it('when reconcile throws a NotReadyError, it should requeue after its delay without backoff', async () => {
    const clock = manualClock();
    const q = new WorkQueue({
      name: 't',
      clock,
      reconcile: async () => Promise.reject(new NotReadyError('wait', 5000)),
    });
    q.add('a');
    await q.drained();
    assert.deepEqual(clock.pending(), [5000]);
    clock.advance(5000);
    await q.drained();
    assert.deepEqual(clock.pending(), [5000]);
    await q.stop();
  });

  it('when reconcile asks for a requeue and the key is also delayed later, it should keep the earlier time', async () => {
    const clock = manualClock();
    const q = new WorkQueue({ name: 't', clock, reconcile: async () => ({ requeueAfterMs: 1000 }) });
    q.add('a');
    await q.drained();
    q.addAfter('a', 9000);
    assert.deepEqual(clock.pending(), [1000]);
    await q.stop();
    assert.deepEqual(clock.pending(), []);
  });

  it("when one group floods the queue, it should run another group's key next, not after the flood", async () => {
    const seen: string[] = [];
    const q = new WorkQueue({
      name: 't',
      groupOf: (k) => k.split('/')[0] ?? '',
      reconcile: async (k) => void seen.push(k),
    });
    for (let i = 0; i < 1000; i++) q.add(`flood/${i}`);
    q.add('quiet/kubelet');
    await q.drained();
    assert.equal(seen.indexOf('quiet/kubelet'), 1);
    assert.equal(seen.length, 1001);
  });

  it('when one group has more keys than its cap, it should hold at most the cap of workers and leave the rest to others', async () => {
    const running = new Map<string, number>();
    let maxFlood = 0;
    const releases: (() => void)[] = [];
    const seen: string[] = [];
    const q = new WorkQueue({
      name: 't',
      concurrency: 4,
      maxInFlightPerGroup: 2,
      groupOf: (k) => k.split('/')[0] ?? '',
      reconcile: async (k) => {
        const g = k.split('/')[0] ?? '';
        running.set(g, (running.get(g) ?? 0) + 1);
        if (g === 'flood') maxFlood = Math.max(maxFlood, running.get(g) ?? 0);
        seen.push(k);
        await new Promise<void>((r) => releases.push(r));
        running.set(g, (running.get(g) ?? 0) - 1);
      },
    });
    for (let i = 0; i < 10; i++) q.add(`flood/${i}`);
    await tick();
    assert.deepEqual(seen, ['flood/0', 'flood/1']);
    q.add('other/a');
    await tick();
    assert.deepEqual(seen, ['flood/0', 'flood/1', 'other/a']);
    while (seen.length < 11 || releases.length > 0) {
      releases.splice(0).forEach((r) => r());
      await tick();
    }
    await q.drained();
    assert.equal(maxFlood, 2);
    assert.equal(q.depth, 0);
  });
});
