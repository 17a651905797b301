/**
 * What Kindling wrote on a host at the applied hash, kept in the agent's state folder, so that applying the
 * next config removes what that one no longer declares (as the machine-config-daemon does) and leaves alone
 * what Kindling never wrote.
 *
 * - A path the record has and the target does not is removed, or, where Kindling had replaced a file or link
 *   of the OS, that original is put back (kept in the state folder when Kindling first replaced it).
 * - A folder is removed only when Kindling created it and the removals leave it empty.
 * - A config Kindling did not apply itself (the first boot's, applied by Ignition) has no record on the host:
 *   recordOf() computes it from that config, which the upgrader hands over beside the target for a node it
 *   never updated (api/src/node-agent.ts PAYLOAD_KEYS.bootedConfig). With neither, nothing is removed (there is nothing
 *   to go by).
 *
 * The removals are ordinary changes of the host's transaction (host.ts): journalled, backed up, rolled back
 * on failure and by the health gate. The record of the target is committed once the update is finished.
 */
import { createHash } from 'node:crypto';
import { mkdir, readdir, readFile, rm } from 'node:fs/promises';
import { basename, dirname } from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { createFile } from './root.js';
import { payloadKubeletVersion } from './gate.js';
import { writeAtomic, type AppliedRecord, type Change, type Host, type Original, type UnitActions } from './host.js';
import { parseBooted, parseIgnition, type Entry, type EntryOrigin } from '../../support/src/ignition/ignition.js';
import { UnsupportedConfigError } from '../../support/src/ignition/refusal.js';

type Removal =
  { kind: 'remove'; path: string; origin: EntryOrigin } | { kind: 'restore'; original: Original; origin: EntryOrigin };

/** What a target asks of a host: the entries it declares, the writes, and the removals of what it no longer declares. */
export interface Plan {
  entries: Entry[];
  writes: Entry[];
  /** The writes, then the removals. */
  changes: Change[];
  /**
   * The changes the disruption policy weighs: all of them, but for a host first updated with the config it
   * booted with at hand, the writes of what that config declared alike. Those are on the host already in the
   * way Ignition does it (an enabled unit is a systemd preset there, not the link `systemctl enable` makes):
   * writing them again changes nothing the host runs, so they need no action.
   */
  weighed: Change[];
  previous: AppliedRecord | undefined;
  /** Where `previous` came from: the agent's record, the config the host booted with, or none at all. */
  previousFrom: 'record' | 'booted' | 'none';
  /** Why the config the host booted with, handed over, could not stand for the record. */
  bootedUnread?: string;
  kubeletVersion: string | undefined;
}

/** The config a host booted with (Ignition applied it, so the agent has no record of it), by its hash. */
export interface Booted {
  hash: string;
  config: Buffer;
}

const RECORD = 'record.json';
const ORIGINALS = 'originals';

/** The state file holding an original's bytes: one name per host path. */
const originalName = (path: string): string => `${ORIGINALS}/${createHash('sha256').update(path).digest('hex')}`;

const declaredBy = (entries: readonly Entry[]): AppliedRecord['written'] =>
  entries.flatMap((e) => (e.kind === 'absent' ? [] : [{ path: e.path, kind: e.kind, origin: e.origin }]));

/** The record of a config applied by Ignition (first boot): all it declares is Kindling's, no folder counted as created. */
export function recordOf(hash: string, entries: readonly Entry[]): AppliedRecord {
  return { hash, written: declaredBy(entries), createdDirs: [], originals: [] };
}

/** The record once `target` is applied: the originals still replaced carried over (`saved`: those kept now). */
export function nextRecord(
  hash: string,
  target: readonly Entry[],
  previous: AppliedRecord | undefined,
  saved: readonly Original[],
): AppliedRecord {
  const written = declaredBy(target);
  const declared = new Set(written.map((w) => w.path));
  const originals = [...(previous?.originals ?? []), ...saved].filter((o) => declared.has(o.path));
  return { hash, written, createdDirs: previous?.createdDirs ?? [], originals };
}

/** The files and links the previous record has and the target does not declare. */
function removalsOf(previous: AppliedRecord, target: readonly Entry[]): Removal[] {
  const declared = new Set(target.map((e) => e.path));
  return previous.written
    .filter((w) => w.kind !== 'dir' && !declared.has(w.path))
    .map((w): Removal => {
      const original = previous.originals.find((o) => o.path === w.path);
      return original
        ? { kind: 'restore', original, origin: w.origin }
        : { kind: 'remove', path: w.path, origin: w.origin };
    });
}

