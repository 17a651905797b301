/**
 * What becomes of a guest bootstrap token minted for a token-Secret patch that failed: a pure function of the
 * failure and, when the failure does not settle it, of the Secret as the apiserver holds it now. Deleting a
 * token the Secret records leaves every new host of the pool unable to join until the next rotation; keeping
 * one no Secret records leaves a credential valid in the guest until its expiry. So it is deleted only once
 * the patch surely did not commit, and kept while that is not known.
 *
 * The patch carried the resourceVersion it was computed from as its precondition: once the Secret's version
 * has moved on, or the Secret is gone, the patch can no longer commit, and the Secret's data says whether it
 * did. Without an answer (our client gives up after 30 s) or with a 5xx, the apiserver may still be working on
 * it: while the version stands, the outcome is unknown until the apiserver's own request deadline has passed.
 */
import { API_REQUEST_TIMEOUT_MS } from '../../support/src/kubeconfig.js';

/**
 * How long after a patch was sent it has surely either committed or been dropped. Our client's deadline starts
 * before the request leaves (a stalled connection pool can hold it nearly that long), the apiserver then works on
 * it up to its own deadline (60 s by default), and 30 s more are left for an etcd write already proposed.
 */
export const PATCH_SETTLED_MS = API_REQUEST_TIMEOUT_MS + 60_000 + 30_000;
/** How often an unknown outcome is looked at again before PATCH_SETTLED_MS: the version may move sooner. */
export const RECHECK_MS = 10_000;

/**
 * The failed patch: the apiserver's answer (none: undefined), whether it surely never reached the apiserver (the
 * connection refused, the name not resolved), the version it was computed from, and when it went.
 */
export interface FailedPatch {
  status?: number;
  neverSent?: boolean;
  baseVersion: string;
  sentAtMs: number;
}

/** The Secret as read back: gone, or its version and the bootstrap tokens its two slots hold. */
export type ReadBack =
  { gone: true } | { gone: false; resourceVersion?: string; bootstrapToken?: string; rotatedBootstrapToken?: string };

type UnmintReason =
  /** An answer below 500 (a 409, a 422, a 403…), or no connection at all: the patch was not applied. */
  | 'PatchRefused'
  /** The token has expired: the guest's tokencleaner deletes it, and no host can join with it any more. */
  | 'Expired'
  /** The Secret is gone: the patch can no longer commit, and nothing records the token. */
  | 'SecretGone'
  /** The Secret's version moved past the patch's precondition and neither slot holds the token. */
  | 'Superseded'
  /** The version still stands after PATCH_SETTLED_MS: the patch never committed. */
  | 'NeverCommitted'
  /** A slot of the Secret holds the token: the patch committed, hosts join with it. */
  | 'Recorded'
  /** The version still stands within PATCH_SETTLED_MS: the patch may yet commit. */
  | 'OutcomeUnknown';

export type UnmintDecision =
  | { action: 'revoke'; reason: Exclude<UnmintReason, 'Recorded' | 'Expired' | 'OutcomeUnknown'> }
  | { action: 'keep'; reason: 'Recorded' | 'Expired' }
  | { action: 'wait'; reason: 'OutcomeUnknown'; afterMs: number }
  /** The answer does not settle it: read the Secret back and decide again with it. */
  | { action: 'read' };

export interface UnmintInput {
  patch: FailedPatch;
  /** The minted bootstrap token (compared, never kept in the decision). */
  token: string;
  /** When the minted token expires. */
  expiresAtMs: number;
  nowMs: number;
  /** The Secret as read back, once read. */
  current?: ReadBack;
}

/** When the failed patch has surely either committed or been dropped. */
export const settledAtMs = (patch: Pick<FailedPatch, 'sentAtMs'>): number => patch.sentAtMs + PATCH_SETTLED_MS;

/** Whether the failure says the patch was not applied (no read-back needed). */
export const patchRefused = (patch: Pick<FailedPatch, 'status' | 'neverSent'>): boolean =>
  patch.neverSent === true || (patch.status !== undefined && patch.status < 500);

/** A decision made with the Secret read back: never a read. */
export type SettledDecision = Exclude<UnmintDecision, { action: 'read' }>;

/** Delete, keep, look again later, or read the Secret back first. */
export function decideUnmint(input: UnmintInput & { current: ReadBack }): SettledDecision;
export function decideUnmint(input: UnmintInput): UnmintDecision;
export function decideUnmint({ patch, token, expiresAtMs, nowMs, current }: UnmintInput): UnmintDecision {
  // A guest that keeps refusing the deletion would otherwise keep the entry, retried, for good.
  if (nowMs >= expiresAtMs) return { action: 'keep', reason: 'Expired' };
  if (patchRefused(patch)) return { action: 'revoke', reason: 'PatchRefused' };
  if (!current) return { action: 'read' };
  if (current.gone) return { action: 'revoke', reason: 'SecretGone' };
  if (current.bootstrapToken === token || current.rotatedBootstrapToken === token)
    return { action: 'keep', reason: 'Recorded' };
  if (current.resourceVersion !== patch.baseVersion) return { action: 'revoke', reason: 'Superseded' };
  const settledAt = settledAtMs(patch);
  if (nowMs >= settledAt) return { action: 'revoke', reason: 'NeverCommitted' };
  return { action: 'wait', reason: 'OutcomeUnknown', afterMs: Math.min(RECHECK_MS, settledAt - nowMs) };
}
