/**
 * `kindling plan`'s upgrade targets, as `kubeadm upgrade plan` lists versions: the release tags the pool's
 * registry offers above the version its nodes run, each with the skew policy's verdict (the controller's own
 * rules, with the pool's overrides), so the ones it would refuse say why.
 */
import {
  SKEW_POLICIES,
  checkPolicy,
  formatVersion,
  parseVersion,
  type NodePoolPreview,
  type SkewInput,
  type Version,
} from '../../nodepool-controller/src/preview.js';
import { imageRepository } from '../../support/src/registry-tags.js';
import type { PlanInput, UpgradeTarget, UpgradeTargets } from './plan-model.js';

/** Reads the tags of an image's repository. */
export type TagLister = (image: string) => Promise<string[]>;

function compare(a: Version, b: Version): number {
  const d = a.major - b.major || a.minor - b.minor || a.patch - b.patch;
  if (d !== 0 || a.prerelease === b.prerelease) return d;
  if (a.prerelease === '') return 1;
  return b.prerelease === '' || a.prerelease < b.prerelease ? -1 : 1;
}

function verdictOn(tag: string, version: Version, input: SkewInput): UpgradeTarget {
  const base = { tag, version: formatVersion(version) };
  const overridden: string[] = [];
  for (const policy of SKEW_POLICIES) {
    const v = checkPolicy(policy, { ...input, node: version });
    if (!v.ok) return { ...base, status: 'refused', reason: v.reason, message: v.message };
    if (v.overridden) overridden.push(v.message);
  }
  if (overridden.length > 0) return { ...base, status: 'overridden', message: overridden.join('. ') };
  return { ...base, status: 'available', message: 'Every version rule passes' };
}

function skewInput(input: PlanInput, controlPlane: Version, current: Version | undefined): SkewInput {
  return {
    node: controlPlane,
    controlPlane,
    ...(current ? { current } : {}),
    maxMinorsBehind: input.maxSkewMinors,
    allowPrerelease: input.pool.spec.release.allowPrerelease ?? false,
    allowSkips: input.pool.spec.release.allowSkips ?? [],
  };
}

/** The version tags above the current version, newest first. */
function above(tags: readonly string[], current: Version | undefined): { tag: string; version: Version }[] {
  return tags
    .flatMap((tag) => {
      const version = parseVersion(tag);
      return version && (!current || compare(version, current) > 0) ? [{ tag, version }] : [];
    })
    .sort((a, b) => compare(b.version, a.version));
}

/** `host/repository` of a registry image; the reference as written otherwise (listing its tags then says why not). */
function repositoryName(image: string): string {
  try {
    const { host, repository } = imageRepository(image);
    return `${host}/${repository}`;
  } catch {
    return image;
  }
}

/** The upgrade targets of the planned pool; undefined without a tag lister. */
export async function upgradeTargets(
  input: PlanInput,
  p: NodePoolPreview,
  tags: TagLister | undefined,
): Promise<UpgradeTargets | undefined> {
  if (!tags) return undefined;
  const image = input.pool.spec.release.image;
  const current = p.deployed?.version ?? p.target?.version;
  const base = { repository: repositoryName(image), ...(current ? { current: formatVersion(current) } : {}) };
  const controlPlane = parseVersion(p.skew.controlPlane.version ?? '');
  if (!controlPlane) return { ...base, targets: [], error: 'the control plane version is unknown' };
  let offered: string[];
  try {
    offered = await tags(image);
  } catch (err) {
    return { ...base, targets: [], error: err instanceof Error ? err.message : String(err) };
  }
  const skew = skewInput(input, controlPlane, current);
  return { ...base, targets: above(offered, current).map(({ tag, version }) => verdictOn(tag, version, skew)) };
}
