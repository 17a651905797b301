/**
 * An Ignition 3.x config turned into the filesystem entries it asks for on a running host: files (data URLs,
 * gzip, modes, overwrite, appends, verification), directories, links, systemd units and drop-ins (with
 * enable/disable/mask as the symlinks `systemctl` would make), and users' SSH keys. What cannot be done in
 * place (disks, partitions, RAID, filesystems, LUKS, kernel arguments, user/group creation, remote
 * sources) is refused with a reason naming it, never skipped.
 */
import { createHash } from 'node:crypto';
import { gunzipSync } from 'node:zlib';
import { posix } from 'node:path';

export class UnsupportedConfigError extends Error {
  override readonly name = 'UnsupportedConfigError';
}

interface IgnResource {
  source?: string | null;
  compression?: string | null;
  verification?: { hash?: string | null } | null;
}
interface IgnNode {
  path: string;
  overwrite?: boolean | null;
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
  storage?: { files?: IgnFile[]; directories?: IgnDirectory[]; links?: IgnLink[]; disks?: unknown[]; raid?: unknown[]; filesystems?: unknown[]; luks?: unknown[] };
  systemd?: { units?: IgnUnit[] };
  passwd?: { users?: IgnUser[]; groups?: unknown[] };
  kernelArguments?: { shouldExist?: unknown[]; shouldNotExist?: unknown[] };
}

/** Why an entry exists: SSH keys need no drain or reboot; everything else does (see disruption.ts). */
export type EntryOrigin = 'storage' | 'unit' | 'ssh';

export type Entry =
  | { kind: 'file'; path: string; data: Buffer; mode: number; overwrite: boolean; origin: EntryOrigin }
  | { kind: 'dir'; path: string; mode: number; origin: EntryOrigin }
  | { kind: 'link'; path: string; target: string; hard: boolean; overwrite: boolean; origin: EntryOrigin }
  | { kind: 'absent'; path: string; origin: EntryOrigin };

const SYSTEMD_DIR = '/etc/systemd/system';

export function parseIgnition(bytes: Buffer | string): IgnitionConfig {
  let config: IgnitionConfig;
  try {
    config = JSON.parse(bytes.toString()) as IgnitionConfig;
  } catch (err) {
    throw new UnsupportedConfigError(`payload is not JSON: ${(err as Error).message}`);
  }
  const version = config.ignition?.version ?? '';
  if (!/^3\.\d+\.\d+/.test(version)) throw new UnsupportedConfigError(`ignition.version "${version}" is not a 3.x spec`);
  refuseUnsupported(config);
  return config;
}

const nonEmpty = (v: unknown): boolean => (Array.isArray(v) ? v.length > 0 : v !== undefined && v !== null);

/** Sections that would reformat or repartition the host, or that Ignition itself applies only at first boot. */
function unsupportedSections(config: IgnitionConfig): string[] {
  const storage = config.storage ?? {};
  const kargs = config.kernelArguments ?? {};
  const sections: [string, unknown][] = [
    ['storage.disks', storage.disks],
    ['storage.raid', storage.raid],
    ['storage.filesystems', storage.filesystems],
    ['storage.luks', storage.luks],
    ['kernelArguments', [...(kargs.shouldExist ?? []), ...(kargs.shouldNotExist ?? [])]],
    ['passwd.groups', config.passwd?.groups],
    ['ignition.config.merge', config.ignition?.config?.merge],
    ['ignition.config.replace', config.ignition?.config?.replace],
  ];
  return sections.filter(([, v]) => nonEmpty(v)).map(([name]) => name);
}

/** Of a user, only SSH keys can be changed in place; creating users or changing passwords cannot. */
function unsupportedUserFields(config: IgnitionConfig): string[] {
  return (config.passwd?.users ?? []).flatMap((user) =>
    Object.keys(user)
      .filter((k) => k !== 'name' && k !== 'sshAuthorizedKeys' && nonEmpty(user[k]))
      .map((k) => `passwd.users[${user.name}].${k}`),
  );
}

function refuseUnsupported(config: IgnitionConfig): void {
  const found = [...unsupportedSections(config), ...unsupportedUserFields(config)];
  if (found.length > 0) throw new UnsupportedConfigError(`cannot be applied in place: ${found.join(', ')}`);
}

/** RFC 2397 data URL; other schemes would need the network at update time and are refused. */
export function decodeDataUrl(url: string): Buffer {
  const match = /^data:([^,]*),(.*)$/s.exec(url);
  if (!match) throw new UnsupportedConfigError(`source "${url.slice(0, 40)}" is not a data URL (only data URLs are applied in place)`);
  const [, meta = '', data = ''] = match;
  return meta.split(';').includes('base64') ? Buffer.from(data, 'base64') : Buffer.from(decodeURIComponent(data), 'utf8');
}

