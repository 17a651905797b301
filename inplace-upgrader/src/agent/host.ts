/**
 * The host side of the agent: what the host root holds, which entries differ, and an atomic apply
 * (backup → write → verify; on any failure, restore the backup). A journal in the host root records a
 * transaction before its first write, so an agent killed at any line restores (or finishes) on restart.
 */
import { lstat, mkdir, readFile, readlink, rename, rm, symlink, link, writeFile, chmod, stat } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { UnsupportedConfigError, type Entry } from './ignition.js';

/** The agent's own state on the host (journal, backup, the list of paths it manages). */
export const STATE_DIR = '/var/lib/kindling-agent';

export type Prior =
  | { kind: 'absent' }
  | { kind: 'file'; mode: number; data: Buffer }
  | { kind: 'symlink'; target: string }
  | { kind: 'dir'; mode: number }
  | { kind: 'other' };

export interface Journal {
  hash: string;
  phase: 'applying' | 'applied';
  reboot: boolean;
  bootId: string;
  /** What each touched path was before, in the order it was touched; file data lives in backup/<i>. */
  records: { path: string; prior: Exclude<Prior, { kind: 'file' }> | { kind: 'file'; mode: number } }[];
}

export class Host {
  readonly root: string;

  constructor(root: string) {
    this.root = root;
  }

  /** The absolute path on this machine of a host path. */
  at(path: string): string {
    return join(this.root, path);
  }

  get stateDir(): string {
    return this.at(STATE_DIR);
  }

  async prior(path: string): Promise<Prior> {
    const p = this.at(path);
    try {
      const st = await lstat(p);
      if (st.isSymbolicLink()) return { kind: 'symlink', target: await readlink(p) };
      if (st.isDirectory()) return { kind: 'dir', mode: st.mode & 0o7777 };
      if (st.isFile()) return { kind: 'file', mode: st.mode & 0o7777, data: await readFile(p) };
      return { kind: 'other' };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT' || (err as NodeJS.ErrnoException).code === 'ENOTDIR') return { kind: 'absent' };
      throw err;
    }
  }

  /** True when the host already holds what the entry asks for. */
  async satisfied(entry: Entry): Promise<boolean> {
    const now = await this.prior(entry.path);
    switch (entry.kind) {
      case 'file':
        return now.kind === 'file' && now.mode === entry.mode && now.data.equals(entry.data);
      case 'dir':
        return now.kind === 'dir' && now.mode === entry.mode;
      case 'absent':
        return now.kind === 'absent';
      default:
        return entry.hard ? now.kind === 'file' && (await this.#sameInode(entry.path, entry.target)) : now.kind === 'symlink' && now.target === entry.target;
    }
  }

  async #sameInode(a: string, b: string): Promise<boolean> {
    const [x, y] = await Promise.all([stat(this.at(a)), stat(this.at(b))]).catch(() => [undefined, undefined]);
    return x !== undefined && y !== undefined && x.ino === y.ino && x.dev === y.dev;
  }

  /** The entries the host does not hold yet; refuses what would replace a thing of another kind. */
  async changes(entries: readonly Entry[]): Promise<Entry[]> {
    const changes: Entry[] = [];
    for (const entry of entries) {
      if (await this.satisfied(entry)) continue;
      refuseClobber(entry, await this.prior(entry.path));
      changes.push(entry);
    }
    return changes;
  }

  async readJournal(): Promise<Journal | undefined> {
    try {
      return JSON.parse(await readFile(join(this.stateDir, 'journal.json'), 'utf8')) as Journal;
    } catch {
      return undefined;
    }
  }

  async writeJournal(journal: Journal): Promise<void> {
    await this.#writeAtomic(join(this.stateDir, 'journal.json'), JSON.stringify(journal));
  }

  async clearJournal(): Promise<void> {
    await rm(join(this.stateDir, 'journal.json'), { force: true });
    await rm(join(this.stateDir, 'backup'), { recursive: true, force: true });
  }

