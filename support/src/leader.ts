/**
 * Lease-based leader election (coordination.k8s.io/v1), as client-go does it, so two replicas never act as
 * leader at once:
 * - A candidate takes the Lease when nobody holds it, or when the holder's record has not changed for the
 *   holder's lease duration *as this replica observed it* (local monotonic time since it last saw the record
 *   change). The holder's `renewTime` is never compared with the local clock: clocks of two machines differ.
 * - The leader renews every retry period. Each renewal is valid for the renew deadline from the moment its
 *   round began; a renewal request is aborted when the deadline comes. When the deadline passes without a
 *   renewal, the leader stops (`onStoppedLeading`) — and `lapsed` turns true the instant the deadline passes,
 *   even in a process that was paused and has not run a timer since, so requests can be refused on it
 *   (support/src/kubeconfig.ts). Because renewDeadline < leaseDuration, this happens strictly before a peer,
 *   which waits a whole lease duration after it saw the last renewal, can take the Lease.
 */
import * as k8s from '#k8s';
import type { Logger } from './logger.js';
import { isAlreadyExists, isNotFound } from './errors.js';
import { withSignal } from './kubeconfig.js';
import { monotonicClock, type Clock } from './timers.js';

/** The Lease reads and writes the elector makes; each is aborted by `signal`. */
export interface LeaseStore {
  /** The Lease, or undefined when there is none. */
  read(signal: AbortSignal): Promise<k8s.V1Lease | undefined>;
  /** Creates it; fails with a 409 when another candidate created it first. */
  create(lease: k8s.V1Lease, signal: AbortSignal): Promise<void>;
  /** Replaces it, guarded by the resourceVersion it carries: fails with a 409 when another write came first. */
  replace(lease: k8s.V1Lease, signal: AbortSignal): Promise<void>;
}

function apiLeaseStore(kubeConfig: k8s.KubeConfig, namespace: string, name: string): LeaseStore {
  const api = kubeConfig.makeApiClient(k8s.CoordinationV1Api);
  return {
    async read(signal) {
      try {
        return await api.readNamespacedLease({ name, namespace }, withSignal(signal));
      } catch (err) {
        if (isNotFound(err)) return undefined;
        throw err;
      }
    },
    create: async (body, signal) => void (await api.createNamespacedLease({ namespace, body }, withSignal(signal))),
    replace: async (body, signal) =>
      void (await api.replaceNamespacedLease({ name, namespace, body }, withSignal(signal))),
  };
}

export interface LeaderElectionOptions {
  kubeConfig: k8s.KubeConfig;
  namespace: string;
  name: string;
  identity: string;
  log: Logger;
  leaseDurationMs?: number;
  renewDeadlineMs?: number;
  retryPeriodMs?: number;
  /** Monotonic time and timers (default: monotonicClock). Wall time only goes into the Lease, for people. */
  clock?: Clock;
  /** Default: the Lease `namespace/name` through kubeConfig. */
  store?: LeaseStore;
  onStartedLeading: () => void;
  /** Leadership lapsed or was taken: the leader's work must stop now. Not called by stop(). */
  onStoppedLeading: (reason: string) => void;
}

export interface LeaderTimings {
  leaseDurationMs: number;
  renewDeadlineMs: number;
  retryPeriodMs: number;
}

/** client-go's defaults. */
export const LEADER_DEFAULTS: Readonly<LeaderTimings> = {
  leaseDurationMs: 15_000,
  renewDeadlineMs: 10_000,
  retryPeriodMs: 2_000,
};

/** Refuses timings under which a leader could still act after a peer took over. */
export function checkLeaderTimings(t: LeaderTimings): string | undefined {
  if (!(t.renewDeadlineMs < t.leaseDurationMs)) return 'the renew deadline must be shorter than the lease duration';
  if (!(t.retryPeriodMs < t.renewDeadlineMs)) return 'the retry period must be shorter than the renew deadline';
  if (t.leaseDurationMs < 1000) return 'the lease duration must be at least 1s (the Lease counts whole seconds)';
  return undefined;
}

type Round = { outcome: 'held' } | { outcome: 'other'; holder: string };

export class LeaderElector {
  #opts: LeaderElectionOptions & LeaderTimings;
  #clock: Clock;
  #store: LeaseStore;
  #leading = false;
  #lapsed = false;
  /** Monotonic time until which the last successful renewal lets this replica act. */
  #validUntil = 0;
  /** The same instant in wall time, for the log line that says until when this replica acted. */
  #validUntilWall = 0;
  /** The Lease record as last seen, and when (monotonic) this replica first saw it so. */
  #observed: { record: string; at: number } | undefined;
  #tickTimer: unknown;
  #deadlineTimer: unknown;
  #stopped = true;

