/**
 * The upgrader's decisions as pure functions: what each node of a MachineSet is doing, how many more may
 * start, and which ones, in a deterministic order (unavailable first, then spread across zones, then name).
 */
import type * as k8s from '#k8s';
import type { Machine, MachineSet } from '../../api/src/capi.js';
import { parseDrainBlocked } from '../../api/src/drain-blocked.js';
import { heldProgress, pausedProgress } from '../../api/src/progress.js';
import { ANNOTATIONS, DRAIN_PREFIX, LABELS, NODE_STATES } from '../../api/src/keys.js';

export type NodePhase = 'done' | 'updating' | 'degraded' | 'idle';

export interface NodeView {
  name: string;
  zone: string;
  phase: NodePhase;
  /** Not Ready, or unschedulable. */
  unavailable: boolean;
  desiredConfig?: string;
  /** Why the node is degraded. */
  reason?: string;
  /** Degraded only because the rollout's ceiling holds its update back (ANNOTATIONS.ceilingHeld): it waits for
   * the maintenance window and applied nothing. */
  waiting?: true;
  /** What holds up its drain, as the drainer says: "PodDisruptionBudget <ns>/<name>". */
  blockedBy?: string;
}

export const isReady = (node: k8s.V1Node): boolean =>
  node.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') === true;

/** The drain failure that blocks the node's current drain request, if any. */
function blockingDrainFailure(ann: Record<string, string>): string | undefined {
  const request = ann[ANNOTATIONS.desiredDrain];
  const failure = ann[ANNOTATIONS.drainFailure];
  if (!request || !failure || request === ann[ANNOTATIONS.lastAppliedDrain] || !failure.startsWith(`${request}:`))
    return undefined;
  return `drain failed: ${failure.slice(request.length + 1).trim()}`;
}

/** The budget holding up the node's pending drain, if the drainer reported one for it. */
function drainBlockedBy(ann: Record<string, string>): string | undefined {
  const request = ann[ANNOTATIONS.desiredDrain];
  if (!request?.startsWith(DRAIN_PREFIX) || request === ann[ANNOTATIONS.lastAppliedDrain]) return undefined;
  const block = parseDrainBlocked(ann[ANNOTATIONS.drainBlocked]);
  return block ? `PodDisruptionBudget ${block.pdb}` : undefined;
}

/** In flight: handed a config not reached yet, the agent working or failed, or a drain request pending. */
function inFlight(ann: Record<string, string>): boolean {
  const desired = ann[ANNOTATIONS.desiredConfig];
  const state = ann[ANNOTATIONS.state];
  const drain = ann[ANNOTATIONS.desiredDrain];
  if (desired !== undefined && desired !== ann[ANNOTATIONS.currentConfig]) return true;
  if (state === NODE_STATES.working || state === NODE_STATES.degraded) return true;
  return drain !== undefined && drain !== ann[ANNOTATIONS.lastAppliedDrain];
}

/** Degraded on its desiredConfig: why, and whether it only waits for the window (a marker of that very hash). */
function degradedView(ann: Record<string, string>): Pick<NodeView, 'phase' | 'reason' | 'waiting'> {
  const reason = ann[ANNOTATIONS.reason] ?? 'Degraded (no reason given)';
  const held = ann[ANNOTATIONS.ceilingHeld];
  const waiting = held !== undefined && held === ann[ANNOTATIONS.desiredConfig];
  return { phase: 'degraded', reason, ...(waiting ? { waiting } : {}) };
}

function phaseOf(
  ann: Record<string, string>,
  target: string,
): Pick<NodeView, 'phase' | 'reason' | 'waiting' | 'blockedBy'> {
  const desired = ann[ANNOTATIONS.desiredConfig];
  // A node failing on an older target is retargeted (the new config may be the fix), not a reason to halt.
  if (desired === undefined || desired === target) {
    if (ann[ANNOTATIONS.state] === NODE_STATES.degraded) return degradedView(ann);
    const drainFailure = blockingDrainFailure(ann);
    if (drainFailure) return { phase: 'degraded', reason: drainFailure };
  }
  if (inFlight(ann)) {
    const blockedBy = drainBlockedBy(ann);
    return { phase: 'updating', ...(blockedBy ? { blockedBy } : {}) };
  }
  return { phase: ann[ANNOTATIONS.currentConfig] === target ? 'done' : 'idle' };
}

