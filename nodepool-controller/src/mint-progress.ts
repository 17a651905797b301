/**
 * Whether the ignition server is answering token Secrets right now: when this controller last saw a mint newer
 * than any before (ANNOTATIONS.tokenIssuedAt on a token Secret event, timed by the controller's own clock, so
 * neither clock skew nor an informer running behind under load makes a working server look idle). Under load
 * the server mints a queue of new pools a few at a time, so a pool's answer can come a minute or more after its
 * Secret was written while the server is plainly at work; a new pool's first status then waits for its answer
 * (phases/secrets.ts) instead of saying it is waiting and being written again with the answer. A server that
 * mints nothing is not waited for.
 */
import type * as k8s from '#k8s';
import { ANNOTATIONS } from '../../api/src/keys.js';

export class MintProgress {
  #latestIssuedMs = Number.NEGATIVE_INFINITY;
  #seenMs = Number.NEGATIVE_INFINITY;

  /** A token Secret as an informer delivers it at `now`: a mint newer than all seen so far is progress. */
  observe(secret: k8s.V1Secret, now: number): void {
    const issuedAt = Date.parse(secret.metadata?.annotations?.[ANNOTATIONS.tokenIssuedAt] ?? '');
    if (!(issuedAt > this.#latestIssuedMs)) return;
    this.#latestIssuedMs = issuedAt;
    this.#seenMs = now;
  }

  /** When the latest progress was seen (the controller's clock); -Infinity before any. */
  get seenMs(): number {
    return this.#seenMs;
  }
}
