/**
 * Kubernetes Events on the pool's condition transitions, so `kubectl describe nodepool` tells the story, and on
 * the CSR approver's decisions (on the Machine, else the pool), so `kubectl describe machine` tells why it joined.
 * Which transitions make an Event is a pure function of the previous and the new conditions; emitting is
 * best effort (an Event lost to a crash or a failed create does not fail the reconcile: the status holds the truth).
 */
import * as k8s from '#k8s';
import { CONDITIONS, type Condition } from '../../api/src/conditions.js';
import { FIELD_MANAGERS } from '../../api/src/keys.js';
import { makeApiClient } from '../../support/src/kubeconfig.js';
import { eventBody, recordEvent, type EventNote, type EventSubject } from '../../support/src/events.js';
import type { Logger } from '../../support/src/logger.js';

export const EVENT_COMPONENT = FIELD_MANAGERS.nodepoolController;

export type Transition = EventNote;
export type { EventSubject };

/** Warning for a False spec/transient condition (someone must act or something is wrong); Normal otherwise. */
function eventType(c: Condition): Transition['type'] {
  const kind = CONDITIONS[c.type].kind as string;
  return c.status === 'False' && (kind === 'spec' || kind === 'transient') ? 'Warning' : 'Normal';
}

/**
 * A condition whose status changed makes one Event. A condition seen for the first time makes one only when
 * it starts out as a Warning on a spec condition (a pool broken from birth): the usual first statuses (Ready
 * False, payload Pending) would make a dozen Events per new pool that say nothing.
 */
export function conditionTransitions(previous: readonly Condition[], next: readonly Condition[]): Transition[] {
  const out: Transition[] = [];
  for (const c of next) {
    const prev = previous.find((p) => p.type === c.type);
    if (prev?.status === c.status) continue;
    const type = eventType(c);
    if (!prev && !(type === 'Warning' && CONDITIONS[c.type].kind === 'spec')) continue;
    out.push({
      type,
      reason: c.reason,
      message: `${c.type} is ${c.status}${prev ? ` (was ${prev.status})` : ''}: ${c.message}`,
    });
  }
  return out;
}

export interface EventRecorder {
  record(subject: EventSubject, transitions: readonly Transition[], log: Logger): Promise<void>;
  /** Events created so far. */
  readonly count: number;
}

export function createEventRecorder(kc: k8s.KubeConfig, now: () => number): EventRecorder {
  const core = makeApiClient(kc, k8s.CoreV1Api);
  let count = 0;
  return {
    get count() {
      return count;
    },
    async record(subject, transitions, log) {
      await Promise.all(
        transitions.map(async (t) => {
          if (await recordEvent(core, eventBody(subject, t, { component: EVENT_COMPONENT }, new Date(now())), log))
            count++;
        }),
      );
    },
  };
}
