import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createQueueMetrics, createRegistry, EVENT_LOOP_PRECISION_MS } from './metrics.js';
import type { WorkQueue } from './queue.js';

/** A queue as the depth gauge sees it, counting how often it is asked. */
function queueOf(name: string, depth: number): WorkQueue & { asked: number } {
  const q = {
    name,
    asked: 0,
    get depth(): number {
      q.asked++;
      return depth;
    },
  };
  return q as unknown as WorkQueue & { asked: number };
}

describe('queue metrics', () => {
  it('when a queue is made again under the same name (leadership won again), it should report the new one and no longer hold the stopped one', async () => {
    const registry = createRegistry('test');
    const metrics = createQueueMetrics(registry);
    const stopped = queueOf('tokens', 7);
    const current = queueOf('tokens', 2);
    const other = queueOf('payloads', 4);
    metrics.watch(stopped);
    metrics.watch(other);
    metrics.watch(current);
    const text = await registry.metrics();
    assert.match(text, /kindling_queue_depth\{queue="tokens",component="test"\} 2\n/);
    assert.match(text, /kindling_queue_depth\{queue="payloads",component="test"\} 4\n/);
    assert.equal(stopped.asked, 0, 'the stopped queue is not consulted');
  });
});

describe('default metrics', () => {
  it('when the loop is idle, it should sample its delay every EVENT_LOOP_PRECISION_MS (each sample wakes the process), not every 10 ms', async () => {
    const registry = createRegistry('test');
    await registry.metrics();
    await new Promise((r) => setTimeout(r, 3.5 * EVENT_LOOP_PRECISION_MS));
    const text = await registry.metrics();
    // The histogram holds the intervals between samples.
    const min = Number(/^nodejs_eventloop_lag_min_seconds\{[^}]*\} (\S+)$/m.exec(text)?.[1]);
    assert.ok(min >= (0.9 * EVENT_LOOP_PRECISION_MS) / 1000, `min interval ${min} s`);
  });
});
