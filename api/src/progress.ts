/**
 * The words of an in-place rollout's progress (ANNOTATIONS.inPlaceProgress on the MachineSet engine, the
 * NodePool's UpdatingConfig/UpdatingVersion message on both engines): both engines say where a paused rollout
 * stopped in the same way, so an operator reads one format whichever engine runs the pool.
 */

/** What a paused rollout adds to "N of M updated": where it stopped, and how many nodes under way still finish. */
export function pausedProgress(done: number, total: number, finishing: number): string {
  const rest = finishing > 0 ? `, ${finishing} node(s) handed out before the pause still finishing` : '';
  return `; paused at ${done} of ${total} by spec.pausedUntil: no node is handed out until it clears${rest}`;
}

/** What a rollout held by the rollout gate (ANNOTATIONS.rolloutHold: the maintenance window, the health gate) adds
 * to "N of M updated": why, and how many nodes under way still finish. */
export function heldProgress(done: number, total: number, finishing: number, why: string): string {
  const rest = finishing > 0 ? `, ${finishing} node(s) handed out before still finishing` : '';
  return `; held at ${done} of ${total}: ${why}${rest}`;
}