function readResource(res: IgnResource, where: string): Buffer {
  if (!res.source) return Buffer.alloc(0);
  const raw = decodeDataUrl(res.source);
  const hash = res.verification?.hash;
  if (hash) {
    const [algo = '', want = ''] = hash.split('-', 2);
    const got = createHash(algo).update(raw).digest('hex');
    if (got !== want) throw new UnsupportedConfigError(`${where}: contents do not match verification hash ${hash}`);
  }
  if (!res.compression) return raw;
  if (res.compression !== 'gzip') throw new UnsupportedConfigError(`${where}: compression "${res.compression}" is not supported`);
  return gunzipSync(raw);
}

function checkPath(path: string): string {
  if (!path.startsWith('/') || posix.normalize(path) !== path || path.includes('/../')) throw new UnsupportedConfigError(`path "${path}" is not absolute and normal`);
  return path;
}

function fileEntries(files: readonly IgnFile[]): Entry[] {
  return files.map((f) => {
    const where = `storage.files[${f.path}]`;
    const parts = [f.contents ? readResource(f.contents, where) : Buffer.alloc(0), ...(f.append ?? []).map((a) => readResource(a, where))];
    return { kind: 'file', path: checkPath(f.path), data: Buffer.concat(parts), mode: f.mode ?? 0o644, overwrite: f.overwrite === true, origin: 'storage' };
  });
}

/** `WantedBy=`/`RequiredBy=` targets of a unit's [Install] section (default: multi-user.target). */
export function installTargets(contents: string): string[] {
  const targets = [...contents.matchAll(/^\s*(?:WantedBy|RequiredBy)\s*=\s*(.+)$/gm)].flatMap((m) => (m[1] ?? '').trim().split(/\s+/));
  return targets.length > 0 ? targets : ['multi-user.target'];
}

/** enable/disable as `systemctl` does it: a symlink in each install target's .wants folder, or none. */
function enablementEntries(unit: IgnUnit, path: string): Entry[] {
  if (unit.enabled === undefined || unit.enabled === null) return [];
  return installTargets(unit.contents ?? '').map((target): Entry => {
    const wants = `${SYSTEMD_DIR}/${target}.wants/${unit.name}`;
    return unit.enabled ? { kind: 'link', path: wants, target: path, hard: false, overwrite: true, origin: 'unit' } : { kind: 'absent', path: wants, origin: 'unit' };
  });
}

function unitEntries(unit: IgnUnit): Entry[] {
  const path = `${SYSTEMD_DIR}/${unit.name}`;
  const entries: Entry[] = [];
  if (unit.mask) entries.push({ kind: 'link', path, target: '/dev/null', hard: false, overwrite: true, origin: 'unit' });
  else if (unit.contents) entries.push({ kind: 'file', path, data: Buffer.from(unit.contents), mode: 0o644, overwrite: true, origin: 'unit' });
  for (const d of unit.dropins ?? []) {
    if (d.contents) entries.push({ kind: 'file', path: `${path}.d/${d.name}`, data: Buffer.from(d.contents), mode: 0o644, overwrite: true, origin: 'unit' });
  }
  return [...entries, ...enablementEntries(unit, path)];
}

/** Keys go to authorized_keys.d/ignition when the host uses that folder (as Ignition does), else authorized_keys. */
function sshEntries(user: IgnUser, hasKeysDir: (home: string) => boolean): Entry[] {
  if (!user.sshAuthorizedKeys || user.sshAuthorizedKeys.length === 0) return [];
  const home = user.name === 'root' ? '/root' : `/home/${user.name}`;
  const data = Buffer.from(`${user.sshAuthorizedKeys.join('\n')}\n`);
  const file = hasKeysDir(home) ? `${home}/.ssh/authorized_keys.d/ignition` : `${home}/.ssh/authorized_keys`;
  return [
    { kind: 'dir', path: `${home}/.ssh`, mode: 0o700, origin: 'ssh' },
    { kind: 'file', path: file, data, mode: 0o600, overwrite: true, origin: 'ssh' },
  ];
}

/** Every entry the config asks for, in the order Ignition's files stage writes them. */
export function entriesOf(config: IgnitionConfig, hasKeysDir: (home: string) => boolean): Entry[] {
  const storage = config.storage ?? {};
  return [
    ...(storage.directories ?? []).map((d): Entry => ({ kind: 'dir', path: checkPath(d.path), mode: d.mode ?? 0o755, origin: 'storage' })),
    ...fileEntries(storage.files ?? []),
    ...(storage.links ?? []).map((l): Entry => ({ kind: 'link', path: checkPath(l.path), target: l.target, hard: l.hard === true, overwrite: l.overwrite === true, origin: 'storage' })),
    ...(config.systemd?.units ?? []).flatMap(unitEntries),
    ...(config.passwd?.users ?? []).flatMap((u) => sshEntries(u, hasKeysDir)),
  ];
}
