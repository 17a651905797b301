/**
 * The leader's writes to the token Secrets (only the leader writes): it mints the first token and rotates it at
 * TTL/2 (the old token moves to the rotated slot and stays valid until its own expiry) with the guest bootstrap
 * token paired to it, writes the generation outcome, deletes a Secret once its expiry has passed, and reports
 * refusals, rotations and failed generations as Events. Each pass is one merge patch guarded by the
 * resourceVersion it was computed from, and is computed only from a copy that already carries this leader's last
 * patch of the Secret: a pass on an older copy would see no token and mint a second one. A mint whose patch
 * fails hands its bootstrap token to the controller's revoke queue, which deletes it from the guest once the
 * patch surely did not commit (unmint-decision.ts).
 */
import * as k8s from '#k8s';
import { ANNOTATIONS, SECRET_KEYS } from '../../api/src/keys.js';
import type { ReconcileResult } from '../../support/src/queue.js';
import type { Logger } from '../../support/src/logger.js';
import { secretRef, type Applier } from '../../support/src/apply.js';
import { isNotFound, neverReachedServer, statusCode } from '../../support/src/errors.js';
import type { Clock } from '../../support/src/timers.js';
import type { TokenAuthority } from './tokens.js';
import type { TokenIndex, TokenSecret } from './token-index.js';
import type { IgnitionMetrics } from './metrics.js';
import { EVENT_REASONS, type TokenSecretEvents } from './events.js';
import type { GuestJoin } from './join.js';
import type { TokenSecretRefusal } from './token-secret-decision.js';
import { parseKey } from '../../support/src/object-key.js';
import type { FailedMint } from './revocations.js';
import { patchRefused, settledAtMs, type FailedPatch } from './unmint-decision.js';

/** A token Secret the server does not act on, and why. */
export interface Refused {
  secret: TokenSecret;
  reason: TokenSecretRefusal;
  message: string;
  /** When it was first refused (for this reason). */
  sinceMs: number;
}

/**
 * How long a refusal stands before the leader records it as a Warning Event. A token Secret the nodepool-controller
 * has just written can reach this server before its pool's latest status does, and is refused until the pool's
 * event admits it: that is no news for anyone. A hand-written Secret stays refused, and is reported.
 */
const REFUSAL_SETTLE_MS = 5_000;

/**
 * How long a pass that found a copy older than this leader's last patch waits before it looks again. The patch's
 * watch echo wakes the Secret before then; this is only in case it never comes (the Secret deleted meanwhile).
 */
const ECHO_WAIT_MS = 1_000;

/** The furthest ahead of the leader's clock an issue time may be and still be one a replica wrote. */
const ISSUED_AHEAD_MS = 5 * 60_000;

/**
 * A Retired Secret with its pool's cluster, for the deletion of its bootstrap tokens once it goes: its owner was
 * checked, so the pool is its own, and the cluster is the pool's, not the Secret's label, which a tenant writes.
 */
export function retiredSecret(
  refused: Refused | undefined,
  pools: { get(namespace: string, name: string): { spec: { clusterName: string } } | undefined },
): TokenSecret | undefined {
  const owner = refused?.reason === 'Retired' ? refused.secret.owner : undefined;
  const cluster = owner && pools.get(refused?.secret.namespace ?? '', owner.name)?.spec.clusterName;
  return refused && cluster ? { ...refused.secret, cluster } : undefined;
}

export interface LeaderWritesDeps {
  core: k8s.CoreV1Api;
  /** The token Secrets' patches go through it (as the wire has them: no model on either side). */
  applier: Pick<Applier, 'mergePatch'>;
  authority: TokenAuthority;
  index: TokenIndex;
  ttlMs: number;
  join?: GuestJoin;
  metrics?: IgnitionMetrics;
  events: TokenSecretEvents;
  clock: Clock;
  log: Logger;
  /** The Secret as the informer last saw it, its data read first when only its metadata is known. */
  current(key: string): Promise<TokenSecret | undefined>;
  refused(key: string): Refused | undefined;
  /** The Secret is going: its bootstrap tokens are to be deleted from the guest. */
  forgetBootstrap(key: string): void;
  /** A patch after a mint failed: its bootstrap token is to be deleted from the guest unless the patch committed. */
  unmint(mint: FailedMint): void;
}

type Patch = {
  data: Record<string, string>;
  annotations: Record<string, string>;
  /** The bootstrap token this pass wrote into the guest, and when it expires. */
  minted?: { bootstrapToken: string; expiresAtMs: number };
};

const b64 = (s: string): string => Buffer.from(s).toString('base64');
export const iso = (ms: number): string => new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');

