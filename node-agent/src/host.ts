/**
 * The host side of the agent: what the host root holds, which entries differ, and an atomic apply
 * (backup → write → verify; on any failure, restore the backup). A journal in the host root records a
 * transaction before its first write, so an agent killed at any line restores (or finishes) on restart.
 *
 * Every host path goes through resolveInRoot (root.ts): nothing is read, written, backed up, restored or
 * removed outside the host root. changes() resolves every path an entry involves, so a config that would
 * leave the root is refused before anything is written. Every write and removal then goes through the folder
 * it happens in, held open by descriptor (held.ts): a folder a user owns swapped for a link meanwhile fails
 * the apply (and the backup is put back the same way) instead of redirecting it.
 */
import { lstat, mkdir, readdir, readFile, readlink, rename, rm } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import type { Disruption } from '../../api/src/disruption.js';
import { HeldDir } from './held.js';
import {
  entriesOf,
  homeOf,
  type Entry,
  type EntryOrigin,
  type IgnitionConfig,
} from '../../support/src/ignition/ignition.js';
import { UnsupportedConfigError } from '../../support/src/ignition/refusal.js';
import { parseAccounts, resolveOwner, type Owner } from '../../support/src/ignition/owners.js';
import { createFile, readNoFollow, resolveInRoot, type Resolved } from './root.js';

/** The agent's own state on the host (journal, backup, the list of paths it manages). */
export const STATE_DIR = '/var/lib/kindling-agent';

/** An OS file or link Kindling replaced; a file's bytes live in the state folder (originalName). */
export type Original = { path: string; kind: 'file'; mode: number } | { path: string; kind: 'symlink'; target: string };

/** What runs on the host after an apply that needs no reboot. */
export type UnitActions = Pick<Disruption, 'daemonReload' | 'reload' | 'restart'>;

/** What Kindling wrote on the host at a hash (record.ts keeps it): the journal carries the target's. */
export interface AppliedRecord {
  hash: string;
  /** Every file, link and folder the config at `hash` declares (by the config's path). */
  written: { path: string; kind: 'file' | 'link' | 'dir'; origin: EntryOrigin }[];
  /** Folders (host paths) that did not exist before Kindling wrote them or below them. */
  createdDirs: string[];
  /** What each path was before Kindling first replaced it, when it was not Kindling's. */
  originals: Original[];
}

/** What the transaction does to one path: an entry of the config, or the removal of a folder Kindling created (record.ts). */
export type Change = Entry | { kind: 'rmdir'; path: string; origin: EntryOrigin };

/** `owner`: absent in journals written before owners were recorded. */
export type Prior =
  | { kind: 'absent' }
  | { kind: 'file'; mode: number; data: Buffer; owner?: Owner }
  | { kind: 'symlink'; target: string; owner?: Owner }
  | { kind: 'dir'; mode: number; owner?: Owner }
  | { kind: 'other' };

export interface Journal {
  hash: string;
  /** applying: files being written; applied: written, the reboot and health gate (gate.ts) to come;
   * rolledBack: the gate failed and the backup was put back (kept so the update is not tried again). */
  phase: 'applying' | 'applied' | 'rolledBack';
  reboot: boolean;
  /** Without a reboot: the units to daemon-reload, reload or restart once the files are written (disruption.ts). */
  units?: UnitActions;
  /** The unit actions ran for this phase (set back to false by a rollback, which runs them again). */
  unitsRun?: boolean;
  /** The boot the journal was written in: another one means the host rebooted since. */
  bootId: string;
  /** The kubelet version the payload's release file names: the health gate expects the Node to report it. */
  kubeletVersion?: string;
  /** When the health gate started counting (ms since the epoch: it must survive the reboot). */
  gateStartedAt?: number;
  /** The gate passed: only the uncordon and Done are left. */
  healthy?: boolean;
  /** Why the update was rolled back (phase rolledBack). */
  reason?: string;
  /** What each touched path was before, in the order it was touched; file data lives in backup/<i>. */
  records: { path: string; prior: Exclude<Prior, { kind: 'file' }> | { kind: 'file'; mode: number; owner?: Owner } }[];
  /** What Kindling wrote once this hash is on the host (record.ts): committed when the update is finished. */
  record?: AppliedRecord;
}

export class Host {
  readonly root: string;

  constructor(root: string) {
    this.root = root;
  }

