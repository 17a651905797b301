/**
 * Inputs: the release and the config ConfigMaps → the target hash, then the version-skew policy against the
 * guest control plane. No write: `kindling plan` runs these as they are. The target becomes what the children
 * point at only when it is not blocked (and, later, its token exists).
 */
import { isConditionError } from '../condition-error.js';
import { findKubeconfigRefusal } from '../../../support/src/guest-kubeconfig-parse.js';
import { configHash, normaliseConfig, type ConfigSource } from '../hash.js';
import { formatVersion, parseVersion, type Version } from '../release.js';
import { checkVersionSkew, poolSkewInput, skewCondition } from '../skew.js';
import { CONTINUE, requeueAfter, type PhaseResult } from './result.js';
import { hashOfBootstrap, liveChild, type Deployed, type PhaseDeps, type Scope, type Target, inPool } from './scope.js';

/** The target hash and the verdicts on it. */
export interface Evaluation {
  deployed?: Deployed;
  /** Absent when the release or config is invalid. */
  target?: Target;
  /** Why the target may not roll out (bad input, skew, control plane unreachable); absent when it may. */
  blocked?: string;
  result: PhaseResult;
}

async function checkRelease(s: Scope, deps: PhaseDeps): Promise<Version | undefined> {
  try {
    const version = await deps.releases.versionOf(s.pool.spec.release.image);
    s.obs.release = {
      ok: true,
      reason: 'AsExpected',
      message: `Release ${formatVersion(version)}`,
      version: formatVersion(version),
    };
    return version;
  } catch (err) {
    if (!isConditionError(err, 'ValidReleaseImage'))
      throw new Error('failed to resolve the release version', { cause: err });
    s.obs.release = { ok: false, reason: err.reason, message: err.message };
    return undefined;
  }
}

function checkConfig(s: Scope, deps: PhaseDeps): string | undefined {
  const sources: ConfigSource[] = [];
  for (const ref of s.pool.spec.config ?? []) {
    const cm = deps.caches.configMaps.get(inPool(s, ref.name));
    if (!cm) {
      s.obs.config = {
        ok: false,
        reason: 'ConfigMapMissing',
        message: `ConfigMap ${ref.name} does not exist in namespace ${s.ns}`,
      };
      return undefined;
    }
    sources.push({ name: ref.name, data: cm.data ?? {} });
  }
  try {
    const config = normaliseConfig(sources);
    s.obs.config = { ok: true, reason: 'AsExpected', message: `${sources.length} config ConfigMaps are valid` };
    return config;
  } catch (err) {
    if (!isConditionError(err, 'ValidMachineConfig')) throw err;
    s.obs.config = { ok: false, reason: err.reason, message: err.message };
    return undefined;
  }
}

export function deployedOf(s: Scope, deps: PhaseDeps): Deployed | undefined {
  const child = liveChild(s, deps);
  const hash = hashOfBootstrap(s.pool.metadata.name, child?.spec.template.spec.bootstrap);
  return hash === undefined ? undefined : { hash, version: parseVersion(child?.spec.template.spec.version ?? '') };
}

async function phaseInputs(s: Scope, deps: PhaseDeps): Promise<{ deployed?: Deployed; target?: Target }> {
  const version = await checkRelease(s, deps);
  const config = checkConfig(s, deps);
  const deployed = deployedOf(s, deps);
  if (version === undefined || config === undefined) return { deployed };
  const inputs = { release: s.pool.spec.release.image, config };
  const target = { hash: configHash(inputs), inputs, version };
  s.obs.targetHash = target.hash;
  return { deployed, target };
}

/** The control plane's version could not be read: its kubeconfig was refused, or the guest did not answer. */
function versionUnknown(s: Scope, err: unknown): { blockedBy: string; result: PhaseResult } {
  const refused = findKubeconfigRefusal(err);
  const why = refused?.message ?? (err instanceof Error ? err.message : String(err));
  s.obs.skew = {
    ok: false,
    reason: refused ? 'GuestKubeconfigRefused' : 'ControlPlaneUnreachable',
    message: `Cannot read the version of cluster ${s.pool.spec.clusterName}'s control plane: ${why}`,
  };
  // Nothing watches the kubeconfig Secret: a fixed one is read again on this requeue.
  return { blockedBy: 'the control plane version is unknown', result: requeueAfter(refused ? 30_000 : 10_000) };
}

/** Why the target may not roll out, if it may not; and when to look again. */
async function phaseSkew(
  s: Scope,
  deps: PhaseDeps,
  target: Target,
  deployed: Deployed | undefined,
): Promise<{ blockedBy?: string; result: PhaseResult }> {
  let controlPlane: Version;
  try {
    controlPlane = await deps.versions.versionOf(s.ns, s.pool.spec.clusterName);
  } catch (err) {
    return versionUnknown(s, err);
  }
  const versions = { node: target.version, controlPlane, current: deployed?.version };
  const verdict = checkVersionSkew(poolSkewInput(s.pool, versions, deps.config.maxSkewMinors));
  s.obs.skew = skewCondition(verdict);
  return verdict.ok ? { result: CONTINUE } : { blockedBy: verdict.message, result: CONTINUE };
}

/** The target hash and the verdicts on it (release, config, version skew), without any write. */
export async function evaluateTarget(s: Scope, deps: PhaseDeps): Promise<Evaluation> {
  const { deployed, target } = await phaseInputs(s, deps);
  if (!target) {
    s.obs.pending = "The pool's release or config is invalid: nothing changes until it is fixed";
    return { deployed, blocked: s.obs.pending, result: CONTINUE };
  }
  const skew = await phaseSkew(s, deps, target, deployed);
  // A blocked target that is already deployed changes nothing: it is not reported as blocked.
  if (skew.blockedBy === undefined || deployed?.hash === target.hash) return { deployed, target, result: skew.result };
  s.obs.pending = `The change to config hash ${target.hash} is blocked: ${skew.blockedBy}`;
  return { deployed, target, blocked: s.obs.pending, result: skew.result };
}

/** The deployed hash, as the children keep pointing at it while the target may not or cannot roll out. */
export function deployedEffective(deployed: Deployed | undefined): { hash: string; version: string } | undefined {
  return deployed?.version ? { hash: deployed.hash, version: formatVersion(deployed.version) } : undefined;
}