export async function readRecord(host: Host): Promise<AppliedRecord | undefined> {
  try {
    return JSON.parse(await readFile(await host.statePath(RECORD), 'utf8')) as AppliedRecord;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new Error(`cannot read the record of the applied config: ${(err as Error).message}`, { cause: err });
  }
}

/** Makes `record` the host's record and drops the originals it no longer needs. */
export async function commitRecord(host: Host, record: AppliedRecord): Promise<void> {
  await writeAtomic(await host.statePath(RECORD), JSON.stringify(record));
  const keep = new Set(record.originals.filter((o) => o.kind === 'file').map((o) => originalName(o.path)));
  const folder = await host.statePath(ORIGINALS);
  const names = await readdir(folder).catch(() => []);
  for (const name of names)
    if (!keep.has(`${ORIGINALS}/${name}`)) await rm(await host.statePath(`${ORIGINALS}/${name}`), { force: true });
}

/**
 * Keeps what each change replaces when it is not Kindling's (not in the previous record, no original kept
 * yet). Before the transaction: a kept original the update then does not use is harmless.
 */
async function keepOriginals(
  host: Host,
  changes: readonly Entry[],
  previous: AppliedRecord | undefined,
): Promise<Original[]> {
  const ours = new Set([
    ...(previous?.written ?? []).map((w) => w.path),
    ...(previous?.originals ?? []).map((o) => o.path),
  ]);
  const saved: Original[] = [];
  for (const change of changes) {
    if (change.kind === 'absent' || change.kind === 'dir' || ours.has(change.path)) continue;
    const original = await keepOriginal(host, change.path);
    if (original) saved.push(original);
  }
  return saved;
}

/** The OS file or link at `path`, its bytes kept in the state folder; nothing when there is none. */
async function keepOriginal(host: Host, path: string): Promise<Original | undefined> {
  const now = await host.prior(path);
  if (now.kind === 'symlink') return { path, kind: 'symlink', target: now.target };
  if (now.kind !== 'file') return undefined;
  const local = await host.statePath(originalName(path));
  await mkdir(dirname(local), { recursive: true, mode: 0o700 });
  await rm(local, { force: true });
  await createFile(local, now.data, 0o600);
  return { path, kind: 'file', mode: now.mode };
}

/**
 * The host changes that remove what the previous record has and the target does not: files and links
 * first, then the folders Kindling created that those removals leave empty, deepest first.
 */
async function removalChanges(host: Host, previous: AppliedRecord, target: readonly Entry[]): Promise<Change[]> {
  const changes: Change[] = [];
  for (const removal of removalsOf(previous, target)) {
    const change = await changeOf(host, removal);
    if (change) changes.push(change);
  }
  return [...changes, ...(await emptiedDirs(host, previous, target, changes))];
}

async function changeOf(host: Host, removal: Removal): Promise<Change | undefined> {
  if (removal.kind === 'remove') {
    const now = await host.prior(removal.path);
    // Nothing there any more, or a folder Kindling never wrote at that path: nothing of Kindling's to remove.
    return now.kind === 'file' || now.kind === 'symlink' ? { ...removal, kind: 'absent' } : undefined;
  }
  const { original, origin } = removal;
  const entry: Entry =
    original.kind === 'file'
      ? {
          kind: 'file',
          path: original.path,
          data: await readFile(await host.statePath(originalName(original.path))),
          mode: original.mode,
          overwrite: true,
          origin,
        }
      : { kind: 'link', path: original.path, target: original.target, hard: false, overwrite: true, origin };
  return (await host.satisfied(entry)) ? undefined : entry;
}

/** Folders Kindling created, not needed by the target, whose every name the removals take away. */
async function emptiedDirs(
  host: Host,
  previous: AppliedRecord,
  target: readonly Entry[],
  removals: readonly Change[],
): Promise<Change[]> {
  const needed = new Set<string>();
  for (const entry of target)
    for (let p = (await host.resolve(entry.path)).host; p !== '/'; p = p.slice(0, p.lastIndexOf('/')) || '/')
      needed.add(p);
  const gone = new Set(await Promise.all(removals.map(async (r) => (await host.resolve(r.path)).host)));
  const deepestFirst = [...previous.createdDirs].sort((a, b) => b.split('/').length - a.split('/').length);
  const dirs: Change[] = [];
  for (const dir of deepestFirst) {
    if (needed.has(dir) || (await host.prior(dir)).kind !== 'dir') continue;
    const names = await readdir((await host.resolve(dir)).local);
    if (!names.every((n) => gone.has(`${dir}/${n}`))) continue;
    gone.add(dir);
    dirs.push({ kind: 'rmdir', path: dir, origin: 'storage' });
  }
  return dirs;
}

