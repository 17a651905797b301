import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { getHeapStatistics } from 'node:v8';
import { constants, PerformanceObserver, type PerformanceEntry } from 'node:perf_hooks';
import { collectGarbage } from './collect-garbage.js';

describe('collectGarbage', () => {
  it('when garbage fills the heap, it should run a full collection that frees it, and expose no gc to other code', async () => {
    const kinds: number[] = [];
    const observer = new PerformanceObserver((list) =>
      kinds.push(...list.getEntries().map((e) => (e as PerformanceEntry & { detail: { kind: number } }).detail.kind)),
    );
    observer.observe({ entryTypes: ['gc'] });
    // Made in a function of its own: nothing of it is left on this one's stack when the heap is collected.
    const before = ((): number => {
      const garbage = Array.from({ length: 300_000 }, (_, i) => ({ i, s: `x${i}` }));
      assert.equal(garbage.length, 300_000);
      return getHeapStatistics().used_heap_size;
    })();
    kinds.length = 0;
    collectGarbage();
    const after = getHeapStatistics().used_heap_size;
    await new Promise((r) => setTimeout(r, 50));
    observer.disconnect();
    assert.ok(kinds.includes(constants.NODE_PERFORMANCE_GC_MAJOR), `a full collection among ${kinds.join(',')}`);
    assert.ok(after < before - 5 * 2 ** 20, `at least 5 MiB freed (${before} → ${after})`);
    if (!process.execArgv.some((a) => /^--expose[-_]gc/.test(a)))
      assert.equal(typeof (globalThis as { gc?: unknown }).gc, 'undefined');
  });
});
