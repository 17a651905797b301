/**
 * The upgrader's rollout plan for read-only callers (`kindling plan`): the same selection a reconcile makes
 * (setMembers, classifyNode, planRollout, maxUnavailable resolved the same way), repeated wave after wave
 * over what the cluster shows now. Nothing is written and nothing is fetched.
 */
import type * as k8s from '#k8s';
import type { Machine, MachineSet } from '../../api/src/capi.js';
import type { IntOrPercent } from '../../api/src/nodepool.js';
import { resolveMaxUnavailable } from '../../support/src/int-or-percent.js';
import { classifyNode, planRollout, setMembers, type NodePhase, type NodeView } from './rollout-decision.js';

export interface RolloutState {
  /** The MachineSet the upgrader rolls (its name and cluster select its Machines). */
  machineSet: Pick<MachineSet, 'metadata' | 'spec'>;
  /** The config hash the rollout moves to (the MachineSet's target-config-hash). */
  target: string;
  /** The MachineSet's maxUnavailable (its annotation, as the controller writes it): resolved against its nodes. */
  maxUnavailable?: IntOrPercent;
  /** The MachineSet is paused (the pool's spec.pausedUntil): nothing is handed out until it clears. */
  paused?: boolean;
  machines: readonly Machine[];
  /** The guest Nodes; those of the set's Machines are used. */
  nodes: readonly k8s.V1Node[];
  /**
   * Whether the change needs a drain and a reboot. The agent decides from the payload against the host
   * (disruptionOf: only a change limited to SSH keys needs neither), which a read-only caller does not have:
   * unknown means yes.
   */
  disruptive?: boolean;
}

/** What the upgrader's rollout does to a node: drain, apply and reboot; apply only; or nothing. */
type NodeAction = 'drain-reboot' | 'apply' | 'none';

interface PlannedNodeUpdate {
  name: string;
  zone: string;
  phase: NodePhase;
  unavailable: boolean;
  /** 1-based batch, or 0 when the node does not move. */
  batch: number;
  action: NodeAction;
  /** Degraded: why. */
  reason?: string;
  /** Its drain is held up: by what ("PodDisruptionBudget <ns>/<name>"). */
  blockedBy?: string;
}

/** The batches of a rollout, or why it cannot go on. */
export interface SimulatedRollout {
  batches: string[][];
  halted?: { node: string; reason: string };
  stalled?: string;
}

export interface RolloutPreview extends SimulatedRollout {
  target: string;
  maxUnavailable: number;
  /** Every node of the set, by batch and order within it; nodes that do not move last, by name. */
  nodes: PlannedNodeUpdate[];
  /** Machines without a Node yet: they boot the target config from their user-data. */
  machinesWithoutNode: number;
  /** The progress the upgrader would write now ("N of M updated", paused at, blocked drains). */
  progress: string;
  /** Paused: the batches are the order once the pause clears; until then only nodes handed out finish. */
  paused?: { done: number; total: number };
  /** Nodes whose drain a PodDisruptionBudget holds up, by name. */
  drainsBlocked: { node: string; by: string }[];
}

/**
 * Batches of the upgrader's own selection: each batch is what planRollout starts (plus what is in flight),
 * and the batch is assumed to finish before the next one is picked. The real rollout starts a node as soon
 * as another one finishes; the order and the bound (maxUnavailable) are the same.
 */
export function simulateRollout(views: readonly NodeView[], target: string, maxUnavailable: number): SimulatedRollout {
  let nodes = [...views];
  const batches: string[][] = [];
  for (;;) {
    const plan = planRollout(nodes, target, maxUnavailable);
    if (plan.complete) return { batches };
    if (plan.halted) return { batches, halted: plan.halted };
    const moving = [
      ...nodes
        .filter((n) => n.phase === 'updating')
        .map((n) => n.name)
        .sort(),
      ...plan.start,
    ];
    if (moving.length === 0) {
      const unavailable = nodes.filter((n) => n.unavailable).length;
      return {
        batches,
        stalled: `${unavailable} unavailable nodes use the whole maxUnavailable budget (${maxUnavailable}): nothing starts until they are Ready`,
      };
    }
    batches.push(moving);
    nodes = nodes.map((n) =>
      moving.includes(n.name) ? { ...n, phase: 'done', unavailable: false, desiredConfig: target } : n,
    );
  }
}

function plannedNodes(views: readonly NodeView[], sim: SimulatedRollout, action: NodeAction): PlannedNodeUpdate[] {
  const batchOf = (name: string): number => sim.batches.findIndex((b) => b.includes(name)) + 1;
  const order = (n: PlannedNodeUpdate): number =>
    n.batch === 0 ? Number.MAX_SAFE_INTEGER : n.batch * 1000 + (sim.batches[n.batch - 1]?.indexOf(n.name) ?? 0);
  const planned = views.map((v) => {
    const batch = batchOf(v.name);
    const extra = {
      ...(v.reason === undefined ? {} : { reason: v.reason }),
      ...(v.blockedBy === undefined ? {} : { blockedBy: v.blockedBy }),
    };
    return {
      name: v.name,
      zone: v.zone,
      phase: v.phase,
      unavailable: v.unavailable,
      batch,
      action: batch === 0 ? ('none' as const) : action,
      ...extra,
    };
  });
  return planned.sort((a, b) => order(a) - order(b) || a.name.localeCompare(b.name));
}

/** The in-place rollout of a MachineSet as the upgrader would carry it out, from the state it would read. */
export function previewRollout(state: RolloutState): RolloutPreview {
  const { target } = state;
  const byName = new Map(state.nodes.map((n) => [n.metadata?.name ?? '', n]));
  const { members, pending } = setMembers(state.machineSet, state.machines, (name) => byName.get(name));
  const views = members.map((m) => classifyNode(m.node, target));
  const maxUnavailable = resolveMaxUnavailable(state.maxUnavailable, views.length);
  const now = planRollout(views, target, maxUnavailable, { pending, paused: state.paused === true });
  const sim = simulateRollout(views, target, maxUnavailable);
  const drainsBlocked = views
    .flatMap((v) => (v.phase === 'updating' && v.blockedBy ? [{ node: v.name, by: v.blockedBy }] : []))
    .sort((a, b) => a.node.localeCompare(b.node));
  return {
    target,
    maxUnavailable,
    nodes: plannedNodes(views, sim, state.disruptive === false ? 'apply' : 'drain-reboot'),
    ...sim,
    machinesWithoutNode: pending,
    progress: now.progress,
    ...(state.paused === true && !now.complete ? { paused: { done: now.done, total: now.total } } : {}),
    drainsBlocked,
  };
}