/** Two entries that ask the same of a path. */
function alike(a: Entry, b: Entry): boolean {
  return isDeepStrictEqual({ ...a, origin: undefined }, { ...b, origin: undefined });
}

/** Where Ignition enables units: a preset systemd applies at first boot, not the links `systemctl enable` makes. */
const IGNITION_PRESET = '/etc/systemd/system-preset/20-ignition.preset';

/** Whether `preset` (systemd preset lines) enables the unit `name` by that exact name, as Ignition writes it. */
function presetEnables(preset: string, name: string): boolean {
  return preset.split('\n').some((line) => {
    const [verb, unit, ...rest] = line.trim().split(/\s+/);
    return verb === 'enable' && unit === name && rest.length === 0;
  });
}

/**
 * Whether the host holds a booted entry as declared. An enablement link may also be missing where Ignition's
 * preset enables its unit (nothing at its path, so removing it later removes nothing).
 */
async function holds(host: Host, e: Entry, preset: string): Promise<boolean> {
  if (await host.satisfied(e)) return true;
  const enablement = e.kind === 'link' && e.origin === 'unit' && dirname(e.path).endsWith('.wants');
  return enablement && (await host.prior(e.path)).kind === 'absent' && presetEnables(preset, basename(e.path));
}

/**
 * The first entry of a config the host does not hold as declared (a folder or an absence excepted: a removal
 * neither removes nor replaces anything). The config handed over as the one the host booted with is only a hint:
 * the engine's word (the set's current hash), which a host that booted at another hash (a Machine created
 * mid-rollout) does not hold, and a payload Secret a guest admin may write. Going by a link, a mask or a file it
 * declares and the host does not hold would remove or replace what sits at that path, or leave a change unweighed.
 */
async function firstUnheld(host: Host, entries: readonly Entry[]): Promise<string | undefined> {
  const prior = await host.prior(IGNITION_PRESET);
  const preset = prior.kind === 'file' ? prior.data.toString('utf8') : '';
  for (const e of entries)
    if (e.kind !== 'dir' && e.kind !== 'absent' && !(await holds(host, e, preset))) return e.path;
  return undefined;
}

type Previous = Pick<Plan, 'previous' | 'previousFrom' | 'bootedUnread'> & { bootEntries?: Entry[] };

/** What the plan removes by and weighs against: the record, else the config the host booted with. */
async function previousOf(host: Host, booted: Booted | undefined): Promise<Previous> {
  const recorded = await readRecord(host);
  if (recorded) return { previous: recorded, previousFrom: 'record' };
  if (!booted) return { previous: undefined, previousFrom: 'none' };
  try {
    const bootEntries = await host.entries(parseBooted(booted.config));
    const unheld = await firstUnheld(host, bootEntries);
    if (unheld !== undefined)
      return {
        previous: undefined,
        previousFrom: 'none',
        bootedUnread: `the host does not hold ${unheld} as the config at ${booted.hash} declares it: not what it booted with`,
      };
    return { previous: recordOf(booted.hash, bootEntries), previousFrom: 'booted', bootEntries };
  } catch (err) {
    if (!(err instanceof UnsupportedConfigError)) throw err;
    return { previous: undefined, previousFrom: 'none', bootedUnread: err.message };
  }
}

/**
 * The plan for a payload on this host; an UnsupportedConfigError says why it cannot be applied in place.
 * Without a record of the applied config, `booted` (the config the host booted with) stands for it: its
 * entries are what Ignition wrote.
 */
export async function planOf(host: Host, payload: Buffer, booted?: Booted): Promise<Plan> {
  const entries = await host.entries(parseIgnition(payload));
  const writes = await host.changes(entries);
  const { bootEntries, ...previous } = await previousOf(host, booted);
  const removals = previous.previous ? await removalChanges(host, previous.previous, entries) : [];
  const declaredAtBoot = (w: Entry): boolean => bootEntries?.some((b) => alike(b, w)) === true;
  return {
    entries,
    writes,
    changes: [...writes, ...removals],
    weighed: [...writes.filter((w) => !declaredAtBoot(w)), ...removals],
    ...previous,
    kubeletVersion: payloadKubeletVersion(entries),
  };
}

/** Applies a plan as one transaction (host.ts), the target's record in its journal until the update is finished. */
export async function applyPlan(
  host: Host,
  plan: Plan,
  meta: { hash: string; reboot: boolean; units?: UnitActions; bootId: string },
): Promise<void> {
  const saved = await keepOriginals(host, plan.writes, plan.previous);
  await host.apply(plan.changes, {
    ...meta,
    kubeletVersion: plan.kubeletVersion,
    record: nextRecord(meta.hash, plan.entries, plan.previous, saved),
  });
}
