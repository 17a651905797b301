/** Time, injected so tests control it. */
export interface Clock {
  now(): number;
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

export const realClock: Clock = {
  now: () => Date.now(),
  // Timers alone never keep a process alive: servers and watches do that.
  setTimeout: (fn, ms) => setTimeout(fn, ms).unref(),
  clearTimeout: (h) => clearTimeout(h as NodeJS.Timeout),
};

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** realClock whose now() never jumps with the wall clock (NTP steps, manual changes): for deadlines and intervals. */
export const monotonicClock: Clock = { ...realClock, now: () => performance.now() };
