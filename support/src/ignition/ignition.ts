/**
 * An Ignition 3.x config turned into the filesystem entries it asks for on a running host: files (data URLs,
 * gzip, modes, overwrite, appends, verification), directories, links, systemd units and drop-ins (with
 * enable/disable/mask as the symlinks `systemctl` would make), owners (`user`/`group`, by id or by name as
 * the host's own account files know them), and users' SSH keys. What cannot be done in place (disks,
 * partitions, RAID, filesystems, LUKS, kernel arguments, user/group creation, remote sources) is refused with
 * a reason naming it, never skipped. So are setuid and setgid bits (and sticky files): a payload is a tenant's
 * input, and a privileged program it plants on every host of the pool is a way to root on each of them; no
 * pool setting reaches the agent to allow them.
 */
import { createHash } from 'node:crypto';
import { posix } from 'node:path';
import { unsupportedInPlace } from '../../../api/src/in-place.js';
import { DEFAULT_MAX_CONFIG_BYTES } from '../../../api/src/limits.js';
import { InflateBudget, InflateLimitError, InvalidGzipError } from '../../../support/src/inflate.js';
import { UnsupportedConfigError } from './refusal.js';
import { checkMode, ownerOf, type HostFacts, type IgnPrincipal, type Owner } from './owners.js';
import { dataUrlBytes } from '../../../support/src/data-url.js';

/**
 * The files inflate past the byte budget: refused like any config the agent cannot apply, but never a
 * reason to roll instead (a roll would write the same files through Ignition at boot).
 */
class ConfigTooLargeError extends UnsupportedConfigError {}

interface IgnResource {
  source?: string | null;
  compression?: string | null;
  verification?: { hash?: string | null } | null;
}
interface IgnNode {
  path: string;
  overwrite?: boolean | null;
  user?: IgnPrincipal | null;
  group?: IgnPrincipal | null;
}
interface IgnFile extends IgnNode {
  contents?: IgnResource | null;
  append?: IgnResource[] | null;
  mode?: number | null;
}
interface IgnDirectory extends IgnNode {
  mode?: number | null;
}
interface IgnLink extends IgnNode {
  target: string;
  hard?: boolean | null;
}
interface IgnUnit {
  name: string;
  enabled?: boolean | null;
  mask?: boolean | null;
  contents?: string | null;
  dropins?: { name: string; contents?: string | null }[] | null;
}
interface IgnUser {
  name: string;
  sshAuthorizedKeys?: string[] | null;
  [other: string]: unknown;
}

export interface IgnitionConfig {
  ignition?: { version?: string; config?: { merge?: unknown[]; replace?: unknown } };
  storage?: {
    files?: IgnFile[];
    directories?: IgnDirectory[];
    links?: IgnLink[];
    disks?: unknown[];
    raid?: unknown[];
    filesystems?: unknown[];
    luks?: unknown[];
  };
  systemd?: { units?: IgnUnit[] };
  passwd?: { users?: IgnUser[]; groups?: unknown[] };
  kernelArguments?: { shouldExist?: unknown[]; shouldNotExist?: unknown[] };
}

/** Why an entry exists: the disruption policy names SSH keys, units and paths apart (see disruption.ts). */
export type EntryOrigin = 'storage' | 'unit' | 'ssh';

/** `owner`: set on the entry exactly when the config names a user or group (else the agent's own, as before). */
export type Entry =
  | { kind: 'file'; path: string; data: Buffer; mode: number; overwrite: boolean; origin: EntryOrigin; owner?: Owner }
  | { kind: 'dir'; path: string; mode: number; origin: EntryOrigin; owner?: Owner }
  | {
      kind: 'link';
      path: string;
      target: string;
      hard: boolean;
      overwrite: boolean;
      origin: EntryOrigin;
      owner?: Owner;
    }
  | { kind: 'absent'; path: string; origin: EntryOrigin };

const SYSTEMD_DIR = '/etc/systemd/system';

/** The config as JSON of a 3.x spec, nothing checked beyond that. */
function readConfig(bytes: Buffer | string): IgnitionConfig {
  let config: IgnitionConfig;
  try {
    config = JSON.parse(bytes.toString()) as IgnitionConfig;
  } catch (err) {
    throw new UnsupportedConfigError(`payload is not JSON: ${(err as Error).message}`);
  }
  const version = config.ignition?.version ?? '';
  if (!/^3\.\d+\.\d+/.test(version))
    throw new UnsupportedConfigError(`ignition.version "${version}" is not a 3.x spec`);
  return config;
}

