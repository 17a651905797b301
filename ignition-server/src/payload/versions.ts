/**
 * Ignition spec versions: which one a payload needs (the newest field it uses) and which one a client takes
 * (its Accept header). Ignition clients send `Accept: application/vnd.coreos.ignition+json;version=3.3.0,
 * *∕*;q=0.1` naming the newest spec they parse, so the server answers with the highest version ≤ that.
 */

export const SPEC_VERSIONS = ['3.0.0', '3.1.0', '3.2.0', '3.3.0', '3.4.0'] as const;
export type SpecVersion = (typeof SPEC_VERSIONS)[number];
const MAX_SPEC_VERSION: SpecVersion = '3.4.0';
export const IGNITION_MEDIA_TYPE = 'application/vnd.coreos.ignition+json';

/**
 * Fields by the spec version that introduced them (paths with `*` for list items). A payload using one of
 * them cannot be served at an older version: the older client would ignore the field ("Unused key") and
 * boot a host without, say, its kernel arguments. The 3.1–3.3 rows are checked against ignition-validate in
 * the tests; the 3.4.0 rows come from the 3.4.0 spec changelog (the Debian client stops at 3.3.0).
 */
const INTRODUCED: [SpecVersion, string][] = [
  ['3.1.0', 'ignition.proxy'],
  ['3.1.0', '**.httpHeaders'],
  ['3.1.0', 'storage.filesystems.*.mountOptions'],
  ['3.2.0', 'storage.luks'],
  ['3.2.0', 'passwd.users.*.shouldExist'],
  ['3.2.0', 'passwd.groups.*.shouldExist'],
  ['3.2.0', 'storage.disks.*.partitions.*.resize'],
  ['3.3.0', 'kernelArguments'],
  ['3.4.0', 'storage.luks.*.discard'],
  ['3.4.0', 'storage.luks.*.openOptions'],
  ['3.4.0', 'storage.luks.*.clevis.tang.*.advertisement'],
];

export const versionIndex = (v: SpecVersion): number => SPEC_VERSIONS.indexOf(v);
const maxVersion = (a: SpecVersion, b: SpecVersion): SpecVersion => (versionIndex(a) >= versionIndex(b) ? a : b);

function introducedIn(path: string): SpecVersion | undefined {
  for (const [version, pattern] of INTRODUCED) {
    if (pattern.startsWith('**.') ? path.endsWith(pattern.slice(2)) : path === pattern) return version;
  }
  return undefined;
}

/** The oldest spec version able to carry every field of the config. */
export function minimumVersion(config: unknown): SpecVersion {
  let min: SpecVersion = '3.0.0';
  const walk = (value: unknown, path: string): void => {
    if (Array.isArray(value)) {
      value.forEach((v) => walk(v, `${path}.*`));
      return;
    }
    if (typeof value !== 'object' || value === null) return;
    for (const [key, child] of Object.entries(value)) {
      if (child === null || child === undefined) continue;
      const childPath = path === '' ? key : `${path}.${key}`;
      const v = introducedIn(childPath);
      if (v) min = maxVersion(min, v);
      walk(child, childPath);
    }
  };
  walk(config, '');
  return min;
}

/** "3.3.0" → 3.3.0; "3.4.0-experimental" → the last stable before it (3.3.0); newer than we know → ours. */
function capOf(version: string): SpecVersion | undefined {
  const m = /^(\d+)\.(\d+)\.(\d+)(-.+)?$/.exec(version);
  if (!m || m[1] !== '3') return undefined;
  const minor = Number(m[2]) - (m[4] ? 1 : 0);
  if (minor < 0) return undefined;
  return SPEC_VERSIONS[Math.min(minor, SPEC_VERSIONS.length - 1)];
}

interface MediaRange {
  type: string;
  version?: string;
  q: number;
}

function parseAccept(header: string): MediaRange[] {
  return header.split(',').map((part) => {
    const [type = '', ...params] = part.split(';').map((s) => s.trim());
    const range: MediaRange = { type: type.toLowerCase(), q: 1 };
    for (const p of params) {
      const [k = '', v = ''] = p.split('=').map((s) => s.trim());
      if (k.toLowerCase() === 'version') range.version = v.replace(/^"|"$/g, '');
      if (k.toLowerCase() === 'q') range.q = Number(v);
    }
    return range;
  });
}

const WILDCARDS = new Set(['*/*', 'application/*', 'application/json', IGNITION_MEDIA_TYPE]);

/**
 * The highest spec version the Accept header allows, or undefined when it allows none. A named Ignition
 * version wins over wildcards (Ignition sends both); no header at all allows everything.
 */
export function negotiateVersion(accept: string | undefined): SpecVersion | undefined {
  if (accept === undefined) return MAX_SPEC_VERSION;
  // A header equal to the last one is compared, not hashed (each request's header is a new string).
  if (accept === last.accept) return last.version;
  // Every host of a fleet sends one of a few Accept headers: parse each once (bounded, cleared when full).
  let version = NEGOTIATED.get(accept);
  if (version === undefined && !NEGOTIATED.has(accept)) {
    if (NEGOTIATED.size >= 256) NEGOTIATED.clear();
    version = negotiate(accept);
    NEGOTIATED.set(accept, version);
  }
  last = { accept, version };
  return version;
}

const NEGOTIATED = new Map<string, SpecVersion | undefined>();
let last: { accept?: string; version?: SpecVersion } = {};

function negotiate(accept: string): SpecVersion | undefined {
  if (accept.trim() === '') return MAX_SPEC_VERSION;
  const ranges = parseAccept(accept).filter((r) => r.q > 0);
  const named = ranges
    .filter((r) => r.type === IGNITION_MEDIA_TYPE && r.version !== undefined)
    .map((r) => capOf(r.version ?? ''));
  const caps = named.filter((v): v is SpecVersion => v !== undefined);
  if (caps.length > 0) return caps.reduce(maxVersion);
  if (named.length > 0) return undefined;
  return ranges.some((r) => WILDCARDS.has(r.type) && r.version === undefined) ? MAX_SPEC_VERSION : undefined;
}

/** Whether the payload (needing `min`) can be served to a client taking up to `cap`. */
export function servable(min: SpecVersion, cap: SpecVersion): boolean {
  return versionIndex(min) <= versionIndex(cap);
}
