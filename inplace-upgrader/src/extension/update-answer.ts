/**
 * How UpdateMachine answers Cluster API for the outcome of one step (pure), and when an update Cluster API asks
 * for is superseded.
 *
 * Cluster API v1.14.2's Machine controller (core/reconcilers/machine/machine_controller_inplace_update.go)
 * takes a Failure as an error of the reconcile: it keeps none of the answer's retryAfterSeconds, and calls the
 * hook again on the next reconcile, which any change to the Machine or its objects brings (about once a second
 * on a busy pool). A Success with retryAfterSeconds > 0 goes into its hook cache instead, and the hook is not
 * called for that Machine before that time, whatever events come. So a node Degraded towards the target (the
 * rollout halted on it, as on the MachineSet engine) is answered Success with a retryAfterSeconds that doubles
 * on each answer, up to HALTED_RETRY_MAX_SECONDS: Cluster API keeps the Machine updating (and so unavailable,
 * which holds the rest of the MachineDeployment back, as maxUnavailable would), and the NodePool says why
 * (ANNOTATIONS.inPlaceFailure on the Machine). Failure is left for what Kindling cannot act on at all.
 */
import type { UpdateMachineResponse } from './hooks.js';

export type UpdateOutcome =
  | { state: 'in-progress' | 'done' | 'failed'; message: string }
  /** The node is Degraded towards the target; `attempt` counts the answers so far (0 for the first). */
  | { state: 'halted'; message: string; attempt: number };

/** The longest a halted Machine waits between two calls: how long a pool moved back may wait to be seen. */
export const HALTED_RETRY_MAX_SECONDS = 120;

export type UpdateAnswer = Pick<UpdateMachineResponse, 'status' | 'retryAfterSeconds' | 'message'>;

/** The answer for an outcome; `inProgressSeconds` is the retryAfterSeconds of an update that moves on. */
export function answerFor(o: UpdateOutcome, inProgressSeconds: number): UpdateAnswer {
  switch (o.state) {
    case 'in-progress':
      return { status: 'Success', retryAfterSeconds: inProgressSeconds, message: o.message };
    case 'halted': {
      const backoff = inProgressSeconds * 2 ** Math.min(o.attempt, 16);
      return { status: 'Success', retryAfterSeconds: Math.min(backoff, HALTED_RETRY_MAX_SECONDS), message: o.message };
    }
    case 'done':
      return { status: 'Success', retryAfterSeconds: 0, message: o.message };
    case 'failed':
      return { status: 'Failure', retryAfterSeconds: 0, message: o.message };
  }
}

/**
 * Whether an update towards `target` is superseded: the MachineDeployment now names another hash, and the node
 * is not working towards `target` (it failed, or was never handed it).
 *
 * Cluster API v1.14.2 has no way out of an in-place update but the extension's done: the MachineSet controller
 * never moves a Machine whose update is in progress (startMoveMachines skips it), the MachineDeployment's
 * rollout does not delete it, and the UpdateMachine call keeps naming the Machine's spec as it was when the
 * update began. Deleting the Machine would replace the host. So a superseded update is answered done, with the
 * node left where it is: Cluster API clears its update-in-progress marker, the MachineDeployment then moves the
 * Machine to the MachineSet of the hash it names now (CanUpdateMachineSet, then UpdateMachine towards that hash),
 * and the node is handed that hash the way the MachineSet engine retargets a node, keeping its Machine.
 * A node still working towards `target` finishes (or fails) first, as on the MachineSet engine.
 */
export function superseded(
  target: string,
  deploymentHash: string | undefined,
  phase: 'done' | 'updating' | 'degraded' | 'idle',
): boolean {
  if (deploymentHash === undefined || deploymentHash === target) return false;
  return phase === 'degraded' || phase === 'idle';
}
