/**
 * The ordered phases of a NodePool reconcile (each in phases/, by concern). Each reads the caches, may write
 * one kind of object, records what it saw in the observations for the status, and returns a PhaseResult; the
 * runner folds those into one Outcome. The target hash (from the spec) becomes the effective hash (what the
 * children point at) only when its inputs are valid, the version-skew policy passes and its token exists;
 * until then everything else (replicas, labels, taints, timeouts) keeps reconciling at the deployed hash. The
 * rollout gate (maintenance window, health gate) holds a target from starting, and a rollout under way from
 * handing out its next node.
 */
import { phasePause } from './phases/pause.js';
import { deployedEffective, deployedOf, evaluateTarget, type Evaluation } from './phases/inputs.js';
import { phaseToken, phaseUserData } from './phases/secrets.js';
import {
  phaseBootstrapConfigs,
  phaseChildren,
  phaseHealthCheck,
  phaseMachines,
  phaseNodes,
} from './phases/children.js';
import { phaseCleanup } from './phases/cleanup.js';
import { phaseGate } from './phases/gate.js';
import { observe } from './phases/observe.js';
import { combine, NO_OUTCOME, type Outcome, type PhaseResult } from './phases/result.js';
import type { Decision, PhaseDeps, Scope } from './phases/scope.js';

export { newScope, type ControllerConfig, type PhaseDeps, type Scope } from './phases/scope.js';
export type { Outcome } from './phases/result.js';

type WritingPhase = (s: Scope, deps: PhaseDeps, d: Decision) => Promise<PhaseResult>;

/** Phases that write at the decided hash; skipped while the pool is paused. */
const WRITING_PHASES: WritingPhase[] = [
  phaseUserData,
  phaseChildren,
  phaseBootstrapConfigs,
  phaseHealthCheck,
  phaseMachines,
  phaseNodes,
  phaseCleanup,
];

/** What the phases before the writing ones decided: the hash the children point at, and the one rolling out. */
function heldDecision(evaluation: Evaluation): Decision {
  const rolling = evaluation.blocked === undefined ? evaluation.target : undefined;
  return { effective: deployedEffective(evaluation.deployed), rolling };
}

/**
 * The decision the writing phases work to, and the verdicts of the phases before them. `seen` keeps the target's
 * evaluation, so a failure after it still tells the status what is wanted.
 */
async function decide(
  s: Scope,
  deps: PhaseDeps,
  seen: { evaluation?: Evaluation },
): Promise<{ outcome: Outcome; decision: Decision }> {
  let outcome = combine(NO_OUTCOME, await phasePause(s, deps));
  const evaluated = await evaluateTarget(s, deps);
  const gate = await phaseGate(s, deps, evaluated);
  const evaluation = gate.blocked === undefined ? evaluated : { ...evaluated, blocked: gate.blocked };
  seen.evaluation = evaluation;
  outcome = combine(combine(outcome, evaluation.result), gate.result);
  if (outcome.stopped) return { outcome, decision: heldDecision(evaluation) };
  const token = await phaseToken(s, deps, evaluation);
  const decision = {
    ...token.decision,
    ...(gate.hold === undefined ? {} : { hold: gate.hold }),
    ...(gate.ceiling === undefined ? {} : { ceiling: gate.ceiling }),
  };
  return { outcome: combine(outcome, token.result), decision };
}

export async function runPhases(s: Scope, deps: PhaseDeps): Promise<Outcome> {
  const seen: { evaluation?: Evaluation } = {};
  let decision: Decision | undefined;
  try {
    let outcome: Outcome;
    ({ outcome, decision } = await decide(s, deps, seen));
    if (!outcome.stopped)
      for (const phase of WRITING_PHASES) outcome = combine(outcome, await phase(s, deps, decision));
    return outcome;
  } finally {
    // Also after a failure, wherever it came: the status is written from these observations, and one without the
    // deployed hash would drop configHash, version and rollout, and with them the ignition server's trust in the
    // deployed token Secret; one without the target would say the pool is at its desired config. Before the target
    // was evaluated, the children say what is deployed.
    const held = seen.evaluation
      ? heldDecision(seen.evaluation)
      : { effective: deployedEffective(deployedOf(s, deps)) };
    observe(s, deps, decision ?? held);
  }
}
