/** Time, injected so tests control it. */
export interface Clock {
  now(): number;
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

/**
 * The longest timer Node runs as asked: a longer one fires after 1 ms (with a TimeoutOverflowWarning), so a requeue
 * a month away (a pool paused until next month, a monthly maintenance window, a tenant's token issued in the far
 * future) became a reconcile every millisecond. A longer wait is cut to this; whoever set it looks again then.
 */
export const MAX_TIMER_MS = 2 ** 31 - 1;

export const realClock: Clock = {
  now: () => Date.now(),
  // Timers alone never keep a process alive: servers and watches do that.
  setTimeout: (fn, ms) => setTimeout(fn, Math.min(ms, MAX_TIMER_MS)).unref(),
  clearTimeout: (h) => clearTimeout(h as NodeJS.Timeout),
};

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** realClock whose now() never jumps with the wall clock (NTP steps, manual changes): for deadlines and intervals. */
export const monotonicClock: Clock = { ...realClock, now: () => performance.now() };
