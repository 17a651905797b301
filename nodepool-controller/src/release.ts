/**
 * The Kubernetes version a release image carries. The ignition server reads the real version from the release
 * manifest inside the image; the controller needs it only for the version-skew policy, so it sits behind an
 * interface: the default reads the image reference's tag, and a resolver that opens the image can replace it.
 */
import { ConditionError } from './condition-error.js';

export interface Version {
  major: number;
  minor: number;
  patch: number;
  /** "rc.1" in 1.37.0-rc.1; empty for a release. */
  prerelease: string;
}

/** Resolves a release image reference to the Kubernetes version it holds. */
export interface ReleaseVersionResolver {
  /** Throws ConditionError with a ValidReleaseImage reason when the reference cannot be understood. */
  versionOf(image: string): Promise<Version>;
}

const VERSION_RE = /^v?(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?$/;

export function parseVersion(text: string): Version | undefined {
  const m = VERSION_RE.exec(text.trim());
  if (!m) return undefined;
  return { major: Number(m[1]), minor: Number(m[2]), patch: Number(m[3]), prerelease: m[4] ?? '' };
}

export function formatVersion(v: Version): string {
  return `v${v.major}.${v.minor}.${v.patch}${v.prerelease === '' ? '' : `-${v.prerelease}`}`;
}

/** Semantic-version order; a pre-release sorts before its release (1.37.0-rc.1 < 1.37.0). */
export function compareVersions(a: Version, b: Version): number {
  const d = a.major - b.major || a.minor - b.minor || a.patch - b.patch;
  if (d !== 0) return d;
  if (a.prerelease === b.prerelease) return 0;
  if (a.prerelease === '') return 1;
  if (b.prerelease === '') return -1;
  return a.prerelease < b.prerelease ? -1 : 1;
}

/** The tag of an OCI reference (`registry:5000/repo:tag@sha256:…` → `tag`), if it has one. */
export function referenceTag(image: string): string | undefined {
  const withoutDigest = image.split('@')[0] ?? '';
  const lastPart = withoutDigest.slice(withoutDigest.lastIndexOf('/') + 1);
  const colon = lastPart.lastIndexOf(':');
  return colon < 0 ? undefined : lastPart.slice(colon + 1);
}

/** Reads the version from the reference's tag (`…:1.36.3` or `…:v1.36.3`). */
export const tagVersionResolver: ReleaseVersionResolver = {
  versionOf(image: string): Promise<Version> {
    if (/\s/.test(image) || image === '') {
      return Promise.reject(
        new ConditionError(`Release image "${image}" is not an image reference`, 'ValidReleaseImage', 'InvalidImage'),
      );
    }
    const tag = referenceTag(image);
    const version = tag === undefined ? undefined : parseVersion(tag);
    if (!version) {
      const why = `Release image "${image}" has no version tag (such as :1.36.3) to read its Kubernetes version from`;
      return Promise.reject(new ConditionError(why, 'ValidReleaseImage', 'InvalidImage'));
    }
    return Promise.resolve(version);
  },
};
