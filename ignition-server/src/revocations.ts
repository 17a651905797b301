/**
 * The leader's deletions of guest bootstrap tokens, on one retrying queue: those of a deleted token Secret (the
 * guest's tokencleaner would delete them only at their expiry), and the one minted for a token-Secret patch that
 * failed, once unmint-decision.ts says that patch surely did not commit. The guest is the tenant's: a deletion
 * there is retried with backoff here, off the leader's passes, and a guest that hangs holds no leader worker.
 *
 * Every deletion has an end: a bootstrap token past its expiry lets no host join and the guest's tokencleaner
 * deletes it, and a cluster whose kubeconfig Secret is gone (deleted with the cluster) or refused has no guest
 * this server will ever reach. Without that end, each torn-down cluster left an entry retried for good.
 */
import { createHash } from 'node:crypto';
import type * as k8s from '#k8s';
import { SECRET_KEYS } from '../../api/src/keys.js';
import type { ReconcileResult, WorkQueue } from '../../support/src/queue.js';
import type { Logger } from '../../support/src/logger.js';
import { isNotFound } from '../../support/src/errors.js';
import { findKubeconfigRefusal } from '../../support/src/guest-kubeconfig-parse.js';
import { parseKey } from '../../support/src/object-key.js';
import type { Clock } from '../../support/src/timers.js';
import { findGuestKubeconfigError, type GuestJoin } from './join.js';
import { decideUnmint, type FailedPatch, type ReadBack, type SettledDecision } from './unmint-decision.js';
import { decode } from './token-index.js';

type SettledReason = Exclude<SettledDecision, { action: 'wait' }>['reason'];

/** Bootstrap tokens to delete from one guest. */
export interface Revocation {
  namespace: string;
  cluster: string;
  tokens: string[];
  /**
   * When the last of the tokens expires (bootstrapTokensExpireAtMs): past it, nothing is left to delete. Unknown:
   * the TTL from now, which no token minted before now outlives.
   */
  expiresAtMs?: number;
}

/** A revocation as it waits on the queue: its end known. */
export type PendingRevocation = Required<Revocation>;

/** --token-ttl's default, for a caller that does not say its TTL. */
const DEFAULT_TOKEN_TTL_MS = 11 * 3_600_000;

/**
 * When the bootstrap tokens of a token Secret stop working: the newer was minted with the Secret's current token,
 * at its issue time and for the TTL (which tokens.ts rounds up to whole seconds); the rotated one, before it.
 */
export const bootstrapTokensExpireAtMs = (issuedAtMs: number, ttlMs: number): number =>
  issuedAtMs + Math.max(1, Math.ceil(ttlMs / 1000)) * 1000;

/**
 * When a deleted token Secret's bootstrap tokens are surely gone by themselves: the current one's expiry (the rotated
 * one was minted before it). The issue time is an annotation a tenant may edit, and no token minted before now
 * outlives a TTL from now.
 */
export function revocationEndMs(issuedAtMs: number | undefined, ttlMs: number, nowMs: number): number {
  const latest = bootstrapTokensExpireAtMs(nowMs, ttlMs);
  return issuedAtMs === undefined ? latest : Math.min(bootstrapTokensExpireAtMs(issuedAtMs, ttlMs), latest);
}

/** Why a deleted token Secret's bootstrap tokens are left to the guest. */
type GiveUpReason =
  /** Past their expiry: no host can join with them any more, and the guest's tokencleaner deletes them. */
  | 'Expired'
  /** The cluster's kubeconfig Secret is gone (the cluster is being deleted): there is no guest left to reach. */
  | 'KubeconfigMissing'
  /** The cluster's kubeconfig is refused (guest-kubeconfig-parse.ts): this server never reaches that guest. */
  | 'KubeconfigRefused';

/** What a failed deletion says of the guest: its kubeconfig is missing or refused, or anything else. */
export type GuestFailure = Exclude<GiveUpReason, 'Expired'> | 'Failed';

export type RevokeDecision = { action: 'revoke' } | { action: 'give-up'; reason: GiveUpReason } | { action: 'retry' };

/** What a failed deletion says of the guest; only the kubeconfig's own failures are sure to last. */
export function guestFailureOf(err: unknown): GuestFailure {
  if (findKubeconfigRefusal(err)) return 'KubeconfigRefused';
  // The guest's own 404s (a token deleted already) count as done in join.ts: a 404 here is the kubeconfig Secret's.
  if (findGuestKubeconfigError(err) && isNotFound(err)) return 'KubeconfigMissing';
  return 'Failed';
}

/** Delete the tokens, give up on them, or (after a failure) try again with backoff. */
export function decideRevoke(input: { expiresAtMs: number; nowMs: number; failure?: GuestFailure }): RevokeDecision {
  const { expiresAtMs, nowMs, failure } = input;
  if (failure !== undefined && failure !== 'Failed') return { action: 'give-up', reason: failure };
  if (nowMs >= expiresAtMs) return { action: 'give-up', reason: 'Expired' };
  return failure === undefined ? { action: 'revoke' } : { action: 'retry' };
}

