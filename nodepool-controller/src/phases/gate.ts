/**
 * The rollout gate of a reconcile (rollout-gate.ts decides): read the window and the pool's health from the
 * observations and the caches, hold a rollout that would start (the target stays undeployed) or one under way
 * (the child carries ANNOTATIONS.rolloutHold for the in-place engines), mark a used override consumed, and
 * look at the pool again when the window opens or closes. Scaling, labels, taints and timeouts are not held:
 * they reconcile at the deployed hash; nor is a config change the disruption policy applies with neither a
 * drain nor a reboot (rollout-record.ts judges it as status.rollout records it).
 */
import type { Machine } from '../../../api/src/capi.js';
import { ANNOTATIONS } from '../../../api/src/keys.js';
import { effectiveDisruptionPolicy } from '../../../api/src/disruption.js';
import {
  hasMachineDeployment,
  inPlaceEngine,
  type NodePool,
  type RolloutDisruption,
} from '../../../api/src/nodepool.js';
import { resolveFenceposts, resolveMaxUnavailable } from '../../../support/src/int-or-percent.js';
import { isConditionError } from '../condition-error.js';
import { parseWindow, type ParsedWindow } from '../maintenance-window.js';
import { decideRolloutGate, quietAction, type GateVerdict, type PoolHealth } from '../rollout-gate.js';
import { rolloutDisruption } from '../rollout-record.js';
import { desiredReplicas } from '../capi.js';
import { CONTINUE, requeueAfter, type PhaseResult } from './result.js';
import type { Evaluation } from './inputs.js';
import { hashInputs, inPool, liveChild, tokenSecret, type PhaseDeps, type Scope } from './scope.js';
import { templateChange } from './observe.js';

/** The pool's window as the status reports it; an Error (nothing disruptive starts) when it cannot be read. */
function readWindow(s: Scope): ParsedWindow | Error | undefined {
  const spec = s.pool.spec.management.maintenanceWindow;
  if (!spec) return undefined;
  try {
    const w = parseWindow(spec);
    s.obs.window = {
      ok: true,
      reason: 'AsExpected',
      message: `Disruptive work starts only in windows of ${spec.duration} from "${spec.schedule}" (${w.timeZone})`,
    };
    return w;
  } catch (err) {
    if (!isConditionError(err, 'ValidMaintenanceWindow')) throw err;
    s.obs.window = { ok: false, reason: err.reason, message: err.message };
    return err;
  }
}

/** The unavailable nodes the pool's rollout strategy tolerates. */
function maxUnavailableOf(pool: NodePool, replicas: number): number {
  if (pool.spec.management.upgradeType === 'InPlace')
    return resolveMaxUnavailable(pool.spec.management.inPlace?.maxUnavailable, replicas);
  const rolling = pool.spec.management.replace?.rollingUpdate;
  return resolveFenceposts(rolling?.maxSurge ?? 1, rolling?.maxUnavailable ?? 0, replicas).maxUnavailable;
}

/** A Machine whose node Cluster API reports unhealthy (NodeHealthy False or Unknown). One with no such
 * condition yet is still provisioning: it has no node to be unavailable. */
const nodeUnhealthy = (m: Machine): boolean => {
  const conditions = (m.status as { conditions?: { type: string; status: string }[] } | undefined)?.conditions;
  const status = conditions?.find((c) => c.type === 'NodeHealthy')?.status;
  return status !== undefined && status !== 'True';
};

/** A Degraded node as the in-place engines report it: on the MachineSet (upgrader) or a Machine (extension). One
 * that only waits for the window (ANNOTATIONS.inPlaceWaiting) is not unhealthy: the window opening lets it on. */
function degradedOf(s: Scope, deps: PhaseDeps, machines: readonly Machine[]): string | undefined {
  if (inPlaceEngine(s.pool) === 'MachineSet')
    return deps.caches.machineSets.get(inPool(s, s.pool.metadata.name))?.metadata.annotations?.[
      ANNOTATIONS.inPlaceFailure
    ];
  return machines.map((m) => m.metadata.annotations?.[ANNOTATIONS.inPlaceFailure]).find((f) => f !== undefined);
}

function healthOf(s: Scope, deps: PhaseDeps): PoolHealth {
  const machines = deps.caches.poolMachines(s.ns, s.pool.metadata.name).filter((m) => !m.metadata.deletionTimestamp);
  const skew = s.obs.skew;
  const degraded = degradedOf(s, deps, machines);
  const unreachable = skew && (skew.reason === 'ControlPlaneUnreachable' || skew.reason === 'GuestKubeconfigRefused');
  return {
    ...(unreachable ? { controlPlaneUnreachable: skew.message } : {}),
    ...(degraded === undefined ? {} : { degraded }),
    unavailable: machines
      .filter(nodeUnhealthy)
      .map((m) => m.metadata.name)
      .sort(),
    maxUnavailable: maxUnavailableOf(s.pool, desiredReplicas(s.pool, liveChild(s, deps)?.spec.replicas)),
  };
}

/** The hash a rollout moves to (one that would start, or one under way) and whether the health gate applies:
 * to a start from a settled pool, and to a rollout under way only while it is held (it may not resume until
 * the pool is healthy); not to a new target that supersedes a rollout under way, which may be its fix. */
interface Rollout {
  to: string;
  healthGated: boolean;
  /** What each node of it does by the disruption policy, when known and in place. */
  disruption?: RolloutDisruption;
}

