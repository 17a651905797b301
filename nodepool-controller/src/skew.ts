/**
 * The version-skew policy (kubeadm's): a node is never newer than its control plane, at most N minors behind
 * it, an upgrade moves at most one minor, and a pre-release needs the pool's explicit opt-in.
 */
import type { CONDITIONS } from '../../api/src/conditions.js';
import { compareVersions, formatVersion, type Version } from './release.js';

export type SkewReason = Exclude<keyof (typeof CONDITIONS.SupportedVersionSkew)['reasons'], 'AsExpected' | 'ControlPlaneUnreachable'>;

export type SkewVerdict = { ok: true; message: string } | { ok: false; reason: SkewReason; message: string };

export interface SkewInput {
  /** The version of the pool's release. */
  node: Version;
  /** What the guest apiserver's /version says. */
  controlPlane: Version;
  /** The version the pool's nodes run now (the deployed release), if any. */
  current?: Version;
  maxMinorsBehind: number;
  allowPrerelease: boolean;
}

/** Minor distance a → b, counting a major bump as too far to measure in minors. */
function minorsBetween(from: Version, to: Version): number {
  return from.major === to.major ? to.minor - from.minor : Number.POSITIVE_INFINITY * Math.sign(to.major - from.major);
}

export function checkVersionSkew(input: SkewInput): SkewVerdict {
  const node = formatVersion(input.node);
  const cp = formatVersion(input.controlPlane);
  if (input.node.prerelease !== '' && !input.allowPrerelease) {
    return { ok: false, reason: 'PrereleaseNotAllowed', message: `Release ${node} is a pre-release: set spec.release.allowPrerelease to use it` };
  }
  if (compareVersions(input.node, input.controlPlane) > 0) {
    return { ok: false, reason: 'NodeNewerThanControlPlane', message: `Release ${node} is newer than the control plane (${cp}): upgrade the control plane first` };
  }
  const behind = minorsBetween(input.node, input.controlPlane);
  if (behind > input.maxMinorsBehind) {
    const why = `Release ${node} is ${Number.isFinite(behind) ? `${behind} minor versions` : 'a major version'} behind the control plane (${cp}); at most ${input.maxMinorsBehind} are supported`;
    return { ok: false, reason: 'TooFarBehindControlPlane', message: `${why}: choose a release of ${input.controlPlane.major}.${Math.max(0, input.controlPlane.minor - input.maxMinorsBehind)} or later` };
  }
  if (input.current && minorsBetween(input.current, input.node) > 1) {
    const current = formatVersion(input.current);
    const next = `${input.current.major}.${input.current.minor + 1}`;
    return { ok: false, reason: 'UpgradeSkipsMinor', message: `Upgrading the nodes from ${current} to ${node} skips a minor version: upgrade to a ${next} release first` };
  }
  return { ok: true, message: `Release ${node} is supported with control plane ${cp}` };
}