  /**
   * Applies the changes as one transaction; on any failure restores every touched path and rethrows.
   * Leaves the journal in phase "applied" on success (the caller clears it once the update is finished).
   */
  async apply(changes: readonly Entry[], meta: { hash: string; reboot: boolean; bootId: string }): Promise<void> {
    const journal: Journal = { ...meta, phase: 'applying', records: [] };
    await this.#backup(changes, journal);
    await this.writeJournal(journal);
    try {
      for (const entry of changes) await this.#write(entry);
      for (const entry of changes) if (!(await this.satisfied(entry))) throw new Error(`verification failed: ${entry.path} does not hold what was written`);
    } catch (err) {
      await this.restore(journal);
      await this.clearJournal();
      throw err;
    }
    await this.writeJournal({ ...journal, phase: 'applied' });
  }

  /** Puts back what the journal's records say each path was. */
  async restore(journal: Journal): Promise<void> {
    const backup = join(this.stateDir, 'backup');
    for (const [i, { path, prior }] of [...journal.records.entries()].reverse()) {
      const p = this.at(path);
      await rmQuiet(`${p}.kindling-tmp`);
      if (prior.kind === 'dir') {
        await chmod(p, prior.mode).catch(() => undefined);
        continue;
      }
      await rmQuiet(p, prior.kind === 'absent');
      if (prior.kind === 'file') {
        await writeFile(p, await readFile(join(backup, String(i))), { mode: prior.mode });
        await chmod(p, prior.mode);
      } else if (prior.kind === 'symlink') await symlink(prior.target, p);
    }
  }

  async #backup(changes: readonly Entry[], journal: Journal): Promise<void> {
    const backup = join(this.stateDir, 'backup');
    await rm(backup, { recursive: true, force: true });
    await mkdir(backup, { recursive: true, mode: 0o700 });
    const seen = new Set<string>();
    for (const entry of changes) {
      for (const path of [...this.#missingParents(entry.path), entry.path]) {
        if (seen.has(path)) continue;
        seen.add(path);
        const prior = await this.prior(path);
        if (prior.kind === 'file') await writeFile(join(backup, String(journal.records.length)), prior.data);
        journal.records.push({ path, prior: prior.kind === 'file' ? { kind: 'file', mode: prior.mode } : prior });
      }
    }
  }

  /** Ancestors of a path that do not exist yet (outermost first): restore removes them. */
  #missingParents(path: string): string[] {
    const missing: string[] = [];
    for (let dir = dirname(path); dir !== '/' && !existsSync(this.at(dir)); dir = dirname(dir)) missing.unshift(dir);
    return missing;
  }

  async #write(entry: Entry): Promise<void> {
    const p = this.at(entry.path);
    try {
      if (entry.kind === 'absent') return void (await rm(p, { force: true }));
      if (entry.kind === 'dir') {
        await mkdir(p, { recursive: true, mode: entry.mode });
        return void (await chmod(p, entry.mode));
      }
      await mkdir(dirname(p), { recursive: true, mode: 0o755 });
      const tmp = `${p}.kindling-tmp`;
      await rm(tmp, { force: true });
      if (entry.kind === 'file') {
        await writeFile(tmp, entry.data, { mode: entry.mode });
        await chmod(tmp, entry.mode);
      } else if (entry.hard) await link(this.at(entry.target), tmp);
      else await symlink(entry.target, tmp);
      // rename() replaces atomically: a reader sees the old or the new file, never half of one.
      await rename(tmp, p);
    } catch (err) {
      throw new Error(`failed to write ${entry.path}: ${(err as Error).message}`, { cause: err });
    }
  }

  async #writeAtomic(path: string, text: string): Promise<void> {
    await mkdir(dirname(path), { recursive: true, mode: 0o700 });
    await writeFile(`${path}.tmp`, text, { mode: 0o600 });
    await rename(`${path}.tmp`, path);
  }
}

/** rm -f that also shrugs at a path under a regular file (nothing can be there to remove). */
async function rmQuiet(path: string, recursive = false): Promise<void> {
  try {
    await rm(path, { recursive, force: true });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOTDIR') throw err;
  }
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
