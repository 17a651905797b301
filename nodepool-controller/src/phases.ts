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
import { deployedEffective, deployedOf, evaluateTarget } from './phases/inputs.js';
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

/** The decision the writing phases work to, and the verdicts of the phases before them. */
async function decide(s: Scope, deps: PhaseDeps): Promise<{ outcome: Outcome; decision: Decision }> {
  let outcome = combine(NO_OUTCOME, await phasePause(s, deps));
  const evaluated = await evaluateTarget(s, deps);
  const gate = await phaseGate(s, deps, evaluated);
  const evaluation = gate.blocked === undefined ? evaluated : { ...evaluated, blocked: gate.blocked };
  outcome = combine(combine(outcome, evaluation.result), gate.result);
  if (outcome.stopped) {
    const rolling = evaluation.blocked === undefined ? evaluation.target : undefined;
    return { outcome, decision: { effective: deployedEffective(evaluation.deployed), rolling } };
  }
  const token = await phaseToken(s, deps, evaluation);
  const decision = {
    ...token.decision,
    ...(gate.hold === undefined ? {} : { hold: gate.hold }),
    ...(gate.ceiling === undefined ? {} : { ceiling: gate.ceiling }),
  };
  return { outcome: combine(outcome, token.result), decision };
}

/** The children as they are, for a reconcile that failed before it decided: they still point at the deployed hash
 * (read as evaluateTarget reads it), and the status must keep saying so, not that the pool has no hash. */
function deployedDecision(s: Scope, deps: PhaseDeps): Decision {
  return { effective: deployedEffective(deployedOf(s, deps)) };
}

export async function runPhases(s: Scope, deps: PhaseDeps): Promise<Outcome> {
  let decision: Decision | undefined;
  try {
    let outcome: Outcome;
    ({ outcome, decision } = await decide(s, deps));
    if (!outcome.stopped)
      for (const phase of WRITING_PHASES) outcome = combine(outcome, await phase(s, deps, decision));
    return outcome;
  } finally {
    // Also after a failure, wherever it came: the status is written from these observations, and one without the
    // deployed hash would drop configHash, version and rollout, and with them the ignition server's trust in the
    // deployed token Secret.
    observe(s, deps, decision ?? deployedDecision(s, deps));
  }
}
