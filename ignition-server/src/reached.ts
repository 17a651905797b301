/**
 * The first fetches of token Secrets (ANNOTATIONS.ignitionReachedAt), held while hosts are booting and written
 * once the burst is over. In a boot storm every host's fetch is the first of its Secret: written at once, each
 * was a PATCH, and a watch event coming back, in the middle of the storm, on the cores serving it. A record
 * keeps the time of the fetch, not of its write. What is held is lost if the process is killed (SIGKILL): at
 * most the records of the last `maxHoldMs`; a stop writes them first.
 */
import type { Clock } from '../../support/src/timers.js';

export interface ReachedOptions {
  clock: Clock;
  /** Held records are handed over once no new first fetch came for this long… */
  quietMs: number;
  /** …or once the oldest of them has waited this long, busy or not. */
  maxHoldMs: number;
  /** Hands records over to be written (a key at a time; its time is `at(key)` until `done(key)`). */
  release(keys: string[]): void;
}

/** When held records are due: after a quiet spell, or once the oldest has waited its longest. */
export function releaseDueAt(
  held: { firstMs: number; lastMs: number },
  opts: Pick<ReachedOptions, 'quietMs' | 'maxHoldMs'>,
): number {
  return Math.min(held.lastMs + opts.quietMs, held.firstMs + opts.maxHoldMs);
}

export class ReachedRecords {
  readonly #opts: ReachedOptions;
  /** Time of each Secret's first fetch, by key, until it is written. */
  readonly #at = new Map<string, number>();
  #held: string[] = [];
  #firstMs = 0;
  #lastMs = 0;
  #timer: unknown;

  constructor(opts: ReachedOptions) {
    this.#opts = opts;
  }

  /** A Secret's payload was served for the first time at `atMs` (a later fetch of it changes nothing). */
  add(key: string, atMs: number): void {
    if (this.#at.has(key)) return;
    this.#at.set(key, atMs);
    if (this.#held.length === 0) this.#firstMs = atMs;
    this.#lastMs = atMs;
    this.#held.push(key);
    this.#timer ??= this.#opts.clock.setTimeout(() => this.#due(), this.#opts.quietMs);
  }

  /** The time of the Secret's first fetch, while it is still to be written. */
  at(key: string): number | undefined {
    return this.#at.get(key);
  }

  /** Written (or its Secret is gone or was stamped by another replica): nothing left to write. */
  done(key: string): void {
    this.#at.delete(key);
  }

  /** Hands every held record over now (a stop). */
  releaseNow(): void {
    if (this.#timer !== undefined) this.#opts.clock.clearTimeout(this.#timer);
    this.#timer = undefined;
    const keys = this.#held;
    this.#held = [];
    if (keys.length > 0) this.#opts.release(keys);
  }

  /** One timer for the burst: when it fires early (fetches kept coming), it is set again for the new time. */
  #due(): void {
    this.#timer = undefined;
    if (this.#held.length === 0) return;
    const wait = releaseDueAt({ firstMs: this.#firstMs, lastMs: this.#lastMs }, this.#opts) - this.#opts.clock.now();
    if (wait > 0) this.#timer = this.#opts.clock.setTimeout(() => this.#due(), wait);
    else this.releaseNow();
  }
}