/** A time for a log line; one past Date's range stays a number rather than throw. */
const isoOf = (ms: number): string => (Number.isNaN(new Date(ms).getTime()) ? String(ms) : new Date(ms).toISOString());

const sameGuest = (a: Revocation, b: Revocation): boolean => a.namespace === b.namespace && a.cluster === b.cluster;

/** A key's pending deletions with one more: one per guest, their tokens merged, the later end kept. */
export function withRevocation(pending: readonly PendingRevocation[], next: PendingRevocation): PendingRevocation[] {
  const same = pending.find((p) => sameGuest(p, next));
  if (!same) return [...pending, next];
  const tokens = [...new Set([...same.tokens, ...next.tokens])];
  const merged = { ...same, tokens, expiresAtMs: Math.max(same.expiresAtMs, next.expiresAtMs) };
  return pending.map((p) => (p === same ? merged : p));
}

/** A key's pending deletions once `done`'s tokens are settled: tokens added while they were being deleted stay. */
export function withoutSettled(pending: readonly PendingRevocation[], done: Revocation): PendingRevocation[] {
  return pending.flatMap((p) => {
    if (!sameGuest(p, done)) return [p];
    const tokens = p.tokens.filter((t) => !done.tokens.includes(t));
    return tokens.length === 0 ? [] : [{ ...p, tokens }];
  });
}

/** A bootstrap token minted into the guest for a token-Secret patch that failed. */
export interface FailedMint {
  /** The token Secret's key, `namespace/name`. */
  secret: string;
  cluster: string;
  token: string;
  /** When the minted token expires: past it, nothing is left to delete. */
  expiresAtMs: number;
  patch: FailedPatch;
}

export interface BootstrapRevocationsDeps {
  core: k8s.CoreV1Api;
  join?: GuestJoin;
  clock: Clock;
  log: Logger;
  /** The token TTL: a revocation without its expiry ends that long from when it came. */
  ttlMs?: number;
  /** Makes the retrying queue that runs `reconcile` for each key added (the controller's kind of queue). */
  queue(reconcile: (key: string) => Promise<ReconcileResult | void>): WorkQueue;
}

/**
 * A failed mint's queue key: the Secret's key and a hash of the token, so it never collides with the Secret's
 * own revocation (a name holds no `#`) nor with another failed mint of it, and the queue's lines show no token.
 */
const mintKey = (mint: FailedMint): string =>
  `${mint.secret}#unmint-${createHash('sha256').update(mint.token).digest('hex').slice(0, 16)}`;

/** The line of each way a failed mint ends. */
const SETTLED: Readonly<Record<SettledReason, string>> = Object.freeze({
  PatchRefused: 'Deleted from the guest the bootstrap token of a mint whose token Secret patch was refused',
  SecretGone: 'Deleted from the guest the bootstrap token of a mint whose token Secret is gone',
  Superseded: 'Deleted from the guest the bootstrap token of a mint whose token Secret moved on without it',
  NeverCommitted: 'Deleted from the guest the bootstrap token of a mint whose token Secret patch never committed',
  Recorded: 'Kept the bootstrap token of a mint whose token Secret patch got no answer: the Secret records it',
  Expired: 'Gave up deleting the bootstrap token of a failed mint: it has expired, the guest deletes it',
});

/** The line of each way a deleted token Secret's bootstrap tokens are left to the guest. */
const GAVE_UP: Readonly<Record<GiveUpReason, string>> = Object.freeze({
  Expired: 'Gave up deleting the bootstrap tokens of a deleted token Secret: they have expired, the guest deletes them',
  KubeconfigMissing:
    'Gave up deleting the bootstrap tokens of a deleted token Secret: the kubeconfig Secret of its cluster is gone',
  KubeconfigRefused:
    'Gave up deleting the bootstrap tokens of a deleted token Secret: the kubeconfig of its cluster is refused',
});

export class BootstrapRevocations {
  readonly #deps: BootstrapRevocationsDeps;
  readonly #queue: WorkQueue;
  /** Bootstrap tokens of deleted token Secrets, by Secret key (one entry per guest), until deleted or given up. */
  readonly #deleted = new Map<string, PendingRevocation[]>();
  /** Failed mints, by mintKey, until their token is deleted from the guest or found recorded. */
  readonly #mints = new Map<string, FailedMint>();

  constructor(deps: BootstrapRevocationsDeps) {
    this.#deps = deps;
    this.#queue = deps.queue((key) => this.#reconcile(key));
  }

  /**
   * The token Secret `key` is going: its bootstrap tokens are to be deleted from the guest. A Secret of the same
   * name deleted again while the first is pending adds its tokens: the first's are still valid in the guest.
   */
  secretDeleted(key: string, revocation: Revocation): void {
    const { clock, ttlMs = DEFAULT_TOKEN_TTL_MS } = this.#deps;
    // A NaN or infinite end would never come: the entry would be retried for good again.
    const given = revocation.expiresAtMs;
    const expiresAtMs =
      given !== undefined && Number.isFinite(given) ? given : bootstrapTokensExpireAtMs(clock.now(), ttlMs);
    const next = { ...revocation, tokens: [...revocation.tokens], expiresAtMs };
    this.#deleted.set(key, withRevocation(this.#deleted.get(key) ?? [], next));
    this.#queue.add(key);
  }

