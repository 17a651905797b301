/**
 * Keeps one replica of a local component running, as a Deployment's kubelet keeps a container running: when
 * the process exits, for whatever reason (a crash, a SIGKILL, or a replica that lost its Lease and exited on
 * purpose), it is started again after an exponential backoff, capped, and the backoff starts over once a run
 * lasted long enough to count as healthy (kubelet's CrashLoopBackOff, with delays sized for a laptop). Each
 * exit is reported with the restart it leads to; the other components are not touched. stop() ends the
 * supervision: no restart is pending afterwards and the current process is gone.
 */
import { constants } from 'node:os';
import { realClock, type Clock } from '../../support/src/timers.js';

export interface BackoffPolicy {
  /** Delay before the first restart; each further restart doubles it. */
  initialMs: number;
  maxMs: number;
  /** A run at least this long resets the backoff: the next restart waits `initialMs` again. */
  resetAfterMs: number;
}

/** kubelet's CrashLoopBackOff is 10 s doubling to 5 min, reset after 10 min; a local session wants it quicker. */
export const RESTART_BACKOFF: Readonly<BackoffPolicy> = Object.freeze({
  initialMs: 1000,
  maxMs: 30_000,
  resetAfterMs: 60_000,
});

/** The delay before restart number `attempt` (1 for the first restart since the last reset). */
export function restartDelay(attempt: number, policy: BackoffPolicy): number {
  return Math.min(policy.maxMs, policy.initialMs * 2 ** Math.max(0, attempt - 1));
}

/** What the supervisor needs of a running process (test/bed's ManagedProcess, or a fake in unit tests). */
export interface SupervisedProcess {
  /** Resolves with the exit code once the process has exited (null: killed without a code). */
  readonly exited: Promise<number | null>;
  stop(): Promise<void>;
  /** The last lines of its log. */
  tail(lines: number): string;
}

export interface Restart {
  name: string;
  /** "code 1", "code 137 (SIGKILL)": how the process ended. */
  exit: string;
  ranForMs: number;
  /** 1 for the first restart since the backoff was last reset. */
  attempt: number;
  delayMs: number;
  lastLines: string;
}

export interface SupervisorOptions<P extends SupervisedProcess> {
  name: string;
  /** Starts a new process (the same command, the same log file). */
  spawn: () => P;
  policy?: BackoffPolicy;
  clock?: Clock;
  /** The process exited and will be started again in `restart.delayMs`. */
  onExit: (restart: Restart) => void;
  /** A process was started: `restarts` is 0 for the first one. */
  onStart?: (process: P, restarts: number) => void;
  /** Log lines shown with each exit. */
  tailLines?: number;
}

/** How an exit code reads: a guarded command killed by signal N exits 128 + N, as a shell reports it. */
export function describeExit(code: number | null): string {
  if (code === null) return 'killed by a signal';
  const signal = Object.entries(constants.signals).find(([, n]) => n === code - 128)?.[0];
  return code > 128 && signal ? `code ${code} (${signal})` : `code ${code}`;
}

export class Supervisor<P extends SupervisedProcess> {
  readonly name: string;
  /** Restarts so far (not counting the first start). */
  restarts = 0;
  #opts: SupervisorOptions<P> & { policy: BackoffPolicy; clock: Clock };
  #current: P | undefined;
  #startedAt = 0;
  #attempt = 0;
  #timer: unknown;
  #stopped = false;

  constructor(opts: SupervisorOptions<P>) {
    this.name = opts.name;
    // Spelled out: an option passed as undefined must not override the default.
    this.#opts = { ...opts, policy: opts.policy ?? RESTART_BACKOFF, clock: opts.clock ?? realClock };
  }

  /** The process running now; undefined while a restart is pending or once stopped. */
  get current(): P | undefined {
    return this.#current;
  }

  start(): void {
    if (this.#stopped || this.#current) return;
    const child = this.#opts.spawn();
    this.#current = child;
    this.#startedAt = this.#opts.clock.now();
    this.#opts.onStart?.(child, this.restarts);
    void child.exited.then((code) => this.#exited(child, code));
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    this.#opts.clock.clearTimeout(this.#timer);
    await this.#current?.stop();
    this.#current = undefined;
  }

  #exited(child: P, code: number | null): void {
    if (this.#stopped || child !== this.#current) return;
    this.#current = undefined;
    const { policy, clock } = this.#opts;
    const ranForMs = clock.now() - this.#startedAt;
    if (ranForMs >= policy.resetAfterMs) this.#attempt = 0;
    this.#attempt++;
    const delayMs = restartDelay(this.#attempt, policy);
    this.#opts.onExit({
      name: this.name,
      exit: describeExit(code),
      ranForMs,
      attempt: this.#attempt,
      delayMs,
      lastLines: child.tail(this.#opts.tailLines ?? 5),
    });
    this.#timer = clock.setTimeout(() => {
      this.restarts++;
      this.start();
    }, delayMs);
  }
}
