/**
 * The token and user-data Secrets. The target becomes effective (what the children point at) once its token
 * Secret holds the token the ignition server minted; until then the children stay at the deployed hash.
 */
import type * as k8s from '#k8s';
import { ANNOTATIONS, SECRET_KEYS, userDataSecretName } from '../../../api/src/keys.js';
import { NotReadyError } from '../../../support/src/errors.js';
import { formatVersion } from '../release.js';
import { desiredTokenSecret, desiredUserDataSecret } from '../desired-secrets.js';
import { applyIfNeeded } from '../apply.js';
import { AwaitingAnswer, CONTINUE, type PhaseResult } from './result.js';
import { deployedEffective, type Evaluation } from './inputs.js';
import {
  secretText,
  tokenSecret,
  type Decision,
  type Effective,
  type PhaseDeps,
  type Scope,
  type Target,
  inPool,
} from './scope.js';

/** How soon a pool waiting for its token is looked at again (and how long a fresh token may stay unminted). */
const MINT_RETRY_MS = 5_000;
/** How long a new pool's first status waits for the ignition server's answer while the server is minting others
 * (a queue of a thousand new pools takes it a minute or two on a loaded machine). */
const FIRST_ANSWER_PATIENCE_MS = 5 * 60_000;
/** A server that minted within this long is at work: it mints in batches, seconds apart on a loaded machine. */
const MINTING_LATELY_MS = 30_000;

/**
 * Whether the answer to the token Secret is expected soon: it was written within the retry, or, up to the
 * patience, the server minted some token of the namespace lately (it is working through a queue, ours in it).
 */
export function answerExpected(now: number, createdMs: number, mintSeenMs: number): boolean {
  const age = now - createdMs;
  return age < MINT_RETRY_MS || (age < FIRST_ANSWER_PATIENCE_MS && now - mintSeenMs < MINTING_LATELY_MS);
}

/** The token Secret of a target that may roll out, and the decision it makes: the target once minted. */
export async function phaseToken(
  s: Scope,
  deps: PhaseDeps,
  e: Evaluation,
): Promise<{ decision: Decision; result: PhaseResult }> {
  const target = e.blocked === undefined ? e.target : undefined;
  const deployed = deployedEffective(e.deployed);
  if (!target) return { decision: { effective: deployed }, result: CONTINUE };
  const live = await applyIfNeeded(
    deps,
    tokenSecret(s, deps, target.hash),
    desiredToken(s, target),
    deps.caches.secrets,
  );
  const created = new Date(live.metadata?.creationTimestamp ?? NaN).getTime();
  const expected = answerExpected(s.now, created, deps.mints?.seenMsIn(s.ns) ?? Number.NEGATIVE_INFINITY);
  if (secretText(live, SECRET_KEYS.token) === undefined) {
    s.obs.pending = `Waiting for the ignition server to mint the token of config hash ${target.hash}`;
    const error = new (expected ? AwaitingAnswer : NotReadyError)(s.obs.pending, MINT_RETRY_MS);
    return { decision: { effective: deployed, rolling: target }, result: { kind: 'notReady', error } };
  }
  return {
    decision: { effective: targetEffective(target), rolling: target },
    result: awaitVerdict(s, live, target, expected),
  };
}

/**
 * A new pool's first status may also wait for the payload verdict, which follows the token within moments when
 * the token came first (the pools minted while their release's payload is generated for the first time): one
 * status with the verdict, not one without and another with it. The writes go on meanwhile; if the verdict
 * does not come, the retry writes the status that says the payload is awaited.
 */
function awaitVerdict(s: Scope, live: k8s.V1Secret, target: Target, expected: boolean): PhaseResult {
  if (
    !expected ||
    s.pool.status?.conditions !== undefined ||
    live.metadata?.annotations?.[ANNOTATIONS.payloadReason] !== undefined
  )
    return CONTINUE;
  const error = new AwaitingAnswer(
    `Waiting for the ignition server's payload verdict of config hash ${target.hash}`,
    MINT_RETRY_MS,
  );
  return { kind: 'notReady', error };
}

/** The token Secret of a target as the controller applies it (the ignition server adds the token). */
export function desiredToken(s: Scope, target: Target): k8s.V1Secret {
  return desiredTokenSecret(s.pool, { hash: target.hash, inputs: target.inputs });
}

/** The target as what the children point at. */
export function targetEffective(target: Target): Effective {
  return { hash: target.hash, version: formatVersion(target.version) };
}

export async function phaseUserData(s: Scope, deps: PhaseDeps, d: Decision): Promise<PhaseResult> {
  if (!d.effective) return CONTINUE;
  const { hash } = d.effective;
  const token = secretText(tokenSecret(s, deps, hash), SECRET_KEYS.token);
  if (token === undefined) return CONTINUE;
  const desired = desiredUserDataSecret({ pool: s.pool, hash, token, ...deps.config.ignition });
  const live = deps.caches.secrets.get(inPool(s, userDataSecretName(s.pool.metadata.name, hash)));
  await applyIfNeeded(deps, live, desired, deps.caches.secrets);
  return CONTINUE;
}
