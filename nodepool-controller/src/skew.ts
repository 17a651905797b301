/**
 * The version-skew policy (kubeadm's): a node is never newer than its control plane, at most N minors behind
 * it, never downgraded, an upgrade moves at most one minor, and a pre-release needs the pool's explicit opt-in.
 * Each rule is one entry of SKEW_POLICIES, so `kindling plan` can show every rule's verdict; the controller
 * takes the first refusal. As kubeadm splits its checks, a rule is mandatory or skippable: a pool overrides a
 * skippable one by naming it in spec.release.allowSkips, and the verdict then says it was overridden.
 */
import type { CONDITIONS } from '../../api/src/conditions.js';
import type { NodePool, VersionSkip } from '../../api/src/nodepool.js';
import { compareVersions, formatVersion, parseVersion, type Version } from './release.js';
import type { Verdict } from './status.js';

type SkewReason = Exclude<
  keyof (typeof CONDITIONS.SupportedVersionSkew)['reasons'],
  'AsExpected' | 'Overridden' | 'ControlPlaneUnreachable' | 'GuestKubeconfigRefused'
>;

/** A pass names the skippable rules it passed only because the pool overrides them. */
export type SkewVerdict =
  { ok: true; message: string; overridden?: VersionSkip[] } | { ok: false; reason: SkewReason; message: string };

export interface SkewInput {
  /** The version of the pool's release. */
  node: Version;
  /** What the guest apiserver's /version says. */
  controlPlane: Version;
  /** The version the pool's nodes run now (the deployed release), if any. */
  current?: Version;
  /** The version the pool last brought every node to (status.version): going back to it is no downgrade. */
  completed?: Version;
  maxMinorsBehind: number;
  allowPrerelease: boolean;
  /** spec.release.allowSkips. */
  allowSkips?: readonly VersionSkip[];
}

/** The skew input of a pool moving its nodes to `versions.node`: the pool's own rules, and where its nodes were. */
export function poolSkewInput(
  pool: Pick<NodePool, 'spec' | 'status'>,
  versions: { node: Version; controlPlane: Version; current: Version | undefined },
  maxMinorsBehind: number,
): SkewInput {
  return {
    ...versions,
    completed: parseVersion(pool.status?.version ?? ''),
    maxMinorsBehind,
    allowPrerelease: pool.spec.release.allowPrerelease ?? false,
    allowSkips: pool.spec.release.allowSkips ?? [],
  };
}

export interface SkewPolicy {
  /** The reason it refuses with. */
  reason: SkewReason;
  /** What the rule says, for `kindling plan`. */
  title: string;
  /** The name spec.release.allowSkips overrides it with; absent: mandatory. */
  skippable?: VersionSkip;
  check(input: SkewInput): SkewVerdict;
}

/** Minor distance a → b, counting a major bump as too far to measure in minors. */
function minorsBetween(from: Version, to: Version): number {
  return from.major === to.major ? to.minor - from.minor : Number.POSITIVE_INFINITY * Math.sign(to.major - from.major);
}

const pass = (message: string): SkewVerdict => ({ ok: true, message });

