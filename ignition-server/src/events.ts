/**
 * Kubernetes Events on token Secrets, written by the leader only: a token rotated, a payload generation
 * failed (its reason and message), the Secret deleted at its expiry. The annotations carry the outcome; an
 * Event is a courtesy for `kubectl describe` and `kubectl get events`, so a failed create never fails a
 * reconcile. A generation that keeps failing is retried (and asked for by every booting host of the pool):
 * one Event per (Secret, reason) per window, so the retries do not flood the apiserver.
 */
import * as k8s from '#k8s';
import { FIELD_MANAGERS } from '../../api/src/keys.js';
import { eventBody, EventRateLimiter, recordEvent, type EventNote } from '../../support/src/events.js';
import type { Logger } from '../../support/src/logger.js';
import type { Clock } from '../../support/src/timers.js';
import type { TokenSecret } from './token-index.js';

const EVENT_COMPONENT = FIELD_MANAGERS.ignitionServer;

export const EVENT_REASONS = {
  rotated: 'TokenRotated',
  expired: 'TokenSecretExpired',
} as const;

export type TokenSecretEvent = EventNote;

export interface EventRecorderOptions {
  kubeConfig: k8s.KubeConfig;
  clock: Clock;
  log: Logger;
  /** At most one Event per (Secret, reason) in this window (default 10 min). */
  windowMs?: number;
}

export class TokenSecretEvents {
  readonly #opts: EventRecorderOptions;
  readonly #core: k8s.CoreV1Api;
  /** One Event per `uid/reason` per window. */
  readonly #limiter: EventRateLimiter;

  constructor(opts: EventRecorderOptions) {
    this.#opts = opts;
    this.#core = opts.kubeConfig.makeApiClient(k8s.CoreV1Api);
    this.#limiter = new EventRateLimiter(opts.clock, opts.windowMs ?? 600_000);
  }

  async record(secret: TokenSecret, event: TokenSecretEvent): Promise<void> {
    if (!this.#limiter.allow(`${secret.uid}/${event.reason}`)) return;
    const subject = {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: secret.name, namespace: secret.namespace, uid: secret.uid },
    };
    await recordEvent(
      this.#core,
      eventBody(subject, event, { component: EVENT_COMPONENT }, new Date(this.#opts.clock.now())),
      this.#opts.log,
    );
  }
}