export class LeaderWrites {
  readonly #deps: LeaderWritesDeps;
  /**
   * The resourceVersion each Secret's last patch was computed from, until a copy other than that one is seen:
   * the informer's copy can still be the one the patch was computed from when the next pass runs (the payload's
   * generation finishing right after the mint wakes it before the patch's echo has arrived). A mint's patch
   * whose outcome is unknown (no answer, a 5xx) may have committed too: its entry also ends once it surely did
   * not (`untilMs`), so a patch that never committed does not hold the Secret back for good.
   */
  readonly #patchedFrom = new Map<string, { version: string; untilMs?: number }>();

  constructor(deps: LeaderWritesDeps) {
    this.#deps = deps;
  }

  /** The leader's pass over one token Secret: expire, mint or rotate, report the payload; then wait. */
  async reconcile(key: string): Promise<ReconcileResult | void> {
    const refused = this.#deps.refused(key);
    if (refused?.reason === 'Retired') return this.#retired(refused.secret);
    if (refused) return this.#recordRefusal(refused);
    const secret = await this.#deps.current(key);
    if (!secret) return void this.#patchedFrom.delete(key);
    const now = this.#deps.clock.now();
    const echoWait = this.#beforeOwnPatch(secret, now);
    if (echoWait !== undefined) return { requeueAfterMs: echoWait };
    if (secret.expiresAtMs !== undefined && secret.expiresAtMs <= now) return this.#delete(secret);
    const patch: Patch = { data: {}, annotations: {} };
    const rotateAt = await this.#tokenPatch(secret, now, patch);
    this.#payloadPatch(secret, patch);
    if (Object.keys(patch.data).length + Object.keys(patch.annotations).length > 0) await this.#patch(secret, patch);
    await this.#recordEvents(secret, patch);
    const waits = [rotateAt - now, (secret.expiresAtMs ?? Infinity) - now].filter((ms) => Number.isFinite(ms));
    return { requeueAfterMs: Math.max(50, Math.min(...waits) + 50) };
  }