/**
 * What a node is doing with respect to the target. `expectedDesired` is the desiredConfig this upgrader
 * wrote and its informer has not shown yet: without it a stale cache would show the node idle and the
 * upgrader would start more nodes than maxUnavailable allows.
 */
export function classifyNode(node: k8s.V1Node, target: string, expectedDesired?: string): NodeView {
  const meta = node.metadata ?? {};
  const ann = { ...(meta.annotations ?? {}) };
  if (expectedDesired !== undefined) ann[ANNOTATIONS.desiredConfig] = expectedDesired;
  return {
    name: meta.name ?? '',
    zone: meta.labels?.[LABELS.zone] ?? '',
    ...phaseOf(ann, target),
    unavailable: node.spec?.unschedulable === true || !isReady(node),
    desiredConfig: ann[ANNOTATIONS.desiredConfig],
  };
}

/**
 * A MachineSet's nodes as the upgrader reads them: the Nodes (status.nodeRef) of its Machines (set-name label,
 * same cluster), each with its Machine; and how many of those Machines have no Node yet, leaving out Machines
 * being deleted (scaled down: they will have none). A deleted Machine whose Node is still there counts: the
 * node is still part of the set until it goes.
 */
export function setMembers(
  ms: Pick<MachineSet, 'metadata' | 'spec'>,
  machines: readonly Machine[],
  nodeOf: (name: string) => k8s.V1Node | undefined,
): { members: { node: k8s.V1Node; machine: Machine }[]; pending: number } {
  const members: { node: k8s.V1Node; machine: Machine }[] = [];
  let pending = 0;
  for (const machine of machines) {
    if (
      machine.metadata.labels?.[LABELS.capiSetName] !== ms.metadata.name ||
      machine.spec.clusterName !== ms.spec.clusterName
    )
      continue;
    const name = machine.status?.nodeRef?.name;
    const node = name ? nodeOf(name) : undefined;
    if (node) members.push({ node, machine });
    else if (!machine.metadata.deletionTimestamp) pending++;
  }
  return { members, pending };
}

/**
 * Up to `capacity` idle nodes: unavailable ones first (updating them costs no availability), then one at a
 * time from the zone with the fewest nodes busy (already updating, or picked now), then by name.
 */
export function pickNodes(nodes: readonly NodeView[], capacity: number): string[] {
  if (capacity <= 0) return [];
  const idle = nodes.filter((n) => n.phase === 'idle').sort((a, b) => a.name.localeCompare(b.name));
  const picked = idle.filter((n) => n.unavailable).slice(0, capacity);
  const busy = new ZoneCount([...nodes.filter((n) => n.phase === 'updating' || n.phase === 'degraded'), ...picked]);
  const byZone = Map.groupBy(
    idle.filter((x) => !x.unavailable),
    (n) => n.zone,
  );
  while (picked.length < capacity && byZone.size > 0) {
    const zone = busy.leastBusy([...byZone.keys()]);
    const queue = byZone.get(zone) ?? [];
    const next = queue.shift();
    if (next) picked.push(next);
    busy.add(zone);
    if (queue.length === 0) byZone.delete(zone);
  }
  return picked.map((n) => n.name);
}

class ZoneCount {
  #count = new Map<string, number>();
  constructor(nodes: readonly NodeView[]) {
    for (const n of nodes) this.add(n.zone);
  }
  add(zone: string): void {
    this.#count.set(zone, this.get(zone) + 1);
  }
  get(zone: string): number {
    return this.#count.get(zone) ?? 0;
  }
  /** The zone with the fewest busy nodes; ties by zone name. */
  leastBusy(zones: string[]): string {
    return zones.sort((a, b) => this.get(a) - this.get(b) || a.localeCompare(b))[0] ?? '';
  }
}

