/**
 * The rollout taints as pure decisions: which of Kindling's two rollout taints (TAINTS) a node of a MachineSet
 * should carry for the rollout's state, and the Node's taint list once that is so. Pods evicted from the node
 * being updated then go to nodes already updated (no taint) before nodes still to be updated (PreferNoSchedule),
 * and never to a node in the middle of its own update (NoSchedule), so one rollout evicts a pod once, not once
 * per batch.
 */
import type * as k8s from '#k8s';
import { TAINTS } from '../../api/src/keys.js';
import type { NodeView } from './rollout-decision.js';

export type RolloutTaint = 'updatePending' | 'updating';

const EFFECTS: Record<RolloutTaint, 'PreferNoSchedule' | 'NoSchedule'> = {
  updatePending: 'PreferNoSchedule',
  updating: 'NoSchedule',
};

/** Where the rollout stands: handing out nodes (neither complete nor paused), or not. */
export interface RolloutPhase {
  /** Nodes are still to be handed out: not complete, not paused (a halted rollout still is: it resumes). */
  active: boolean;
}

/**
 * The rollout taint a node should carry. Handed a target and not done: `updating`, paused or not (it finishes).
 * Still to be updated (idle, or Degraded: its update was rolled back) while the rollout is active:
 * `updatePending`. Otherwise none: done, or the rollout is over or paused.
 */
function rolloutTaintOf(view: Pick<NodeView, 'phase'>, phase: RolloutPhase): RolloutTaint | undefined {
  if (view.phase === 'updating') return 'updating';
  if (view.phase === 'done' || !phase.active) return undefined;
  return 'updatePending';
}

/** The rollout taint of each node, by name (undefined: none). */
export function rolloutTaints(
  views: readonly Pick<NodeView, 'name' | 'phase'>[],
  phase: RolloutPhase,
): Map<string, RolloutTaint | undefined> {
  return new Map(views.map((v) => [v.name, rolloutTaintOf(v, phase)]));
}

const OURS = new Set<string>(Object.values(TAINTS));

/**
 * The Node's taints with `want` as its only rollout taint, every other taint kept as it is (the node lifecycle
 * controller's, the pool's, anyone's); undefined when the Node already has exactly that.
 */
export function withRolloutTaint(
  current: readonly k8s.V1Taint[],
  want: RolloutTaint | undefined,
): k8s.V1Taint[] | undefined {
  const ours = current.filter((t) => OURS.has(t.key));
  const wanted = want === undefined ? undefined : { key: TAINTS[want], effect: EFFECTS[want] };
  const already =
    wanted === undefined
      ? ours.length === 0
      : ours.length === 1 && ours[0]?.key === wanted.key && ours[0].effect === wanted.effect && !ours[0].value;
  if (already) return undefined;
  const others = current.filter((t) => !OURS.has(t.key));
  return wanted === undefined ? others : [...others, wanted];
}
