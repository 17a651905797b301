/**
 * Kubernetes Events on token Secrets, written by the leader only: a token rotated, a payload generation
 * failed (its reason and message), the Secret deleted at its expiry. The annotations carry the outcome; an
 * Event is a courtesy for `kubectl describe` and `kubectl get events`, so a failed create never fails a
 * reconcile. A generation that keeps failing is retried (and asked for by every booting host of the pool):
 * one Event per (Secret, reason) per window, so the retries do not flood the apiserver.
 */
import { hostname } from 'node:os';
import * as k8s from '@kubernetes/client-node';
import { FIELD_MANAGERS } from '../../api/src/keys.js';
import type { Logger } from '../../support/src/logger.js';
import type { Clock } from '../../support/src/timers.js';
import type { TokenSecret } from './token-index.js';

export const EVENT_COMPONENT = FIELD_MANAGERS.ignitionServer;

export const EVENT_REASONS = {
  rotated: 'TokenRotated',
  expired: 'TokenSecretExpired',
} as const;

export interface TokenSecretEvent {
  type: 'Normal' | 'Warning';
  reason: string;
  message: string;
}

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
  readonly #instance = hostname();
  /** When the last Event of each `uid/reason` was recorded. */
  readonly #last = new Map<string, number>();

  constructor(opts: EventRecorderOptions) {
    this.#opts = opts;
    this.#core = opts.kubeConfig.makeApiClient(k8s.CoreV1Api);
  }

  async record(secret: TokenSecret, event: TokenSecretEvent): Promise<void> {
    const now = this.#opts.clock.now();
    const window = this.#opts.windowMs ?? 600_000;
    const key = `${secret.uid}/${event.reason}`;
    const last = this.#last.get(key);
    if (last !== undefined && now - last < window) return;
    this.#last.set(key, now);
    this.#sweep(now, window);
    try {
      await this.#core.createNamespacedEvent({ namespace: secret.namespace, body: this.#body(secret, event, new Date(now)) });
    } catch (err) {
      this.#opts.log.warn({ err, secret: secret.key, reason: event.reason }, 'Could not record an Event');
    }
  }

  /** Forgets windows that have passed, so the map stays as small as the set of recently failing Secrets. */
  #sweep(now: number, window: number): void {
    if (this.#last.size < 1024) return;
    for (const [key, at] of this.#last) if (now - at >= window) this.#last.delete(key);
  }

  #body(secret: TokenSecret, event: TokenSecretEvent, now: Date): k8s.CoreV1Event {
    return {
      metadata: { generateName: `${secret.name}.`, namespace: secret.namespace },
      involvedObject: { apiVersion: 'v1', kind: 'Secret', name: secret.name, namespace: secret.namespace, uid: secret.uid },
      type: event.type,
      reason: event.reason,
      message: event.message.slice(0, 1024),
      source: { component: EVENT_COMPONENT },
      reportingComponent: EVENT_COMPONENT,
      reportingInstance: this.#instance,
      firstTimestamp: now,
      lastTimestamp: now,
      count: 1,
    };
  }
}