  constructor(opts: LeaderElectionOptions) {
    this.#opts = { ...LEADER_DEFAULTS, ...opts };
    const invalid = checkLeaderTimings(this.#opts);
    if (invalid) throw new Error(`leader election: ${invalid}`);
    this.#clock = opts.clock ?? monotonicClock;
    this.#store = opts.store ?? apiLeaseStore(opts.kubeConfig, opts.namespace, opts.name);
  }

  /** Leading, and within the renew deadline of the last renewal. */
  get isLeader(): boolean {
    return this.#leading && this.#clock.now() < this.#validUntil;
  }

  /**
   * This replica led and its renew deadline passed without a renewal: nothing it does may reach the cluster
   * any more. Computed from the clock, so it is true on the first instruction after a pause, before the
   * deadline timer has had a chance to run.
   */
  get lapsed(): boolean {
    return this.#lapsed || (this.#leading && this.#clock.now() >= this.#validUntil);
  }

  start(): void {
    this.#stopped = false;
    void this.#tick();
  }

  /** Stops campaigning; a leader within its deadline releases the Lease so a peer takes over at once. */
  async stop(): Promise<void> {
    this.#stopped = true;
    this.#clearTimers();
    const release = this.isLeader;
    this.#leading = false;
    if (!release) return;
    this.#opts.log.info({ lease: this.#leaseName() }, 'Stopped leading: releasing the Lease');
    try {
      await this.#bounded(this.#validUntil - this.#clock.now(), async (signal) => {
        const lease = await this.#store.read(signal);
        if (lease?.spec?.holderIdentity !== this.#opts.identity) return;
        // An empty holder is free for anyone at once; client-go releases the same way.
        const spec: k8s.V1LeaseSpec = {
          ...lease.spec,
          holderIdentity: undefined,
          leaseDurationSeconds: 1,
          renewTime: new k8s.V1MicroTime(Date.now()),
        };
        await this.#store.replace({ ...lease, spec }, signal);
      });
    } catch (err) {
      this.#opts.log.warn({ err }, 'Could not release the leader Lease; it expires by itself');
    }
  }