  /** Where a host path is on this machine, with every link on the way followed inside the root (not the last name). */
  resolve(path: string): Promise<Resolved> {
    return resolveInRoot(this.root, path);
  }

  /** Where a file of the agent's own state (journal, backup, boot ID) is on this machine. */
  async statePath(name: string): Promise<string> {
    return (await this.resolve(`${STATE_DIR}/${name}`)).local;
  }

  /** The entries a config asks for on this host: SSH keys go where the host keeps them (see entriesOf). */
  async entries(config: IgnitionConfig): Promise<Entry[]> {
    const withKeysDir = new Set<string>();
    for (const user of config.passwd?.users ?? []) {
      if (!user.sshAuthorizedKeys?.length) continue;
      const home = homeOf(user.name);
      if ((await this.prior(`${home}/.ssh/authorized_keys.d`)).kind === 'dir') withKeysDir.add(home);
    }
    const accounts = await this.#accounts();
    return entriesOf(config, {
      hasKeysDir: (home) => withKeysDir.has(home),
      owner: (want, where) => resolveOwner(accounts, want, where),
    });
  }

  /** The host's own accounts (see owners.ts), read inside the host root. */
  async #accounts(): Promise<ReturnType<typeof parseAccounts>> {
    const text = async (paths: string[]): Promise<string> => {
      const priors = await Promise.all(paths.map((p) => this.prior(p)));
      return priors.map((p) => (p.kind === 'file' ? `${p.data.toString('utf8')}\n` : '')).join('');
    };
    return parseAccounts(await text(['/etc/passwd', '/usr/lib/passwd']), await text(['/etc/group', '/usr/lib/group']));
  }

  async prior(path: string): Promise<Prior> {
    const p = (await this.resolve(path)).local;
    try {
      const st = await lstat(p);
      const owner = { uid: st.uid, gid: st.gid };
      if (st.isSymbolicLink()) return { kind: 'symlink', target: await readlink(p), owner };
      if (st.isDirectory()) return { kind: 'dir', mode: st.mode & 0o7777, owner };
      if (st.isFile()) return { kind: 'file', mode: st.mode & 0o7777, data: await readNoFollow(p), owner };
      return { kind: 'other' };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT' || (err as NodeJS.ErrnoException).code === 'ENOTDIR')
        return { kind: 'absent' };
      throw err;
    }
  }

  /** True when the host already holds what the change asks for (its owner too, when the entry names one). */
  async satisfied(entry: Change): Promise<boolean> {
    if (entry.kind === 'rmdir') {
      // A folder something else was put in meanwhile stays: only an empty one is Kindling's to remove.
      if ((await this.prior(entry.path)).kind !== 'dir') return true;
      return (await readdir((await this.resolve(entry.path)).local)).length > 0;
    }
    const now = await this.prior(entry.path);
    return ownerHolds(entry, now) && this.#holds(entry, now);
  }

  async #holds(entry: Entry, now: Prior): Promise<boolean> {
    switch (entry.kind) {
      case 'file':
        return now.kind === 'file' && now.mode === entry.mode && now.data.equals(entry.data);
      case 'dir':
        return now.kind === 'dir' && now.mode === entry.mode;
      case 'absent':
        return now.kind === 'absent';
      default:
        return entry.hard
          ? now.kind === 'file' && (await this.#sameInode(entry.path, entry.target))
          : now.kind === 'symlink' && now.target === entry.target;
    }
  }

  async #sameInode(a: string, b: string): Promise<boolean> {
    const [x, y] = await Promise.all([a, b].map(async (p) => lstat((await this.resolve(p)).local))).catch(() => [
      undefined,
      undefined,
    ]);
    return x !== undefined && y !== undefined && x.ino === y.ino && x.dev === y.dev;
  }

  /**
   * The entries the host does not hold yet; refuses what would replace a thing of another kind, and every
   * entry whose path (or hard-link target) would lead out of the root, before anything is written.
   */
  async changes(entries: readonly Entry[]): Promise<Entry[]> {
    const changes: Entry[] = [];
    for (const entry of entries) {
      await this.resolve(entry.path);
      if (entry.kind === 'link' && entry.hard) await this.resolve(entry.target);
      if (await this.satisfied(entry)) continue;
      refuseClobber(entry, await this.prior(entry.path));
      changes.push(entry);
    }
    return changes;
  }

  async readJournal(): Promise<Journal | undefined> {
    try {
      return JSON.parse((await readNoFollow(await this.statePath('journal.json'))).toString('utf8')) as Journal;
    } catch {
      return undefined;
    }
  }

  async writeJournal(journal: Journal): Promise<void> {
    await writeAtomic(await this.statePath('journal.json'), JSON.stringify(journal));
  }

  async clearJournal(): Promise<void> {
    await rm(await this.statePath('journal.json'), { force: true });
    await rm(await this.statePath('backup'), { recursive: true, force: true });
  }

  /**
   * Applies the changes as one transaction; on any failure restores every touched path and rethrows.
   * Leaves the journal in phase "applied" on success, with the backup: the caller clears both once the
   * health gate passed and the update is finished, or restores the backup when the gate fails.
   */
  async apply(
    changes: readonly Change[],
    meta: {
      hash: string;
      reboot: boolean;
      units?: UnitActions;
      bootId: string;
      kubeletVersion?: string;
      record?: AppliedRecord;
    },
  ): Promise<void> {
    const journal: Journal = { ...meta, phase: 'applying', records: [] };
    const backedUp = await this.#backup(changes, journal);
    await this.writeJournal(journal);
    try {
      for (const [i, entry] of changes.entries()) await this.#write(entry, backedUp[i] ?? '');
      for (const entry of changes)
        if (!(await this.satisfied(entry)))
          throw new Error(`verification failed: ${entry.path} does not hold what was written`);
    } catch (err) {
      await this.restore(journal);
      await this.clearJournal();
      throw err;
    }
    const record = journal.record && { ...journal.record, createdDirs: await this.#createdDirs(journal) };
    await this.writeJournal({ ...journal, record, phase: 'applied' });
  }

  /** The folders Kindling created that are there now: the record's, and those this transaction created. */
  async #createdDirs(journal: Journal): Promise<string[]> {
    const created = journal.records.filter((r) => r.prior.kind === 'absent').map((r) => r.path);
    const dirs: string[] = [];
    for (const dir of new Set([...(journal.record?.createdDirs ?? []), ...created]))
      if ((await this.prior(dir)).kind === 'dir') dirs.push(dir);
    return dirs;
  }

  /**
   * Puts back what the journal's records say each path was. The records hold host paths with no link on
   * the way (as resolved at backup), so each is put back where it was, whatever the config's paths said.
   */
  async restore(journal: Journal): Promise<void> {
    const backup = await this.statePath('backup');
    for (const [i, { path, prior }] of [...journal.records.entries()].reverse()) {
      const { host } = await this.resolve(path);
      // A folder on the way that is gone (or no folder now) holds nothing of this record to put back.
      const dir = await HeldDir.open(this.root, dirname(host)).catch(() => undefined);
      if (!dir) continue;
      try {
        await restoreOne(dir, basename(host), prior, () => readFile(join(backup, String(i))));
      } finally {
        await dir.close();
      }
    }
  }

  /** Records what each path (and each folder the write will create) was; the host path each change resolved to, in order. */
  async #backup(changes: readonly Change[], journal: Journal): Promise<string[]> {
    const backup = await this.statePath('backup');
    await rm(backup, { recursive: true, force: true });
    await mkdir(backup, { recursive: true, mode: 0o700 });
    const seen = new Set<string>();
    const resolved: string[] = [];
    for (const entry of changes) {
      const { host } = await this.resolve(entry.path);
      resolved.push(host);
      for (const path of [...(await this.#missingParents(host)), host]) {
        if (seen.has(path)) continue;
        seen.add(path);
        const prior = await this.prior(path);
        if (prior.kind === 'file') await createFile(join(backup, String(journal.records.length)), prior.data, 0o600);
        journal.records.push({ path, prior: prior.kind === 'file' ? { kind: 'file', mode: prior.mode } : prior });
      }
    }
    return resolved;
  }

  /** Ancestors of a resolved host path that do not exist yet (outermost first): restore removes them. */
  async #missingParents(host: string): Promise<string[]> {
    const missing: string[] = [];
    for (let dir = dirname(host); dir !== '/' && (await this.prior(dir)).kind === 'absent'; dir = dirname(dir))
      missing.unshift(dir);
    return missing;
  }

  /** Writes one entry where it resolved at backup; a path that resolves elsewhere now (a link written meanwhile) fails the apply. */
  async #write(entry: Change, backedUp: string): Promise<void> {
    try {
      const { host } = await this.resolve(entry.path);
      if (host !== backedUp) throw new Error(`it now leads to ${host}, not to ${backedUp} as when it was backed up`);
      if (entry.kind === 'dir') {
        // Folders on the way are created 0755, as mkdir -p would; the entry's own folder gets its mode and owner.
        await HeldDir.with(this.root, host, (dir) => dir.set(entry.mode, entry.owner), 0o755);
        return;
      }
      const create = entry.kind === 'absent' || entry.kind === 'rmdir' ? undefined : 0o755;
      await HeldDir.with(this.root, dirname(host), (dir) => this.#writeIn(dir, basename(host), entry), create);
    } catch (err) {
      throw new Error(`failed to write ${entry.path}: ${(err as Error).message}`, { cause: err });
    }
  }

  /** Writes one entry (not a folder) as `name` in its held folder: to a temporary name, then renamed over. */
  async #writeIn(dir: HeldDir, name: string, entry: Exclude<Change, { kind: 'dir' }>): Promise<void> {
    // A folder is removed only when empty (HeldDir.remove): something put in it since the plan keeps it.
    if (entry.kind === 'absent' || entry.kind === 'rmdir') return dir.remove(name);
    const tmp = `${name}.kindling-tmp`;
    await dir.remove(tmp);
    if (entry.kind === 'file') await dir.createFile(tmp, entry.data, entry.mode, entry.owner);
    else if (!entry.hard) await dir.symlink(entry.target, tmp, entry.owner);
    else {
      const target = (await this.resolve(entry.target)).host;
      await HeldDir.with(this.root, dirname(target), (source) => dir.link(source, basename(target), tmp));
    }
    // rename() replaces atomically: a reader sees the old or the new file, never half of one.
    await dir.rename(tmp, name);
  }
}

