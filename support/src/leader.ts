/**
 * Lease-based leader election (coordination.k8s.io/v1), as client-go does it: acquire the Lease when it is
 * free or expired, renew it every retry period, and step down when renewals fail for longer than the renew
 * deadline, so two replicas never act as leader at once for longer than the lease allows.
 */
import * as k8s from '@kubernetes/client-node';
import type { Logger } from './logger.js';
import { isAlreadyExists, isNotFound } from './errors.js';
import { realClock, type Clock } from './timers.js';

export interface LeaderElectionOptions {
  kubeConfig: k8s.KubeConfig;
  namespace: string;
  name: string;
  identity: string;
  log: Logger;
  leaseDurationMs?: number;
  renewDeadlineMs?: number;
  retryPeriodMs?: number;
  clock?: Clock;
  onStartedLeading: () => void;
  onStoppedLeading: () => void;
}

export class LeaderElector {
  #opts: Required<Omit<LeaderElectionOptions, 'clock'>> & { clock: Clock };
  #api: k8s.CoordinationV1Api;
  #leading = false;
  #lastRenew = 0;
  #timer: unknown;
  #stopped = false;

  constructor(opts: LeaderElectionOptions) {
    this.#opts = { leaseDurationMs: 15_000, renewDeadlineMs: 10_000, retryPeriodMs: 2_000, clock: realClock, ...opts };
    this.#api = opts.kubeConfig.makeApiClient(k8s.CoordinationV1Api);
  }

  get isLeader(): boolean {
    return this.#leading;
  }

  start(): void {
    this.#stopped = false;
    void this.#tick();
  }

  /** Stops campaigning; a leader releases the Lease so another replica takes over at once. */
  async stop(): Promise<void> {
    this.#stopped = true;
    this.#opts.clock.clearTimeout(this.#timer);
    if (!this.#leading) return;
    this.#setLeading(false);
    try {
      const lease = await this.#api.readNamespacedLease({ name: this.#opts.name, namespace: this.#opts.namespace });
      if (lease.spec?.holderIdentity === this.#opts.identity) {
        lease.spec.holderIdentity = undefined;
        lease.spec.acquireTime = undefined;
        lease.spec.renewTime = undefined;
        await this.#api.replaceNamespacedLease({ name: this.#opts.name, namespace: this.#opts.namespace, body: lease });
      }
    } catch (err) {
      this.#opts.log.warn({ err }, 'Could not release the leader Lease; it expires by itself');
    }
  }

  async #tick(): Promise<void> {
    if (this.#stopped) return;
    const { clock, retryPeriodMs, renewDeadlineMs } = this.#opts;
    try {
      const acquired = await this.#tryAcquireOrRenew();
      if (acquired) this.#lastRenew = clock.now();
      if (acquired !== this.#leading && (acquired || clock.now() - this.#lastRenew > renewDeadlineMs)) this.#setLeading(acquired);
    } catch (err) {
      this.#opts.log.warn({ err }, 'Leader election round failed');
      if (this.#leading && clock.now() - this.#lastRenew > renewDeadlineMs) this.#setLeading(false);
    }
    if (!this.#stopped) this.#timer = clock.setTimeout(() => void this.#tick(), retryPeriodMs);
  }

  #setLeading(leading: boolean): void {
    this.#leading = leading;
    this.#opts.log.info({ lease: `${this.#opts.namespace}/${this.#opts.name}`, leading }, leading ? 'Became leader' : 'Stopped leading');
    if (leading) this.#opts.onStartedLeading();
    else this.#opts.onStoppedLeading();
  }

  async #tryAcquireOrRenew(): Promise<boolean> {
    const { name, namespace, identity, leaseDurationMs, clock } = this.#opts;
    const now = clock.now();
    let lease: k8s.V1Lease;
    try {
      lease = await this.#api.readNamespacedLease({ name, namespace });
    } catch (err) {
      if (!isNotFound(err)) throw err;
      return this.#create(nextLeaseSpec(undefined, identity, leaseDurationMs, now) as k8s.V1LeaseSpec);
    }
    const spec = nextLeaseSpec(lease.spec, identity, leaseDurationMs, now);
    if (spec === undefined) return false;
    // replace carries the resourceVersion we read: a racing replica's write makes ours fail with 409.
    await this.#api.replaceNamespacedLease({ name, namespace, body: { ...lease, spec } });
    return true;
  }

  async #create(spec: k8s.V1LeaseSpec): Promise<boolean> {
    const { name, namespace } = this.#opts;
    try {
      await this.#api.createNamespacedLease({ namespace, body: { metadata: { name, namespace }, spec } });
      return true;
    } catch (err) {
      if (isAlreadyExists(err)) return false;
      throw err;
    }
  }
}

function heldByAnother(current: k8s.V1LeaseSpec | undefined, identity: string, now: number): boolean {
  const { holderIdentity: holder, renewTime, leaseDurationSeconds = 0 } = current ?? {};
  if (!holder || holder === identity) return false;
  return (renewTime ? new Date(renewTime).getTime() : 0) + leaseDurationSeconds * 1000 >= now;
}

/**
 * The Lease spec this candidate writes next, or undefined when another holder's lease is still valid.
 * Pure, so the takeover rules are tested without a cluster.
 */
export function nextLeaseSpec(current: k8s.V1LeaseSpec | undefined, identity: string, leaseDurationMs: number, now: number): k8s.V1LeaseSpec | undefined {
  if (heldByAnother(current, identity, now)) return undefined;
  const { holderIdentity: holder, acquireTime, leaseTransitions = 0 } = current ?? {};
  const mine = holder === identity;
  return {
    holderIdentity: identity,
    leaseDurationSeconds: Math.ceil(leaseDurationMs / 1000),
    renewTime: new k8s.V1MicroTime(now),
    // Lease times are MicroTime on the wire (6 fractional digits); a plain Date would be refused.
    acquireTime: new k8s.V1MicroTime(mine && acquireTime ? new Date(acquireTime).getTime() : now),
    // A takeover from another holder counts as a transition; a first acquisition or a renewal does not.
    leaseTransitions: leaseTransitions + (mine || !holder ? 0 : 1),
  };
}
