/**
 * What a phase tells the runner, Cluster API's ctrl.Result in Kindling's words, and how the runner folds the
 * results of a reconcile's phases into the one answer the work queue gets.
 */
import { NotReadyError } from '../../../support/src/errors.js';

/**
 * A wait for the ignition server's answer to a request made moments ago (sooner than the retry): a pool with
 * no status yet may get its first one with the answer instead of one that says it is waiting (the reconciler
 * decides whether to write).
 */
export class AwaitingAnswer extends NotReadyError {}

export type PhaseResult =
  | { kind: 'continue' }
  /** Go on; run the pool again after afterMs (a date to wait for, a guest to retry). */
  | { kind: 'requeue'; afterMs: number }
  /** Go on (at the deployed hash), and end the reconcile quietly not-ready: the queue retries after its delay. */
  | { kind: 'notReady'; error: NotReadyError }
  /** Skip the writing phases (the observations still run); afterMs: when to look again, if known. */
  | { kind: 'stop'; afterMs?: number };

export const CONTINUE: PhaseResult = { kind: 'continue' };

export const requeueAfter = (afterMs: number): PhaseResult => ({ kind: 'requeue', afterMs });

/** The results of the phases so far: the earliest requeue wins, a not-ready ends the reconcile, a stop ends
 * the writing phases. */
export interface Outcome {
  requeueAfterMs?: number;
  /** The first not-ready: what the reconcile ends with. */
  notReady?: NotReadyError;
  /** Every not-ready was an AwaitingAnswer: only then may a first status wait for the answer. */
  allAwaiting?: boolean;
  stopped: boolean;
}

export const NO_OUTCOME: Outcome = { stopped: false };

function earliest(a: number | undefined, b: number | undefined): number | undefined {
  return a === undefined ? b : b === undefined ? a : Math.min(a, b);
}

export function combine(outcome: Outcome, result: PhaseResult): Outcome {
  switch (result.kind) {
    case 'continue':
      return outcome;
    case 'requeue':
      return { ...outcome, requeueAfterMs: earliest(outcome.requeueAfterMs, result.afterMs) };
    case 'notReady':
      return {
        ...outcome,
        notReady: outcome.notReady ?? result.error,
        allAwaiting: outcome.allAwaiting !== false && result.error instanceof AwaitingAnswer,
      };
    case 'stop':
      return { ...outcome, stopped: true, requeueAfterMs: earliest(outcome.requeueAfterMs, result.afterMs) };
  }
}