/** Puts back one record's prior state as the entry `name` of its held folder. */
async function restoreOne(
  dir: HeldDir,
  name: string,
  prior: Journal['records'][number]['prior'],
  data: () => Promise<Buffer>,
): Promise<void> {
  await dir.remove(`${name}.kindling-tmp`);
  if (prior.kind === 'dir') {
    // A folder the transaction removed (an emptied one Kindling had created) comes back.
    const self = await dir.child(name, prior.mode).catch(() => undefined);
    await self?.set(prior.mode, prior.owner).catch(() => undefined);
    await self?.close();
    return;
  }
  await dir.remove(name);
  if (prior.kind === 'file') await dir.createFile(name, await data(), prior.mode, prior.owner);
  else if (prior.kind === 'symlink') await dir.symlink(prior.target, name, prior.owner);
}

/** The host holds the owner an entry names (an entry that names none takes any). */
function ownerHolds(entry: Entry, now: Prior): boolean {
  if (entry.kind === 'absent' || !entry.owner) return true;
  const have = 'owner' in now ? now.owner : undefined;
  return have?.uid === entry.owner.uid && have.gid === entry.owner.gid;
}

/** Replaces a file of the agent's state whole (never through a link). */
export async function writeAtomic(local: string, text: string): Promise<void> {
  await mkdir(dirname(local), { recursive: true, mode: 0o700 });
  await rm(`${local}.tmp`, { force: true });
  await createFile(`${local}.tmp`, text, 0o600);
  await rename(`${local}.tmp`, local);
}

/**
 * Replacing these would lose what is not a file of the config: the host holds something of another kind.
 * A file the config names is the config's, whatever `overwrite` says, as with the machine-config-daemon:
 * `overwrite: false` tells Ignition not to replace a file at first boot, and an in-place update is replacing
 * what that boot (or an earlier update) wrote. The backup taken first restores it if the update fails.
 */
function clobberReason(entry: Entry, now: Prior): string | undefined {
  if (now.kind === 'absent') return undefined;
  if (now.kind === 'other') return 'is neither a file, a directory nor a link on the host';
  if (entry.kind === 'absent') return undefined;
  if (entry.kind === 'dir') return now.kind === 'dir' ? undefined : 'is not a directory on the host';
  if (now.kind === 'dir') return 'is a directory on the host';
  return undefined;
}

function refuseClobber(entry: Entry, now: Prior): void {
  const reason = clobberReason(entry, now);
  if (reason) throw new UnsupportedConfigError(`${entry.path} ${reason}`);
}