function rolloutTo(s: Scope, deps: PhaseDeps, e: Evaluation): Rollout | undefined {
  const starting = startingTarget(e);
  if (starting !== undefined)
    return {
      to: starting,
      healthGated: s.pool.status?.rollout === undefined,
      disruption: startingDisruption(s, deps, e),
    };
  return e.deployed === undefined ? undefined : rolloutAt(s, deps, e.deployed.hash);
}

/** A rollout at the deployed hash: the one status.rollout records, or one that starts from a new infrastructure
 * template alone, which replaces the Machines of a MachineDeployment too. */
function rolloutAt(s: Scope, deps: PhaseDeps, deployed: string): Rollout | undefined {
  const recorded = s.pool.status?.rollout;
  const underWay = recorded?.to === deployed ? recorded : undefined;
  if (underWay === undefined && !newTemplate(s, deps)) return undefined;
  const disruption = underWay?.disruption;
  return { to: deployed, healthGated: held(s, deps) || !underWay, ...(disruption ? { disruption } : {}) };
}

const newTemplate = (s: Scope, deps: PhaseDeps): boolean =>
  hasMachineDeployment(s.pool) && templateChange(s, deps) !== undefined;

/** The live child carries a hold: the rollout may not resume until the pool is healthy. */
const held = (s: Scope, deps: PhaseDeps): boolean =>
  liveChild(s, deps)?.metadata.annotations?.[ANNOTATIONS.rolloutHold] !== undefined;

/** The disruption of the change from the deployed inputs (its token Secret's) to the target's. Unknown (the
 * window holds it) when those inputs are not the deployed hash's (hashInputs) or cannot be parsed. */
function startingDisruption(s: Scope, deps: PhaseDeps, e: Evaluation): RolloutDisruption | undefined {
  if (e.deployed === undefined || e.target === undefined) return undefined;
  const before = hashInputs(s, deps, e.deployed.hash);
  try {
    if (before !== undefined)
      return rolloutDisruption({
        upgradeType: s.pool.spec.management.upgradeType,
        engine: inPlaceEngine(s.pool),
        from: e.deployed.hash,
        to: e.target.hash,
        before,
        after: e.target.inputs,
        disruptionPolicy: effectiveDisruptionPolicy(s.pool.spec.management.inPlace?.disruptionPolicy),
      });
  } catch {
    // Not logged: the parser's message quotes the config, which may hold credentials.
  }
  if (tokenSecret(s, deps, e.deployed.hash) !== undefined)
    s.log.info(
      { deployed: e.deployed.hash },
      "The deployed token Secret's inputs are not its hash's: the change counts as disruptive",
    );
  return undefined;
}

/** The target, when it may roll out and differs from what a live child boots (a new pool starts no rollout). */
function startingTarget(e: Evaluation): string | undefined {
  if (e.blocked !== undefined || e.deployed === undefined || e.target === undefined) return undefined;
  return e.target.hash === e.deployed.hash ? undefined : e.target.hash;
}

export interface Gate {
  /** Why the target may not start rolling out now. */
  blocked?: string;
  /** Why no node may be handed out now (the child's ANNOTATIONS.rolloutHold). */
  hold?: string;
  /** Why no node may drain or reboot now (the child's ANNOTATIONS.rolloutCeiling). */
  ceiling?: string;
  result: PhaseResult;
}

/** The gate's verdict on the rollout that would start or is under way, and its hash; no verdict when there is
 * none (the pool's window and health only show in the status then). Writes nothing: `kindling plan` runs it. */
export function evaluateGate(s: Scope, deps: PhaseDeps, e: Evaluation): { verdict?: GateVerdict; to?: string } {
  const window = readWindow(s);
  const rollout = rolloutTo(s, deps, e);
  if (rollout === undefined) return {};
  const verdict = decideRolloutGate({
    now: s.now,
    window,
    health: healthOf(s, deps),
    healthGated: rollout.healthGated,
    override: s.pool.metadata.annotations?.[ANNOTATIONS.overrideHealthGate],
    target: rollout.to,
    quiet: quietAction(rollout.disruption),
  });
  s.obs.gate = verdict;
  return { verdict, to: rollout.to };
}

export async function phaseGate(s: Scope, deps: PhaseDeps, e: Evaluation): Promise<Gate> {
  const { verdict, to } = evaluateGate(s, deps, e);
  if (!verdict) return { result: CONTINUE };
  if (verdict.consumeOverride !== undefined) await consume(s, deps, verdict);
  const result = verdict.recheckInMs === undefined ? CONTINUE : requeueAfter(verdict.recheckInMs + 500);
  if (verdict.allowed) return { result, ...(verdict.ceiling === undefined ? {} : { ceiling: verdict.ceiling }) };
  const starting = to !== e.deployed?.hash;
  if (starting) s.obs.pending = `The change to config hash ${to} is held: ${verdict.message}`;
  return { ...(starting ? { blocked: verdict.message } : {}), hold: verdict.message, result };
}

async function consume(s: Scope, deps: PhaseDeps, verdict: GateVerdict): Promise<void> {
  const patch = { metadata: { annotations: { [ANNOTATIONS.overrideHealthGate]: verdict.consumeOverride } } };
  await deps.writer.mergePatch(s.pool, patch, deps.caches.nodePools);
  s.log.info({ consumed: verdict.consumeOverride }, 'Health gate overridden for this rollout');
}
