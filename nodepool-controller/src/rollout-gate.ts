/**
 * May disruptive work start now (a rollout to a new config hash, or the next node of one under way)? A pure
 * decision with a typed reason, as csr-decision.ts is: first the maintenance window, which nothing overrides
 * and which holds only a change that drains or reboots (the disruption policy's verdict); then the health gate, kubeadm's pre-upgrade checks (the guest's control plane reachable, no node Degraded, no
 * more nodes unavailable than maxUnavailable), which ANNOTATIONS.overrideHealthGate lets one rollout pass.
 */
import type { ConditionReason } from '../../api/src/conditions.js';
import { HEALTH_GATE_CONSUMED } from '../../api/src/keys.js';
import type { RolloutDisruption } from '../../api/src/nodepool.js';
import { isoMinutes, windowAt, type ParsedWindow } from './maintenance-window.js';

type GateReason = ConditionReason<'RolloutAllowed'>;

/** What the health gate looks at, as the reconcile observed it. */
export interface PoolHealth {
  /** Why the guest's control plane cannot be reached, when it cannot. */
  controlPlaneUnreachable?: string;
  /** "<node>: <reason>" of a Degraded node, if any. */
  degraded?: string;
  /** Machines whose node is not healthy, by name. */
  unavailable: readonly string[];
  maxUnavailable: number;
}

export interface GateInput {
  now: number;
  /** The pool's window: absent when it has none; an Error when it cannot be read (nothing disruptive starts). */
  window?: ParsedWindow | Error;
  health: PoolHealth;
  /** Whether the health gate applies: to a rollout that starts from a settled pool or resumes after a hold, not
   * to one under way (its own engine halts on a Degraded node), nor to a new target that supersedes one (it may
   * be the fix of a halted rollout). */
  healthGated: boolean;
  /** ANNOTATIONS.overrideHealthGate as the pool has it. */
  override?: string;
  /** The config hash the rollout moves to. */
  target: string;
  /** What each node does, when the change neither drains nor reboots (quietAction): the window does not hold it. */
  quiet?: string;
}

export interface GateVerdict {
  allowed: boolean;
  reason: GateReason;
  message: string;
  /** When the verdict may change by itself (the window opens or closes). */
  recheckInMs?: number;
  /** The override annotation's new value: it was used for this target. */
  consumeOverride?: string;
  /** Why no node may drain or reboot now (ANNOTATIONS.rolloutCeiling): the change is let through only because it
   * is quiet, and a disruptive one would be held for this. The agent, which decides from the host, obeys it. */
  ceiling?: string;
}

/** The override applies: set and not used yet, or used for this very rollout. */
export function overrideApplies(value: string | undefined, target: string): boolean {
  if (value === undefined) return false;
  return !value.startsWith(HEALTH_GATE_CONSUMED) || value === `${HEALTH_GATE_CONSUMED}${target}`;
}

/**
 * The action of a change the disruption policy lets through with neither a drain nor a reboot ("none",
 * "restart kubelet.service"); undefined when it drains, reboots, replaces the Machines or is not known: only
 * that is disruptive work the maintenance window holds.
 */
export function quietAction(d: RolloutDisruption | undefined): string | undefined {
  return d && !d.drain && !d.reboot ? d.action : undefined;
}

function windowVerdict(input: GateInput): GateVerdict | { open: true; recheckInMs?: number } {
  const w = input.window;
  if (w === undefined || input.quiet !== undefined) return { open: true };
  if (w instanceof Error)
    return {
      allowed: false,
      reason: 'WaitingForMaintenanceWindow',
      message: `waiting for the maintenance window, which cannot be read: ${w.message}`,
    };
  const state = windowAt(w, input.now);
  if (state.open) return { open: true, recheckInMs: state.closesAt - input.now };
  if (state.opensAt === undefined)
    return {
      allowed: false,
      reason: 'WaitingForMaintenanceWindow',
      message: 'waiting for the maintenance window, whose schedule never opens again',
    };
  return {
    allowed: false,
    reason: 'WaitingForMaintenanceWindow',
    message: `waiting for the maintenance window (opens ${isoMinutes(state.opensAt)})`,
    recheckInMs: state.opensAt - input.now,
  };
}

/** The first failing health check, if any. */
function healthProblem(h: PoolHealth): { reason: GateReason; message: string } | undefined {
  if (h.controlPlaneUnreachable !== undefined)
    return {
      reason: 'ControlPlaneUnreachable',
      message: `the guest's control plane is unreachable: ${h.controlPlaneUnreachable}`,
    };
  if (h.degraded !== undefined) return { reason: 'NodeDegraded', message: `a node is Degraded: ${h.degraded}` };
  if (h.unavailable.length > h.maxUnavailable) {
    const names = h.unavailable.slice(0, 5).join(', ') + (h.unavailable.length > 5 ? ', …' : '');
    return {
      reason: 'TooManyNodesUnavailable',
      message: `${h.unavailable.length} node(s) are unavailable, more than maxUnavailable ${h.maxUnavailable}: ${names}`,
    };
  }
  return undefined;
}

function allowedMessage(input: GateInput): string {
  if (input.quiet === undefined || input.window === undefined) return 'Disruptive work may start';
  return `The change neither drains nor reboots a node (each node: ${input.quiet}): the maintenance window does not hold it`;
}

/** The verdict, with the ceiling of a change let through only because it is quiet: the hold a disruptive one
 * would get, so that a node whose host needs a drain or a reboot after all waits for it too. The window's next
 * edge is when to look again: the ceiling is lifted as the window opens and set as it closes. */
export function decideRolloutGate(input: GateInput): GateVerdict {
  const verdict = decide(input);
  if (!verdict.allowed || input.quiet === undefined) return verdict;
  const disruptive = decide({ ...input, quiet: undefined });
  const edge = disruptive.recheckInMs === undefined ? {} : { recheckInMs: disruptive.recheckInMs };
  return disruptive.allowed ? { ...verdict, ...edge } : { ...verdict, ceiling: disruptive.message, ...edge };
}

function decide(input: GateInput): GateVerdict {
  const window = windowVerdict(input);
  if ('allowed' in window) return window;
  const recheck = window.recheckInMs === undefined ? {} : { recheckInMs: window.recheckInMs };
  const problem = input.healthGated ? healthProblem(input.health) : undefined;
  if (!problem) return { allowed: true, reason: 'AsExpected', message: allowedMessage(input), ...recheck };
  if (!overrideApplies(input.override, input.target))
    return {
      allowed: false,
      reason: problem.reason,
      message: `the health gate holds the rollout: ${problem.message}`,
      ...recheck,
    };
  const consumed = `${HEALTH_GATE_CONSUMED}${input.target}`;
  return {
    allowed: true,
    reason: 'HealthGateOverridden',
    message: `The health gate failed (${problem.message}) and was overridden for config hash ${input.target}`,
    ...recheck,
    ...(input.override === consumed ? {} : { consumeOverride: consumed }),
  };
}
