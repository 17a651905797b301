/**
 * What holds a serving thread's event loop: how late its timers run (while it serves) and the garbage collector's
 * pauses, since the last look. A host's handshake waits for the loop of the thread that accepted it, so these are
 * where a boot storm's tail shows first; the main thread has the same from prom-client (nodejs_eventloop_lag_*,
 * nodejs_gc_duration_seconds).
 */
import { constants, createHistogram, PerformanceObserver } from 'node:perf_hooks';

/** A thread's pauses since the previous look, in milliseconds. */
export interface ThreadPauses {
  /**
   * Event-loop delay, sampled every LOOP_RESOLUTION_MS while a connection is open: median, 99th percentile and
   * longest of the intervals between samples (so a loop that is never late reads LOOP_RESOLUTION_MS, and 0 when
   * nothing was sampled).
   */
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

/**
 * Fine enough to see a storm's stalls. Each sample wakes the thread (about 60 µs of CPU: 6 ms a second at this
 * resolution, measured on an otherwise idle thread), so the loop is sampled only while the thread has a
 * connection open: an idle serving thread does not wake at all. Not monitorEventLoopDelay, whose samples cannot
 * pause: enabled again, it counts the whole pause as its first interval (measured: "delays" of 69 to 336 ms in
 * every second of a storm).
 */
export const LOOP_RESOLUTION_MS = 10;

const NS_PER_MS = 1e6;

/** A connection as far as the watch needs it: when it closes. */
interface Connection {
  once(event: 'close', listener: () => void): unknown;
}

/**
 * Starts watching the calling thread; each look returns what happened since the previous one. `track` is given
 * each connection as it is accepted, before its handshake (where a stalled loop shows first in a storm): the
 * loop's delay is sampled while any is open.
 */
export function watchPauses(): { look(): ThreadPauses; track(connection: Connection): void } {
  // The intervals between samples, in ns, as monitorEventLoopDelay holds them.
  const delay = createHistogram();
  let open = 0;
  let timer: NodeJS.Timeout | undefined;
  let last = 0;
  const sample = (): void => {
    const now = performance.now();
    delay.record(Math.max(1, Math.round((now - last) * NS_PER_MS)));
    last = now;
    // Stopped at the first sample with no connection open: a thread between two hosts keeps its timer.
    if (open > 0) return;
    clearInterval(timer);
    timer = undefined;
  };
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
    track(connection) {
      open++;
      connection.once('close', () => void open--);
      if (timer !== undefined) return;
      // The first interval runs from now: a stall of the thread while it accepts this connection counts.
      last = performance.now();
      timer = setInterval(sample, LOOP_RESOLUTION_MS).unref();
    },
  };
}