export interface RolloutPlan {
  /** Nodes, plus Machines that have no Node yet. */
  total: number;
  done: number;
  /** The first degraded node (by name): the rollout is halted on it; `waiting` when it only waits for the
   * maintenance window (NodeView.waiting). */
  halted?: { node: string; reason: string; waiting?: true };
  /** Nodes in flight towards an older target: point them at the new one. */
  retarget: string[];
  /** Idle nodes to start now. */
  start: string[];
  complete: boolean;
  /** "N of M updated", then, when paused, "; paused at N of M…", then the nodes whose drain a budget holds up:
   * "; n03 draining, blocked by PodDisruptionBudget ns/x". */
  progress: string;
}

/** Blocked drains named in the progress at most; the rest are counted. */
const MAX_BLOCKED_SHOWN = 3;

/** "; <node> draining, blocked by <budget>" for each updating node whose drain is held up, by name. */
function blockedProgress(nodes: readonly NodeView[]): string {
  const blocked = nodes
    .filter((n) => n.phase === 'updating' && n.blockedBy)
    .sort((a, b) => a.name.localeCompare(b.name));
  const shown = blocked.slice(0, MAX_BLOCKED_SHOWN).map((n) => `; ${n.name} draining, blocked by ${n.blockedBy}`);
  const more =
    blocked.length > MAX_BLOCKED_SHOWN ? `; ${blocked.length - MAX_BLOCKED_SHOWN} more draining nodes blocked` : '';
  return shown.join('') + more;
}

/** The degraded node that halts the rollout: the first failed one by name, else the first waiting one. A failure
 * is never hidden behind a node that only waits for the window: the pool's status and the health gate read it. */
function haltedOn(nodes: readonly NodeView[]): RolloutPlan['halted'] {
  const degraded = nodes
    .filter((n) => n.phase === 'degraded')
    .sort((a, b) => Number(a.waiting ?? false) - Number(b.waiting ?? false) || a.name.localeCompare(b.name))[0];
  if (!degraded) return undefined;
  return { node: degraded.name, reason: degraded.reason ?? '', ...(degraded.waiting ? { waiting: true } : {}) };
}

const inFlightCount = (nodes: readonly NodeView[]): number => nodes.filter((n) => n.phase === 'updating').length;

/** Nodes in flight towards an older target, by name. */
const retargets = (nodes: readonly NodeView[], target: string): string[] =>
  nodes
    .filter((n) => n.phase === 'updating' && n.desiredConfig !== target)
    .map((n) => n.name)
    .sort();

/**
 * `pending`: the MachineSet's Machines without a Node yet (provisioning, or a Node gone). They block
 * completion: a Machine created before the target moved may boot an older payload, and current = target
 * is a claim about every node of the set. They take no capacity: they never were available.
 * `paused` (the pool's spec.pausedUntil): no node is handed out, neither started nor retargeted; nodes
 * handed out before finish (the agent needs nothing more from the upgrader), and the progress says where
 * the rollout stopped. `held` (the child's ANNOTATIONS.rolloutHold: the maintenance window is closed or the
 * health gate fails): the same, the progress saying why.
 */
export function planRollout(
  nodes: readonly NodeView[],
  target: string,
  maxUnavailable: number,
  opts: { pending?: number; paused?: boolean; held?: string } = {},
): RolloutPlan {
  const { pending = 0, held } = opts;
  const paused = opts.paused === true || held !== undefined;
  const done = nodes.filter((n) => n.phase === 'done').length;
  const total = nodes.length + pending;
  const halted = haltedOn(nodes);
  const busy = nodes.filter((n) => n.phase === 'updating' || n.phase === 'degraded' || n.unavailable).length;
  const handOut = !halted && !paused;
  const pause = opts.paused
    ? pausedProgress(done, total, inFlightCount(nodes))
    : held === undefined
      ? ''
      : heldProgress(done, total, inFlightCount(nodes), held);
  return {
    total,
    done,
    halted,
    retarget: paused ? [] : retargets(nodes, target),
    start: handOut ? pickNodes(nodes, maxUnavailable - busy) : [],
    complete: done === nodes.length && pending === 0,
    progress: `${done} of ${total} updated${pause}${blockedProgress(nodes)}`,
  };
}