export function parseIgnition(bytes: Buffer | string): IgnitionConfig {
  const config = readConfig(bytes);
  refuseUnsupported(config);
  return config;
}

/**
 * A config Ignition applied at first boot, read as data: what it did to disks, filesystems or kernel arguments
 * was done before the host ran and leaves no entry here, so it is not refused (its entries still are, as any).
 */
export function parseBooted(bytes: Buffer | string): IgnitionConfig {
  return readConfig(bytes);
}

/** The in-place decision checks all a config says without a host: owners by name are looked up by the agent. */
const NO_HOST: HostFacts = { hasKeysDir: () => false, owner: () => ({ uid: 0, gid: 0 }) };

/**
 * Why the agent would refuse this payload, without applying it: the sections it cannot apply in place
 * (kernelArguments, storage.disks, …) by name, or the first other refusal (a remote source, a bad
 * verification hash) as its message. Empty: the agent can apply all of it. The same checks as the agent's,
 * so the in-place decision and the agent never disagree.
 */
export function inPlaceBlockers(bytes: Buffer | string, maxConfigBytes = DEFAULT_MAX_CONFIG_BYTES): string[] {
  try {
    const config = readConfig(bytes);
    const sections = unsupportedInPlace(config);
    if (sections.length > 0) return sections;
    entriesOf(config, NO_HOST, maxConfigBytes);
    return [];
  } catch (err) {
    if (err instanceof UnsupportedConfigError && !(err instanceof ConfigTooLargeError)) return [err.message];
    throw err;
  }
}

function refuseUnsupported(config: IgnitionConfig): void {
  const found = unsupportedInPlace(config);
  if (found.length > 0) throw new UnsupportedConfigError(`cannot be applied in place: ${found.join(', ')}`);
}

/** Spends from the budget, turning its refusals into the agent's own. */
function spending<T>(spend: () => T): T {
  try {
    return spend();
  } catch (err) {
    if (err instanceof InflateLimitError)
      throw new ConfigTooLargeError(`${err.message} (the files of one config, decoded and inflated, summed)`, {
        cause: err,
      });
    if (err instanceof InvalidGzipError) throw new UnsupportedConfigError(err.message, { cause: err });
    throw err;
  }
}

/** RFC 2397 data URL; other schemes would need the network at update time and are refused. */
function decodeDataUrl(url: string): Buffer {
  let bytes: Buffer | undefined;
  try {
    bytes = dataUrlBytes(url);
  } catch (err) {
    throw new UnsupportedConfigError((err as Error).message, { cause: err });
  }
  if (bytes === undefined)
    throw new UnsupportedConfigError(
      `source "${url.slice(0, 40)}" is not a data URL (only data URLs are applied in place)`,
    );
  return bytes;
}

function readResource(res: IgnResource, where: string, budget: InflateBudget): Buffer {
  if (!res.source) return Buffer.alloc(0);
  const raw = decodeDataUrl(res.source);
  const hash = res.verification?.hash;
  if (hash) {
    const [algo = '', want = ''] = hash.split('-', 2);
    const got = createHash(algo).update(raw).digest('hex');
    if (got !== want) throw new UnsupportedConfigError(`${where}: contents do not match verification hash ${hash}`);
  }
  if (!res.compression) {
    spending(() => budget.spend(raw.length, where));
    return raw;
  }
  if (res.compression !== 'gzip')
    throw new UnsupportedConfigError(`${where}: compression "${res.compression}" is not supported`);
  return spending(() => budget.gunzipSync(raw, where));
}

const isNormal = (path: string): boolean =>
  path.startsWith('/') && posix.normalize(path) === path && !path.includes('\0');

function checkPath(path: string): string {
  if (!isNormal(path)) throw new UnsupportedConfigError(`path "${path}" is not absolute and normal`);
  return path;
}

