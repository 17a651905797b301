/**
 * The leader's deletions of guest bootstrap tokens, on one retrying queue: those of a deleted token Secret (the
 * guest's tokencleaner would delete them only at their expiry), and the one minted for a token-Secret patch that
 * failed, once unmint-decision.ts says that patch surely did not commit. The guest is the tenant's: a deletion
 * there is retried with backoff here, off the leader's passes, and a guest that hangs holds no leader worker.
 */
import { createHash } from 'node:crypto';
import type * as k8s from '#k8s';
import { SECRET_KEYS } from '../../api/src/keys.js';
import type { ReconcileResult, WorkQueue } from '../../support/src/queue.js';
import type { Logger } from '../../support/src/logger.js';
import { isNotFound } from '../../support/src/errors.js';
import { parseKey } from '../../support/src/object-key.js';
import type { Clock } from '../../support/src/timers.js';
import type { GuestJoin } from './join.js';
import { decideUnmint, type FailedPatch, type ReadBack, type SettledDecision } from './unmint-decision.js';
import { decode } from './token-index.js';

type SettledReason = Exclude<SettledDecision, { action: 'wait' }>['reason'];

/** Bootstrap tokens to delete from one guest. */
export interface Revocation {
  namespace: string;
  cluster: string;
  tokens: string[];
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

export class BootstrapRevocations {
  readonly #deps: BootstrapRevocationsDeps;
  readonly #queue: WorkQueue;
  /** Bootstrap tokens of deleted token Secrets, by Secret key, until deleted from the guest. */
  readonly #deleted = new Map<string, Revocation>();
  /** Failed mints, by mintKey, until their token is deleted from the guest or found recorded. */
  readonly #mints = new Map<string, FailedMint>();

  constructor(deps: BootstrapRevocationsDeps) {
    this.#deps = deps;
    this.#queue = deps.queue((key) => this.#reconcile(key));
  }

  /** The token Secret `key` is going: its bootstrap tokens are to be deleted from the guest. */
  secretDeleted(key: string, revocation: Revocation): void {
    this.#deleted.set(key, revocation);
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

  async #revokeDeleted(key: string): Promise<void> {
    const revocation = this.#deleted.get(key);
    if (!revocation || !this.#deps.join) return;
    await this.#deps.join.revoke(revocation);
    this.#deleted.delete(key);
    this.#deps.log.info(
      { secret: key, cluster: `${revocation.namespace}/${revocation.cluster}` },
      'Deleted the bootstrap tokens of a deleted token Secret',
    );
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