/** In the order the controller checks them. */
export const SKEW_POLICIES: readonly SkewPolicy[] = [
  {
    reason: 'PrereleaseNotAllowed',
    title: 'A pre-release needs spec.release.allowPrerelease',
    check(input: SkewInput): SkewVerdict {
      const node = formatVersion(input.node);
      if (input.node.prerelease === '') return pass(`Release ${node} is not a pre-release`);
      if (input.allowPrerelease) return pass(`Pre-release ${node} is allowed by spec.release.allowPrerelease`);
      return {
        ok: false,
        reason: 'PrereleaseNotAllowed',
        message: `Release ${node} is a pre-release: set spec.release.allowPrerelease to use it`,
      };
    },
  },
  {
    reason: 'NodeNewerThanControlPlane',
    title: 'Nodes are never newer than the control plane',
    check(input: SkewInput): SkewVerdict {
      const [node, cp] = [formatVersion(input.node), formatVersion(input.controlPlane)];
      if (compareVersions(input.node, input.controlPlane) <= 0)
        return pass(`Release ${node} is not newer than the control plane (${cp})`);
      return {
        ok: false,
        reason: 'NodeNewerThanControlPlane',
        message: `Release ${node} is newer than the control plane (${cp}): upgrade the control plane first`,
      };
    },
  },
  {
    reason: 'TooFarBehindControlPlane',
    title: 'Nodes are at most N minor versions behind the control plane',
    check(input: SkewInput): SkewVerdict {
      const [node, cp] = [formatVersion(input.node), formatVersion(input.controlPlane)];
      const behind = minorsBetween(input.node, input.controlPlane);
      if (behind <= 0) return pass(`Release ${node} is not behind the control plane (${cp}) by a minor version`);
      if (behind <= input.maxMinorsBehind)
        return pass(
          `Release ${node} is ${behind} minor versions behind the control plane (${cp}); at most ${input.maxMinorsBehind} are supported`,
        );
      const why = `Release ${node} is ${Number.isFinite(behind) ? `${behind} minor versions` : 'a major version'} behind the control plane (${cp}); at most ${input.maxMinorsBehind} are supported`;
      return {
        ok: false,
        reason: 'TooFarBehindControlPlane',
        message: `${why}: choose a release of ${input.controlPlane.major}.${Math.max(0, input.controlPlane.minor - input.maxMinorsBehind)} or later`,
      };
    },
  },
  {
    reason: 'Downgrade',
    title: 'Nodes are never downgraded',
    skippable: 'Downgrade',
    check(input: SkewInput): SkewVerdict {
      const node = formatVersion(input.node);
      if (!input.current) return pass('No nodes run a release yet');
      const current = formatVersion(input.current);
      if (compareVersions(input.node, input.current) >= 0) return pass(`From ${current} to ${node} is no downgrade`);
      // A rollout that did not finish (a release the kubelet refuses, say) is undone by moving back to where every
      // node was: no node goes below the release it ran.
      if (input.completed && compareVersions(input.node, input.completed) >= 0)
        return pass(`Back from ${current} to ${node}, which every node ran before the rollout: no downgrade`);
      return {
        ok: false,
        reason: 'Downgrade',
        message: `Release ${node} is older than the ${current} the nodes run: add Downgrade to spec.release.allowSkips to downgrade them`,
      };
    },
  },
  {
    reason: 'UpgradeSkipsMinor',
    title: 'An upgrade moves at most one minor version',
    skippable: 'MinorSkip',
    check(input: SkewInput): SkewVerdict {
      const node = formatVersion(input.node);
      if (!input.current) return pass('No nodes run a release yet');
      const current = formatVersion(input.current);
      if (minorsBetween(input.current, input.node) <= 1)
        return pass(`From ${current} to ${node} moves at most one minor version`);
      const next = `${input.current.major}.${input.current.minor + 1}`;
      return {
        ok: false,
        reason: 'UpgradeSkipsMinor',
        message: `Upgrading the nodes from ${current} to ${node} skips a minor version: upgrade to a ${next} release first, or add MinorSkip to spec.release.allowSkips`,
      };
    },
  },
];

/** A policy's verdict with the pool's overrides: a refusal of a rule the pool skips becomes an overridden pass. */
export function checkPolicy(policy: SkewPolicy, input: SkewInput): SkewVerdict {
  const verdict = policy.check(input);
  if (verdict.ok || policy.skippable === undefined || !input.allowSkips?.includes(policy.skippable)) return verdict;
  return {
    ok: true,
    message: `Overridden by spec.release.allowSkips (${policy.skippable}): ${verdict.message}`,
    overridden: [policy.skippable],
  };
}

/** The first refusal of SKEW_POLICIES, or a pass that names the overrides it needed. */
export function checkVersionSkew(input: SkewInput): SkewVerdict {
  const overrides: string[] = [];
  const overridden: VersionSkip[] = [];
  for (const policy of SKEW_POLICIES) {
    const verdict = checkPolicy(policy, input);
    if (!verdict.ok) return verdict;
    if (verdict.overridden) {
      overridden.push(...verdict.overridden);
      overrides.push(verdict.message);
    }
  }
  const supported = `Release ${formatVersion(input.node)} is supported with control plane ${formatVersion(input.controlPlane)}`;
  if (overridden.length === 0) return pass(supported);
  return { ok: true, message: `${supported}. ${overrides.join('. ')}`, overridden };
}

/** The condition's verdict: an overridden pass is True with reason Overridden, so the status shows it. */
export function skewCondition(v: SkewVerdict): Verdict<'SupportedVersionSkew'> {
  if (!v.ok) return { ok: false, reason: v.reason, message: v.message };
  return { ok: true, reason: v.overridden ? 'Overridden' : 'AsExpected', message: v.message };
}