/** A unit type Ignition accepts as a unit name's suffix. */
const UNIT_TYPES = [
  'service',
  'socket',
  'device',
  'mount',
  'automount',
  'swap',
  'target',
  'path',
  'timer',
  'snapshot',
  'slice',
  'scope',
];
/** systemd's unit name: letters, digits and `:-_.\`, one `@` at most (a template or an instance), a type suffix. */
const UNIT_NAME = new RegExp(`^[A-Za-z0-9:_.\\\\-]+(@[A-Za-z0-9:_.\\\\-]*)?\\.(${UNIT_TYPES.join('|')})$`);
/** A drop-in is one file name ending in `.conf` in the unit's `.d` folder (Ignition refuses other names). */
const DROPIN_NAME = /^[^/\0]+\.conf$/;
/** A POSIX user name (as useradd takes it): it becomes a folder name under /home. */
const USER_NAME = /^[A-Za-z_][A-Za-z0-9_.-]*\$?$/;
/** NAME_MAX: a longer name is no file name. */
const MAX_NAME = 255;

const isUnitName = (name: string): boolean => name.length <= MAX_NAME && UNIT_NAME.test(name);

/** Unit, drop-in and install target names become file names: each must be one plain name, never a path. */
function checkUnit(unit: IgnUnit): void {
  const where = `systemd.units[${unit.name}]`;
  if (!isUnitName(unit.name))
    throw new UnsupportedConfigError(
      `${where}: not a valid unit name (a name such as kubelet.service: letters, digits, ":-_.\\", one "@", a unit type suffix)`,
    );
  for (const d of unit.dropins ?? []) {
    if (d.name.length > MAX_NAME || !DROPIN_NAME.test(d.name))
      throw new UnsupportedConfigError(
        `${where}.dropins[${d.name}]: not a valid drop-in name (one file name ending in .conf)`,
      );
  }
  for (const target of unit.enabled === true ? installTargets(unit.contents ?? '') : []) {
    if (!isUnitName(target))
      throw new UnsupportedConfigError(`${where}: install target "${target}" is not a valid unit name`);
  }
}

/** True when a relative link target climbs above `/` from the link's folder: the host would clamp it, the agent would leave the root. */
function climbsOut(path: string, target: string): boolean {
  if (target.startsWith('/')) return false;
  let depth = path.split('/').filter((n) => n !== '').length - 1;
  for (const name of target.split('/')) {
    if (name === '..') depth--;
    else if (name !== '' && name !== '.') depth++;
    if (depth < 0) return true;
  }
  return false;
}

/** A hard link's target is a host path; a symbolic one may be relative (as ../usr/share/zoneinfo/UTC), but never climb out of the root. */
function linkEntry(l: IgnLink, facts: HostFacts): Entry {
  const path = checkPath(l.path);
  const where = `storage.links[${l.path}]`;
  const owner = ownerOf(l, where, facts);
  const hard = l.hard === true;
  if (hard && !isNormal(l.target))
    throw new UnsupportedConfigError(`${where}: target "${l.target}" is not absolute and normal`);
  if (l.target === '' || l.target.includes('\0'))
    throw new UnsupportedConfigError(`${where}: target "${l.target}" is not a path`);
  if (climbsOut(path, l.target))
    throw new UnsupportedConfigError(`${where}: target "${l.target}" leads out of the host root`);
  if (hard && owner) throw new UnsupportedConfigError(`${where}: a hard link has its target's owner, not its own`);
  return { kind: 'link', path, target: l.target, hard, overwrite: l.overwrite === true, origin: 'storage', owner };
}

function fileEntries(files: readonly IgnFile[], facts: HostFacts, budget: InflateBudget): Entry[] {
  return files.map((f) => {
    const where = `storage.files[${f.path}]`;
    const owner = ownerOf(f, where, facts);
    const parts = [
      f.contents ? readResource(f.contents, where, budget) : Buffer.alloc(0),
      ...(f.append ?? []).map((a) => readResource(a, where, budget)),
    ];
    return {
      kind: 'file',
      path: checkPath(f.path),
      data: Buffer.concat(parts),
      mode: checkMode(f.mode ?? 0o644, where, 'file'),
      overwrite: f.overwrite === true,
      origin: 'storage',
      owner,
    };
  });
}

/** `WantedBy=`/`RequiredBy=` targets of a unit's [Install] section (default: multi-user.target). */
function installTargets(contents: string): string[] {
  const targets = [...contents.matchAll(/^\s*(?:WantedBy|RequiredBy)\s*=\s*(.+)$/gm)].flatMap((m) =>
    (m[1] ?? '').trim().split(/\s+/),
  );
  return targets.length > 0 ? targets : ['multi-user.target'];
}

