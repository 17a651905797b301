/**
 * Whether the ignition server is answering token Secrets right now: when this controller last saw a mint newer
 * than any before (ANNOTATIONS.tokenIssuedAt on a token Secret event, timed by the controller's own clock, so
 * neither clock skew nor an informer running behind under load makes a working server look idle). Under load
 * the server mints a queue of new pools a few at a time, so a pool's answer can come a minute or more after its
 * Secret was written while the server is plainly at work; a new pool's first status then waits for its answer
 * (phases/secrets.ts) instead of saying it is waiting and being written again with the answer. A server that
 * mints nothing is not waited for.
 *
 * The Secrets are in tenants' namespaces, and a tenant can write any label and annotation there. So only Secrets
 * that look like token Secrets count, a mint time in the future (year 9999 would freeze the clock) does not, and
 * progress is kept per namespace: a tenant who keeps bumping its own Secrets moves only its own clock.
 */
import type * as k8s from '#k8s';
import { ANNOTATIONS, LABELS, tokenSecretName } from '../../api/src/keys.js';

/** How far ahead of this controller's clock the server's may run: a mint time later than that is not one (a
 * server further ahead only looks idle: new pools' first status is then written once more, no worse). */
export const MAX_MINT_SKEW_MS = 5 * 60_000;

/** Labelled as a token Secret and named as one of its labelled pool's (the names the controller writes). */
function looksLikeTokenSecret(metadata: k8s.V1ObjectMeta): boolean {
  const pool = metadata.labels?.[LABELS.nodePool];
  if (pool === undefined || metadata.labels?.[LABELS.tokenSecret] !== 'true') return false;
  const prefix = tokenSecretName(pool, '');
  return metadata.name !== undefined && metadata.name.startsWith(prefix) && metadata.name.length > prefix.length;
}

/** The mint time a token Secret states, when it is one that counts at `now`; undefined otherwise. */
function countedMint(secret: k8s.V1Secret, now: number): number | undefined {
  if (!secret.metadata || !looksLikeTokenSecret(secret.metadata)) return undefined;
  const issuedAt = Date.parse(secret.metadata.annotations?.[ANNOTATIONS.tokenIssuedAt] ?? '');
  return issuedAt <= now + MAX_MINT_SKEW_MS ? issuedAt : undefined;
}

/** The newest mint seen, and when (the controller's clock). */
interface Progress {
  latestIssuedMs: number;
  seenMs: number;
}

const NONE: Readonly<Progress> = { latestIssuedMs: Number.NEGATIVE_INFINITY, seenMs: Number.NEGATIVE_INFINITY };

export class MintProgress {
  /** One entry per namespace that ever held a token Secret: a few numbers each, namespaces are the operator's. */
  readonly #byNamespace = new Map<string, Progress>();

  /** A token Secret as an informer delivers it at `now`: a mint newer than all seen so far is progress. */
  observe(secret: k8s.V1Secret, now: number): void {
    const issuedAt = countedMint(secret, now);
    if (issuedAt === undefined) return;
    const namespace = secret.metadata?.namespace ?? '';
    const progress = this.#byNamespace.get(namespace) ?? { ...NONE };
    this.#byNamespace.set(namespace, progress);
    advance(progress, issuedAt, now);
  }

  /** When the latest progress in `namespace` was seen (the controller's clock); -Infinity before any. */
  seenMsIn(namespace: string): number {
    return this.#byNamespace.get(namespace)?.seenMs ?? Number.NEGATIVE_INFINITY;
  }
}

function advance(progress: Progress, issuedAt: number, now: number): void {
  if (!(issuedAt > progress.latestIssuedMs)) return;
  progress.latestIssuedMs = issuedAt;
  progress.seenMs = now;
}