  async #tick(): Promise<void> {
    this.#checkDeadline();
    if (this.#stopped) return;
    // A renewal is valid from the moment its round began: a peer sees it later than that, never earlier.
    const began = this.#clock.now();
    const beganWall = Date.now();
    const round = await this.#round(this.#leading ? this.#validUntil - began : this.#opts.renewDeadlineMs);
    if (this.#stopped) return;
    if (round?.outcome === 'held') this.#renewed(began, beganWall);
    else if (round?.outcome === 'other' && this.#leading) this.#lapse(`the Lease is held by ${round.holder}`);
    if (this.#stopped) return;
    this.#tickTimer = this.#clock.setTimeout(() => void this.#tick(), this.#opts.retryPeriodMs);
  }

  /** One attempt to take or renew the Lease within `timeoutMs`; undefined when it failed. */
  async #round(timeoutMs: number): Promise<Round | undefined> {
    try {
      return await this.#bounded(timeoutMs, (signal) => this.#tryAcquireOrRenew(signal));
    } catch (err) {
      if (this.#leading) this.#opts.log.warn({ err, lease: this.#leaseName() }, 'Could not renew the leader Lease');
      else this.#opts.log.debug({ err, lease: this.#leaseName() }, 'Leader election round failed');
      return undefined;
    }
  }

  #renewed(began: number, beganWall: number): void {
    const validUntil = began + this.#opts.renewDeadlineMs;
    // The round itself outlasted the deadline (a pause mid-request): this renewal cannot be relied on.
    if (this.#clock.now() >= validUntil) {
      if (this.#leading) this.#lapse('the renewal came back after the renew deadline');
      return;
    }
    this.#validUntil = validUntil;
    this.#validUntilWall = beganWall + this.#opts.renewDeadlineMs;
    this.#clock.clearTimeout(this.#deadlineTimer);
    this.#deadlineTimer = this.#clock.setTimeout(() => this.#checkDeadline(), validUntil - this.#clock.now());
    if (this.#leading) return;
    this.#leading = true;
    this.#opts.log.info({ lease: this.#leaseName(), identity: this.#opts.identity }, 'Started leading');
    this.#opts.onStartedLeading();
  }

  #checkDeadline(): void {
    if (this.#leading && this.#clock.now() >= this.#validUntil) this.#lapse('no renewal within the renew deadline');
  }

  #lapse(reason: string): void {
    this.#leading = false;
    this.#lapsed = true;
    this.#stopped = true;
    this.#clearTimers();
    // Requests are refused from now on, or from the deadline if it passed unnoticed (a pause).
    const actingUntil = new Date(Math.min(Date.now(), this.#validUntilWall)).toISOString();
    this.#opts.log.error(
      { lease: this.#leaseName(), identity: this.#opts.identity, reason, actingUntil },
      'Stopped leading',
    );
    this.#opts.onStoppedLeading(reason);
  }

  async #tryAcquireOrRenew(signal: AbortSignal): Promise<Round> {
    const { identity, leaseDurationMs, namespace, name } = this.#opts;
    const lease = await this.#store.read(signal);
    if (!lease) {
      const spec = nextLeaseSpec(undefined, identity, leaseDurationMs, Date.now());
      await this.#store.create({ metadata: { name, namespace }, spec }, signal).catch((err: unknown) => {
        throw isAlreadyExists(err) ? new Error('another candidate created the Lease first', { cause: err }) : err;
      });
      return { outcome: 'held' };
    }
    const holder = lease.spec?.holderIdentity;
    const unchangedForMs = this.#observe(lease.spec);
    if (holder && holder !== identity && !heldExpired(lease.spec, unchangedForMs, leaseDurationMs))
      return { outcome: 'other', holder };
    // replace carries the resourceVersion we read: a racing replica's write makes ours fail with 409.
    await this.#store.replace(
      { ...lease, spec: nextLeaseSpec(lease.spec, identity, leaseDurationMs, Date.now()) },
      signal,
    );
    return { outcome: 'held' };
  }

  /** Records the Lease record as seen now; returns how long (monotonic) it has been seen unchanged. */
  #observe(spec: k8s.V1LeaseSpec | undefined): number {
    const record = JSON.stringify([
      spec?.holderIdentity,
      spec?.renewTime,
      spec?.acquireTime,
      spec?.leaseDurationSeconds,
      spec?.leaseTransitions,
    ]);
    const now = this.#clock.now();
    if (this.#observed?.record !== record) this.#observed = { record, at: now };
    return now - this.#observed.at;
  }

  /** Runs `fn` with a signal that aborts its requests after `ms`. */
  async #bounded<T>(ms: number, fn: (signal: AbortSignal) => Promise<T>): Promise<T> {
    const controller = new AbortController();
    const timer = this.#clock.setTimeout(
      () => controller.abort(new Error(`no answer within ${ms} ms`)),
      Math.max(0, ms),
    );
    try {
      return await fn(controller.signal);
    } finally {
      this.#clock.clearTimeout(timer);
    }
  }

  #clearTimers(): void {
    this.#clock.clearTimeout(this.#tickTimer);
    this.#clock.clearTimeout(this.#deadlineTimer);
  }

  #leaseName(): string {
    return `${this.#opts.namespace}/${this.#opts.name}`;
  }
}

/**
 * Whether another holder's lease has run out: its record has not changed for its lease duration, counted
 * from when this replica saw it change (`unchangedForMs`), not from the holder's own clock.
 */
function heldExpired(spec: k8s.V1LeaseSpec | undefined, unchangedForMs: number, defaultDurationMs: number): boolean {
  const durationMs = spec?.leaseDurationSeconds ? spec.leaseDurationSeconds * 1000 : defaultDurationMs;
  return unchangedForMs > durationMs;
}

/** The Lease spec `identity` writes when it takes or renews the Lease. Times are wall time, for people to read. */
export function nextLeaseSpec(
  current: k8s.V1LeaseSpec | undefined,
  identity: string,
  leaseDurationMs: number,
  wallNow: number,
): k8s.V1LeaseSpec {
  const { holderIdentity: holder, acquireTime, leaseTransitions = 0 } = current ?? {};
  const mine = holder === identity;
  return {
    holderIdentity: identity,
    leaseDurationSeconds: Math.ceil(leaseDurationMs / 1000),
    // Lease times are MicroTime on the wire (6 fractional digits); a plain Date would be refused.
    renewTime: new k8s.V1MicroTime(wallNow),
    acquireTime: new k8s.V1MicroTime(mine && acquireTime ? new Date(acquireTime).getTime() : wallNow),
    // A takeover from another holder counts as a transition; a first acquisition or a renewal does not.
    leaseTransitions: leaseTransitions + (mine || !holder ? 0 : 1),
  };
}
