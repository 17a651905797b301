/**
 * What holds a serving thread's event loop: how late its timers run (monitorEventLoopDelay) and the garbage
 * collector's pauses, since the last look. A host's handshake waits for the loop of the thread that accepted
 * it, so these are where a boot storm's tail shows first; the main thread has the same from prom-client
 * (nodejs_eventloop_lag_*, nodejs_gc_duration_seconds).
 */
import { constants, monitorEventLoopDelay, PerformanceObserver } from 'node:perf_hooks';

/** A thread's pauses since the previous look, in milliseconds. */
export interface ThreadPauses {
  /** Event-loop delay, sampled every RESOLUTION_MS: median, 99th percentile and longest. */
  delayP50Ms: number;
  delayP99Ms: number;
  delayMaxMs: number;
  /** Garbage-collector pauses: how many, their sum and the longest. */
  gcCount: number;
  gcTotalMs: number;
  gcMaxMs: number;
  /** Of those, the full (mark-compact) ones: the rest are young-generation collections. */
  gcMajorCount: number;
  gcMajorMs: number;
}

/** As prom-client samples the main thread's loop. */
const RESOLUTION_MS = 10;

const NS_PER_MS = 1e6;

/** Starts watching the calling thread; each look returns what happened since the previous one. */
export function watchPauses(): { look(): ThreadPauses } {
  const delay = monitorEventLoopDelay({ resolution: RESOLUTION_MS });
  delay.enable();
  const none = { count: 0, totalMs: 0, maxMs: 0, majorCount: 0, majorMs: 0 };
  const gc = { ...none };
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      gc.count++;
      gc.totalMs += e.duration;
      gc.maxMs = Math.max(gc.maxMs, e.duration);
      if ((e as { detail?: { kind?: number } }).detail?.kind !== constants.NODE_PERFORMANCE_GC_MAJOR) continue;
      gc.majorCount++;
      gc.majorMs += e.duration;
    }
  }).observe({ entryTypes: ['gc'] });
  return {
    look() {
      // An idle histogram holds no sample, and its percentiles are 0 while its minimum is a huge sentinel.
      const sampled = delay.count > 0;
      const pauses: ThreadPauses = {
        delayP50Ms: sampled ? delay.percentile(50) / NS_PER_MS : 0,
        delayP99Ms: sampled ? delay.percentile(99) / NS_PER_MS : 0,
        delayMaxMs: sampled ? delay.max / NS_PER_MS : 0,
        gcCount: gc.count,
        gcTotalMs: gc.totalMs,
        gcMaxMs: gc.maxMs,
        gcMajorCount: gc.majorCount,
        gcMajorMs: gc.majorMs,
      };
      delay.reset();
      Object.assign(gc, none);
      return pauses;
    },
  };
}
