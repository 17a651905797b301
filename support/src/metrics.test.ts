import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createQueueMetrics, createRegistry } from './metrics.js';
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