  /**
   * How long to wait before looking again when the copy is the one this leader's last patch of the Secret was
   * computed from (its echo, which wakes the Secret sooner, not yet in); undefined when the pass may go on.
   */
  #beforeOwnPatch(secret: TokenSecret, now: number): number | undefined {
    const base = this.#patchedFrom.get(secret.key);
    if (base === undefined) return undefined;
    if (base.version !== secret.resourceVersion || (base.untilMs !== undefined && now >= base.untilMs)) {
      this.#patchedFrom.delete(secret.key);
      return undefined;
    }
    // An unknown outcome is looked at again when it is surely known: the echo of a patch that did commit wakes
    // the Secret sooner.
    return base.untilMs === undefined ? ECHO_WAIT_MS : base.untilMs - now;
  }

  /** A Secret its pool retired (token-secret-decision.ts): deleted at its expiry, as a served one is. */
  async #retired(secret: TokenSecret): Promise<ReconcileResult | void> {
    const wait = (secret.expiresAtMs ?? 0) - this.#deps.clock.now();
    if (wait > 0) return { requeueAfterMs: wait + 50 };
    await this.#delete(secret);
  }

  /** The Warning Event of a refusal that has stood its settling time (until then, a look again). */
  async #recordRefusal(refused: Refused): Promise<ReconcileResult | void> {
    const wait = refused.sinceMs + REFUSAL_SETTLE_MS - this.#deps.clock.now();
    if (wait > 0) return { requeueAfterMs: wait };
    const { secret, reason, message } = refused;
    await this.#deps.events.record(secret, { type: 'Warning', reason, message });
  }

  /** Mints or rotates into the patch when due; returns when the next rotation is due. */
  async #tokenPatch(secret: TokenSecret, now: number, patch: Patch): Promise<number> {
    const { ttlMs, authority, metrics, log } = this.#deps;
    const half = ttlMs / 2;
    const issued = secret.issuedAtMs;
    // An issue time well ahead of this clock was not written by a replica (theirs agree closer than that): a
    // tenant's edit, which would put off the rotation for as long as it likes. The token is rotated now instead.
    if (secret.token && issued !== undefined && issued <= now + ISSUED_AHEAD_MS && now < issued + half)
      return issued + half;
    const { token, claims } = await authority.mint({ pool: secret.pool, hash: secret.hash, ttlMs });
    patch.data[SECRET_KEYS.token] = b64(token);
    if (secret.token) {
      patch.data[SECRET_KEYS.rotatedToken] = b64(secret.token);
      metrics?.rotation();
    }
    patch.annotations[ANNOTATIONS.tokenIssuedAt] = iso(claims.issuedAtMs);
    await this.#joinPatch(secret, claims.expiresAtMs, patch);
    log.info(
      { secret: secret.key, nodePool: secret.pool, rotated: secret.token !== undefined },
      secret.token ? 'Rotated the token' : 'Minted the token',
    );
    return claims.issuedAtMs + half;
  }

  /**
   * The bootstrap token paired with a freshly minted token: written to the guest first, so no host ever holds
   * a token whose bootstrap token does not exist yet, and expiring with it. A guest that cannot be reached
   * fails the whole mint (retried with backoff): a token without join material would boot a host that
   * can never join.
   */
  async #joinPatch(secret: TokenSecret, expiresAtMs: number, patch: Patch): Promise<void> {
    const { join } = this.#deps;
    if (!secret.cluster || !join) return;
    const pool = parseKey(secret.pool).name;
    const minted = await join.mint({ namespace: secret.namespace, cluster: secret.cluster, pool, expiresAtMs });
    patch.minted = { bootstrapToken: minted.bootstrapToken, expiresAtMs };
    patch.data[SECRET_KEYS.bootstrapToken] = b64(minted.bootstrapToken);
    patch.data[SECRET_KEYS.joinServer] = b64(minted.server);
    patch.data[SECRET_KEYS.joinCa] = b64(minted.caPem);
    if (secret.bootstrapToken) patch.data[SECRET_KEYS.rotatedBootstrapToken] = b64(secret.bootstrapToken);
  }

  /** The leader's Events for what this pass did or found: a rotation, a failed generation. */
  async #recordEvents(secret: TokenSecret, patch: Patch): Promise<void> {
    const { events, index } = this.#deps;
    if (patch.data[SECRET_KEYS.rotatedToken] !== undefined) {
      await events.record(secret, {
        type: 'Normal',
        reason: EVENT_REASONS.rotated,
        message: 'Rotated the token; the previous one stays valid until its own expiry',
      });
    }
    const state = index.get(secret.key)?.payload;
    if (state?.state === 'failed')
      await events.record(secret, {
        type: 'Warning',
        reason: state.reason,
        message: `Payload generation failed: ${state.message}`,
      });
  }

  #payloadPatch(secret: TokenSecret, patch: Patch): void {
    const state = this.#deps.index.get(secret.key)?.payload;
    if (!state || state.state === 'pending') return;
    const reason = state.state === 'ready' ? 'AsExpected' : state.reason;
    const message =
      state.state === 'ready'
        ? `Payload ${state.key.slice(0, 12)} generated from ${secret.release}`
        : state.message.slice(0, 1000);
    if (secret.payloadReason === reason && secret.payloadMessage === message) return;
    patch.annotations[ANNOTATIONS.payloadReason] = reason;
    patch.annotations[ANNOTATIONS.payloadMessage] = message;
  }

  /**
   * A merge patch guarded by the resourceVersion it was computed from: a stale cache cannot rotate twice. A patch
   * that fails after a mint hands the minted bootstrap token to the revoke queue; one whose outcome is unknown
   * may still commit, so the copy it was computed from mints nothing more until that is known.
   */
  async #patch(secret: TokenSecret, patch: Patch): Promise<void> {
    const body = {
      metadata: { resourceVersion: secret.resourceVersion, annotations: patch.annotations },
      data: patch.data,
    };
    const sentAtMs = this.#deps.clock.now();
    let written: k8s.V1Secret;
    try {
      written = await this.#deps.applier.mergePatch(secretRef(secret), body);
    } catch (err) {
      const failed = { status: statusCode(err), neverSent: neverReachedServer(err) };
      this.#failed(secret, patch, { ...failed, baseVersion: secret.resourceVersion, sentAtMs });
      throw new Error('failed to patch the token Secret', { cause: err });
    }
    // A patch that changed nothing keeps the version: the copy it was computed from is then the latest.
    if (written.metadata?.resourceVersion !== secret.resourceVersion)
      this.#patchedFrom.set(secret.key, { version: secret.resourceVersion });
  }

  /** After a failed patch: the guard of a mint that may yet commit, and the minted bootstrap token's fate. */
  #failed(secret: TokenSecret, patch: Patch, failed: FailedPatch): void {
    const minted = patch.data[SECRET_KEYS.token] !== undefined;
    if (minted && !patchRefused(failed))
      this.#patchedFrom.set(secret.key, { version: failed.baseVersion, untilMs: settledAtMs(failed) });
    if (!patch.minted || !secret.cluster) return;
    const { bootstrapToken: token, expiresAtMs } = patch.minted;
    this.#deps.unmint({ secret: secret.key, cluster: secret.cluster, token, expiresAtMs, patch: failed });
  }

  async #delete(secret: TokenSecret): Promise<void> {
    const { core, index, events, log } = this.#deps;
    this.#deps.forgetBootstrap(secret.key);
    index.remove(secret.key);
    try {
      await core.deleteNamespacedSecret({
        name: secret.name,
        namespace: secret.namespace,
        body: { preconditions: { uid: secret.uid } },
      });
      log.info({ secret: secret.key, nodePool: secret.pool }, 'Deleted the expired token Secret');
      const message = `Deleted the token Secret: its expiry (${iso(secret.expiresAtMs ?? 0)}) has passed, so its tokens are refused`;
      await events.record(secret, { type: 'Normal', reason: EVENT_REASONS.expired, message });
    } catch (err) {
      if (!isNotFound(err)) throw new Error('failed to delete the expired token Secret', { cause: err });
    }
  }
}
