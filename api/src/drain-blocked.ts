/**
 * The value of ANNOTATIONS.drainBlocked on a guest Node: "<pod> blocked by PodDisruptionBudget <namespace>/<name>
 * since <RFC3339>". Written by the drainer; read by the inplace-upgrader (rollout progress, hence the NodePool's
 * UpdatingConfig/UpdatingVersion message) and `kindling status`. One format, so writer and readers cannot drift.
 */

export interface DrainBlock {
  /** `<namespace>/<name>` of the pod whose eviction was refused. */
  pod: string;
  /** `<namespace>/<name>` of the PodDisruptionBudget that refused it. */
  pdb: string;
  /** When the budget first refused this pod in the current drain (RFC3339). */
  since: string;
}

const PATTERN = /^(\S+) blocked by PodDisruptionBudget (\S+) since (\S+)$/;

export function formatDrainBlocked(block: DrainBlock): string {
  return `${block.pod} blocked by PodDisruptionBudget ${block.pdb} since ${block.since}`;
}

/** The block an annotation value states, or undefined for anything else (an absent or hand-edited value). */
export function parseDrainBlocked(value: string | undefined): DrainBlock | undefined {
  const m = PATTERN.exec(value ?? '');
  return m ? { pod: m[1] as string, pdb: m[2] as string, since: m[3] as string } : undefined;
}
