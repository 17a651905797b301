/**
 * A work queue of keys (namespace/name), not events: a key queued twice runs once; one reconcile per key is in
 * flight at a time (a key added while it runs is run again afterwards); failures requeue with per-key
 * exponential backoff; `requeueAfterMs` and NotReadyError requeue quietly.
 *
 * Keys are fair across groups (`groupOf`: a tenant's namespace, a guest cluster): each group waits in its own
 * FIFO and the workers take from the groups in turn, so one tenant's thousand keys wait behind each other, not
 * in front of another tenant's one. `maxInFlightPerGroup` caps how many workers one group holds at once.
 */
import { NotReadyError, TerminalError } from './errors.js';
import { realClock, type Clock } from './timers.js';

export interface ReconcileResult {
  /** Run the key again after this long (level-based resync, waiting on time). */
  requeueAfterMs?: number;
}

export type Outcome = 'success' | 'requeue' | 'not_ready' | 'terminal' | 'error';

export interface QueueOptions {
  name: string;
  reconcile: (key: string) => Promise<ReconcileResult | void>;
  concurrency?: number;
  baseBackoffMs?: number;
  maxBackoffMs?: number;
  clock?: Clock;
  /** The tenant a key belongs to: the unit of fairness (default: one group, plain FIFO). */
  groupOf?: (key: string) => string;
  /** Reconciles of one group in flight at once (default: no cap beyond concurrency). */
  maxInFlightPerGroup?: number;
  /** Called after each reconcile, for metrics and logs. */
  onDone?: (key: string, outcome: Outcome, durationMs: number, err?: unknown) => void;
}

export class WorkQueue {
  readonly name: string;
  #opts: Required<Omit<QueueOptions, 'onDone'>> & Pick<QueueOptions, 'onDone'>;
  /** Ready keys by group; the Map's order is the turn order (a group served moves to the end). */
  #ready = new Map<string, string[]>();
  #readyCount = 0;
  #groupInFlight = new Map<string, number>();
  #queued = new Set<string>();
  #inFlight = new Set<string>();
  #dirty = new Set<string>();
  #failures = new Map<string, number>();
  #delayed = new Map<string, { at: number; handle: unknown }>();
  #running = 0;
  #stopped = false;
  #pumpScheduled = false;
  #idle: (() => void)[] = [];

  constructor(opts: QueueOptions) {
    this.name = opts.name;
    this.#opts = {
      concurrency: 1,
      baseBackoffMs: 200,
      maxBackoffMs: 60_000,
      clock: realClock,
      groupOf: () => '',
      maxInFlightPerGroup: Infinity,
      ...opts,
    };
  }

  /** Keys waiting to run (not counting delayed or in-flight ones). */
  get depth(): number {
    return this.#readyCount;
  }

  add(key: string): void {
    if (this.#stopped) return;
    if (this.#inFlight.has(key)) {
      this.#dirty.add(key);
      return;
    }
    if (this.#queued.has(key)) return;
    this.#queued.add(key);
    const group = this.#opts.groupOf(key);
    const keys = this.#ready.get(group);
    if (keys) keys.push(key);
    else this.#ready.set(group, [key]);
    this.#readyCount++;
    this.#schedulePump();
  }

  /** Adds the key after a delay; an earlier pending delay for the same key wins. */
  addAfter(key: string, ms: number): void {
    if (this.#stopped) return;
    if (ms <= 0) return this.add(key);
    const { clock } = this.#opts;
    const at = clock.now() + ms;
    const pending = this.#delayed.get(key);
    if (pending && pending.at <= at) return;
    if (pending) clock.clearTimeout(pending.handle);
    const handle = clock.setTimeout(() => {
      this.#delayed.delete(key);
      this.add(key);
    }, ms);
    this.#delayed.set(key, { at, handle });
  }

  /** Forgets a key's failures (e.g. when its object is gone). */
  forget(key: string): void {
    this.#failures.delete(key);
  }

  /** Stops taking work and waits for in-flight reconciles to finish. */
  async stop(): Promise<void> {
    this.#stopped = true;
    for (const { handle } of this.#delayed.values()) this.#opts.clock.clearTimeout(handle);
    this.#delayed.clear();
    this.#ready.clear();
    this.#readyCount = 0;
    this.#queued.clear();
    if (this.#running > 0) await new Promise<void>((r) => this.#idle.push(r));
  }

  /** Resolves when nothing is queued or running (delayed keys aside): for tests and benchmarks. */
  async drained(): Promise<void> {
    await Promise.resolve();
    if (this.#running === 0 && this.#readyCount === 0) return;
    await new Promise<void>((r) => this.#idle.push(r));
  }

  /** Starts work on a later microtask, so keys added in the same tick are deduplicated first. */
  #schedulePump(): void {
    if (this.#pumpScheduled) return;
    this.#pumpScheduled = true;
    queueMicrotask(() => {
      this.#pumpScheduled = false;
      this.#pump();
    });
  }

  #pump(): void {
    while (!this.#stopped && this.#running < this.#opts.concurrency) {
      const next = this.#next();
      if (next === undefined) return;
      const [group, key] = next;
      this.#queued.delete(key);
      this.#inFlight.add(key);
      this.#groupInFlight.set(group, (this.#groupInFlight.get(group) ?? 0) + 1);
      this.#running++;
      void this.#run(key, group);
    }
  }

  /** The first key of the first group in turn that is under its cap; that group's turn moves to the end. */
  #next(): [string, string] | undefined {
    for (const [group, keys] of this.#ready) {
      if ((this.#groupInFlight.get(group) ?? 0) >= this.#opts.maxInFlightPerGroup) continue;
      const key = keys.shift() as string;
      this.#ready.delete(group);
      if (keys.length > 0) this.#ready.set(group, keys);
      this.#readyCount--;
      return [group, key];
    }
    return undefined;
  }

  #finished(group: string): void {
    const n = (this.#groupInFlight.get(group) ?? 1) - 1;
    if (n > 0) this.#groupInFlight.set(group, n);
    else this.#groupInFlight.delete(group);
  }

  async #run(key: string, group: string): Promise<void> {
    const started = this.#opts.clock.now();
    let outcome: Outcome = 'success';
    let error: unknown;
    try {
      const result = await this.#opts.reconcile(key);
      outcome = this.#afterSuccess(key, result ?? {});
    } catch (err) {
      error = err;
      outcome = this.#afterError(key, err);
    } finally {
      this.#inFlight.delete(key);
      this.#finished(group);
      this.#running--;
      this.#opts.onDone?.(key, outcome, this.#opts.clock.now() - started, error);
      if (this.#dirty.delete(key)) this.add(key);
      this.#pump();
      if (this.#running === 0 && this.#readyCount === 0) this.#idle.splice(0).forEach((r) => r());
    }
  }

  #afterSuccess(key: string, result: ReconcileResult): Outcome {
    this.#failures.delete(key);
    if (result.requeueAfterMs === undefined) return 'success';
    this.addAfter(key, result.requeueAfterMs);
    return 'requeue';
  }

  #afterError(key: string, err: unknown): Outcome {
    if (err instanceof TerminalError) {
      this.#failures.delete(key);
      return 'terminal';
    }
    if (err instanceof NotReadyError) {
      this.addAfter(key, err.retryAfterMs);
      return 'not_ready';
    }
    const failures = (this.#failures.get(key) ?? 0) + 1;
    this.#failures.set(key, failures);
    const { baseBackoffMs, maxBackoffMs } = this.#opts;
    this.addAfter(key, Math.min(maxBackoffMs, baseBackoffMs * 2 ** (failures - 1)));
    return 'error';
  }
}