  /** A patch after a mint failed: its bootstrap token is deleted once the patch surely did not commit. */
  failedMint(mint: FailedMint): void {
    const key = mintKey(mint);
    this.#mints.set(key, mint);
    this.#queue.add(key);
  }

  /** Resolves when nothing is queued or running (delayed looks aside): for tests. */
  drained(): Promise<void> {
    return this.#queue.drained();
  }

  /** Stops the queue; what it still held stays in the guest until its expiry, which the line says. */
  async stop(): Promise<void> {
    await this.#queue.stop();
    const pending = this.#mints.size + this.#deleted.size;
    if (pending > 0)
      this.#deps.log.warn(
        { pending },
        'Stopped with bootstrap tokens still to delete from guests: they stay valid there until their expiry',
      );
  }

  #reconcile(key: string): Promise<ReconcileResult | void> {
    const mint = this.#mints.get(key);
    return mint ? this.#settle(key, mint) : this.#revokeDeleted(key);
  }

  /** Each guest's deletion of the key in turn; the first failure still to retry fails the whole, for backoff. */
  async #revokeDeleted(key: string): Promise<void> {
    let failure: Error | undefined;
    for (const revocation of this.#deleted.get(key) ?? []) {
      try {
        await this.#revokeOne(key, revocation);
      } catch (err) {
        failure ??= err instanceof Error ? err : new Error('failed to delete bootstrap tokens', { cause: err });
      }
    }
    if (failure) throw failure;
  }

  async #revokeOne(key: string, revocation: PendingRevocation): Promise<void> {
    const { join, clock, log } = this.#deps;
    const { namespace, cluster, tokens, expiresAtMs } = revocation;
    const fields = { secret: key, cluster: `${namespace}/${cluster}`, expiresAt: isoOf(expiresAtMs) };
    let decision = decideRevoke({ expiresAtMs, nowMs: clock.now() });
    if (decision.action === 'revoke' && join) {
      try {
        await join.revoke({ namespace, cluster, tokens });
        this.#settled(key, revocation);
        log.info(fields, 'Deleted the bootstrap tokens of a deleted token Secret');
        return;
      } catch (err) {
        decision = decideRevoke({ expiresAtMs, nowMs: clock.now(), failure: guestFailureOf(err) });
        if (decision.action === 'retry') throw err;
      }
    }
    this.#settled(key, revocation);
    // Without the guest join no token was minted into any guest: nothing to say.
    if (decision.action !== 'give-up') return;
    const line = { ...fields, reason: decision.reason };
    if (decision.reason === 'KubeconfigRefused') log.warn(line, GAVE_UP[decision.reason]);
    else log.info(line, GAVE_UP[decision.reason]);
  }

  #settled(key: string, revocation: PendingRevocation): void {
    const rest = withoutSettled(this.#deleted.get(key) ?? [], revocation);
    if (rest.length === 0) this.#deleted.delete(key);
    else this.#deleted.set(key, rest);
  }

  /** Deletes a failed mint's token, keeps it, or looks again later (the requeue) while the outcome is unknown. */
  async #settle(key: string, mint: FailedMint): Promise<ReconcileResult | void> {
    const { join, clock, log } = this.#deps;
    const { namespace } = parseKey(mint.secret);
    const facts = { patch: mint.patch, token: mint.token, expiresAtMs: mint.expiresAtMs };
    let decision = decideUnmint({ ...facts, nowMs: clock.now() });
    if (decision.action === 'read')
      decision = decideUnmint({ ...facts, current: await this.#readBack(mint.secret), nowMs: clock.now() });
    if (decision.action === 'wait') return { requeueAfterMs: decision.afterMs };
    // A mint implies the guest join; without it there is nothing in any guest to delete.
    if (decision.action === 'revoke') await join?.revoke({ namespace, cluster: mint.cluster, tokens: [mint.token] });
    this.#mints.delete(key);
    log.info(
      { secret: mint.secret, cluster: `${namespace}/${mint.cluster}`, reason: decision.reason },
      SETTLED[decision.reason],
    );
  }

  /** The Secret as the apiserver holds it now: its version and its two bootstrap-token slots, or gone. */
  async #readBack(secretKey: string): Promise<ReadBack> {
    const { name, namespace } = parseKey(secretKey);
    try {
      const secret = await this.#deps.core.readNamespacedSecret({ name, namespace });
      return {
        gone: false,
        resourceVersion: secret.metadata?.resourceVersion,
        bootstrapToken: decode(secret.data, SECRET_KEYS.bootstrapToken),
        rotatedBootstrapToken: decode(secret.data, SECRET_KEYS.rotatedBootstrapToken),
      };
    } catch (err) {
      if (isNotFound(err)) return { gone: true };
      throw new Error('failed to read the token Secret back after a failed patch', { cause: err });
    }
  }
}
