/**
 * Kubernetes Events, written one way by every component: a core/v1 Event (the API `kubectl describe` shows)
 * about one object, best effort. An Event is a courtesy: the status or an annotation carries the outcome, so a
 * failed create is logged and never fails the caller. Components that retry (a drain a budget holds up, a
 * payload that keeps failing) rate-limit their Events per key, so the retries do not flood the apiserver.
 */
import { hostname } from 'node:os';
import type * as k8s from '#k8s';
import type { Logger } from './logger.js';
import type { Clock } from './timers.js';

/** The object an Event is about: apiVersion and kind set, as list items lack them. */
export interface EventSubject {
  apiVersion: string;
  kind: string;
  metadata: { name?: string; namespace?: string; uid?: string };
}

export interface EventNote {
  type: 'Normal' | 'Warning';
  reason: string;
  message: string;
}

export interface EventSource {
  /** The component (its field manager name, e.g. kindling-drainer). */
  component: string;
  /** Which replica: the host name unless told. */
  instance?: string;
}

/** The apiserver caps an Event's message; longer ones are cut rather than refused. */
const MAX_MESSAGE = 1024;

/**
 * The core/v1 Event of one note. A cluster-scoped subject (a Node) has its Events in `default`, as the
 * kubelet's are.
 */
export function eventBody(subject: EventSubject, note: EventNote, source: EventSource, now: Date): k8s.CoreV1Event {
  const { name, namespace, uid } = subject.metadata;
  const instance = source.instance ?? hostname();
  return {
    metadata: { generateName: `${name ?? ''}.`, namespace: namespace ?? 'default' },
    involvedObject: { apiVersion: subject.apiVersion, kind: subject.kind, name, namespace, uid },
    type: note.type,
    reason: note.reason,
    message: note.message.slice(0, MAX_MESSAGE),
    source: { component: source.component },
    reportingComponent: source.component,
    reportingInstance: instance,
    firstTimestamp: now,
    lastTimestamp: now,
    count: 1,
  };
}

/** Creates the Event; true when it was created, false (logged) when the create failed. */
export async function recordEvent(core: k8s.CoreV1Api, event: k8s.CoreV1Event, log: Logger): Promise<boolean> {
  try {
    await core.createNamespacedEvent({ namespace: event.metadata.namespace ?? 'default', body: event });
    return true;
  } catch (err) {
    const o = event.involvedObject;
    log.warn(
      { err, reason: event.reason, object: `${o.kind ?? ''} ${[o.namespace, o.name].filter(Boolean).join('/')}` },
      'Could not record an Event',
    );
    return false;
  }
}

/** At most one `allow` per key per interval. Keys idle for longer are forgotten, so it stays small. */
export class EventRateLimiter {
  readonly #clock: Clock;
  readonly #intervalMs: number;
  readonly #last = new Map<string, number>();

  constructor(clock: Clock, intervalMs: number) {
    this.#clock = clock;
    this.#intervalMs = intervalMs;
  }

  /** Whether an Event for `key` may go now; if so, the interval restarts for it. */
  allow(key: string): boolean {
    const now = this.#clock.now();
    for (const [k, at] of this.#last) if (now - at >= this.#intervalMs) this.#last.delete(k);
    if (this.#last.has(key)) return false;
    this.#last.set(key, now);
    return true;
  }
}