/** enable/disable as `systemctl` does it: a symlink in each install target's .wants folder, or none. */
function enablementEntries(unit: IgnUnit, path: string): Entry[] {
  if (unit.enabled === undefined || unit.enabled === null) return [];
  return installTargets(unit.contents ?? '').map((target): Entry => {
    const wants = `${SYSTEMD_DIR}/${target}.wants/${unit.name}`;
    return unit.enabled
      ? { kind: 'link', path: wants, target: path, hard: false, overwrite: true, origin: 'unit' }
      : { kind: 'absent', path: wants, origin: 'unit' };
  });
}

function unitEntries(unit: IgnUnit): Entry[] {
  checkUnit(unit);
  const path = `${SYSTEMD_DIR}/${unit.name}`;
  const entries: Entry[] = [];
  if (unit.mask)
    entries.push({ kind: 'link', path, target: '/dev/null', hard: false, overwrite: true, origin: 'unit' });
  else if (unit.contents)
    entries.push({
      kind: 'file',
      path,
      data: Buffer.from(unit.contents),
      mode: 0o644,
      overwrite: true,
      origin: 'unit',
    });
  for (const d of unit.dropins ?? []) {
    if (d.contents)
      entries.push({
        kind: 'file',
        path: `${path}.d/${d.name}`,
        data: Buffer.from(d.contents),
        mode: 0o644,
        overwrite: true,
        origin: 'unit',
      });
  }
  return [...entries, ...enablementEntries(unit, path)];
}

/** A user's home folder, as Ignition assumes it for a user it did not create. */
export function homeOf(name: string): string {
  if (name.length > 32 || !USER_NAME.test(name))
    throw new UnsupportedConfigError(`passwd.users[${name}]: not a valid user name (a POSIX name such as core)`);
  return name === 'root' ? '/root' : `/home/${name}`;
}

/** Keys go to authorized_keys.d/ignition when the host uses that folder (as Ignition does), else authorized_keys. */
/**
 * Keys go to authorized_keys.d/ignition when the host uses that folder (as Ignition does), else
 * authorized_keys; owned by the user and its primary group, as Ignition leaves them (it writes them as the
 * user). A user the host does not know is refused: the agent does not create users.
 */
function sshEntries(user: IgnUser, facts: HostFacts): Entry[] {
  if (!user.sshAuthorizedKeys || user.sshAuthorizedKeys.length === 0) return [];
  const home = homeOf(user.name);
  const owner = facts.owner({ user: { name: user.name }, group: 'primary' }, `passwd.users[${user.name}]`);
  const data = Buffer.from(`${user.sshAuthorizedKeys.join('\n')}\n`);
  const file = facts.hasKeysDir(home) ? `${home}/.ssh/authorized_keys.d/ignition` : `${home}/.ssh/authorized_keys`;
  return [
    { kind: 'dir', path: `${home}/.ssh`, mode: 0o700, origin: 'ssh', owner },
    { kind: 'file', path: file, data, mode: 0o600, overwrite: true, origin: 'ssh', owner },
  ];
}

/**
 * Every entry the config asks for, in the order Ignition's files stage writes them. The files' contents,
 * decoded and inflated, may take `maxConfigBytes` in all (ConfigTooLargeError past it).
 */
export function entriesOf(
  config: IgnitionConfig,
  facts: HostFacts,
  maxConfigBytes = DEFAULT_MAX_CONFIG_BYTES,
): Entry[] {
  const storage = config.storage ?? {};
  return [
    ...(storage.directories ?? []).map((d): Entry => {
      const where = `storage.directories[${d.path}]`;
      return {
        kind: 'dir',
        path: checkPath(d.path),
        mode: checkMode(d.mode ?? 0o755, where, 'dir'),
        origin: 'storage',
        owner: ownerOf(d, where, facts),
      };
    }),
    ...fileEntries(storage.files ?? [], facts, new InflateBudget(maxConfigBytes)),
    ...(storage.links ?? []).map((l) => linkEntry(l, facts)),
    ...(config.systemd?.units ?? []).flatMap(unitEntries),
    ...(config.passwd?.users ?? []).flatMap((u) => sshEntries(u, facts)),
  ];
}
