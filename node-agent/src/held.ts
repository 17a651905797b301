/**
 * Writes below a host folder the agent holds open, so that no name on the way is looked up again once it was
 * checked. resolveInRoot (root.ts) turns a config's path into a host path with no link left on it; between that
 * check and the write, a user who owns a folder on the way (`/home/core` owns `.ssh`) can swap a folder for a
 * link, and a write by path would follow it as root. Node has no openat(2), so each folder is opened relative to
 * its parent through the parent's descriptor: `/proc/self/fd/<parent>/<name>` with O_DIRECTORY|O_NOFOLLOW. The
 * kernel resolves `/proc/self/fd/<parent>` to the open folder itself, not to a path, so this is
 * openat(parent, name, O_NOFOLLOW): a link in place of `name` fails the open (ELOOP) instead of being followed,
 * and a folder renamed away after it was opened is still the one written to (a user can only move it where
 * they may write already). Every write (create, rename, link, remove, chmod, chown) then names one entry of a
 * held folder the same way, and never follows its last name either.
 */
import { constants } from 'node:fs';
import { lchown, link, lstat, mkdir, open, rename, rmdir, symlink, unlink, type FileHandle } from 'node:fs/promises';
import { posix } from 'node:path';
import { namesOf } from './root.js';
import type { Owner } from '../../support/src/ignition/owners.js';

const DIR_FLAGS = constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW;

const codeOf = (err: unknown): string | undefined => (err as NodeJS.ErrnoException).code;

/** A host folder held open by descriptor (see the top of this file). */
export class HeldDir {
  readonly #handle: FileHandle;
  /** The host path it was opened as (for messages). */
  readonly host: string;

  private constructor(handle: FileHandle, host: string) {
    this.#handle = handle;
    this.host = host;
  }

  /**
   * Opens the host folder `host` (a path resolveInRoot returned: no link on it) inside `root`, one name at a
   * time; `createMode`: creates missing folders with that mode. Fails when any name is not a folder now.
   */
  static async open(root: string, host: string, createMode?: number): Promise<HeldDir> {
    let dir = new HeldDir(await open(root, DIR_FLAGS), '/');
    try {
      for (const name of namesOf(host)) {
        const next = await dir.child(name, createMode);
        await dir.close();
        dir = next;
      }
    } catch (err) {
      await dir.close();
      throw err;
    }
    return dir;
  }

  /** Runs `use` on the folder held open, and closes it whatever happens. */
  static async with<T>(root: string, host: string, use: (dir: HeldDir) => Promise<T>, createMode?: number): Promise<T> {
    const dir = await HeldDir.open(root, host, createMode);
    try {
      return await use(dir);
    } finally {
      await dir.close();
    }
  }

  /** The folder `name` of this one, held open in turn (created with `createMode` when missing and asked). */
  async child(name: string, createMode?: number): Promise<HeldDir> {
    const host = posix.join(this.host, name);
    return new HeldDir(await openChild(this.#handle, name, host, createMode), host);
  }

  /** The entry `name` of this folder as a path the kernel looks up from the held descriptor. */
  at(name: string): string {
    return `/proc/self/fd/${this.#handle.fd}/${name}`;
  }

  /** chmod and chown of the held folder itself (the owner first: chown clears mode bits). */
  async set(mode: number, owner?: Owner): Promise<void> {
    if (owner) await this.#handle.chown(owner.uid, owner.gid);
    await this.#handle.chmod(mode);
  }

  /** Creates a file that must not exist yet, with exactly `mode` and `owner`, never through a link. */
  async createFile(name: string, data: Buffer | string, mode: number, owner?: Owner): Promise<void> {
    const flags = constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW;
    const handle = await open(this.at(name), flags, mode);
    try {
      if (owner) await handle.chown(owner.uid, owner.gid);
      await handle.chmod(mode);
      await handle.writeFile(data);
    } finally {
      await handle.close();
    }
  }

  /** A symbolic link, owned by `owner` when given (lchown: never the target). */
  async symlink(target: string, name: string, owner?: Owner): Promise<void> {
    await symlink(target, this.at(name));
    // Node has no fchownat: lchown names the link through the held folder, and never follows it.
    if (owner) await lchown(this.at(name), owner.uid, owner.gid);
  }

  /** A hard link to the entry `from` of the held folder `source` (link(2) does not follow a link there). */
  async link(source: HeldDir, from: string, name: string): Promise<void> {
    await link(source.at(from), this.at(name));
  }

  /** Replaces `to` with `from` atomically: a reader sees the old or the new entry, never half of one. */
  async rename(from: string, to: string): Promise<void> {
    await rename(this.at(from), this.at(to));
  }

  /**
   * Removes the entry `name` if it is there: a file or link, or a folder once it is empty. Never recursive: a
   * folder that still holds entries holds what someone else put there, and removing through it would follow
   * whatever a user swapped in meanwhile.
   */
  async remove(name: string): Promise<void> {
    try {
      if ((await lstat(this.at(name))).isDirectory()) await rmdir(this.at(name));
      else await unlink(this.at(name));
    } catch (err) {
      if (!['ENOENT', 'ENOTEMPTY', 'EEXIST'].includes(codeOf(err) ?? '')) throw err;
    }
  }

  close(): Promise<void> {
    return this.#handle.close();
  }
}

/** openat(parent, name, O_DIRECTORY|O_NOFOLLOW), creating the folder first when asked and missing. */
async function openChild(parent: FileHandle, name: string, host: string, createMode?: number): Promise<FileHandle> {
  const path = `/proc/self/fd/${parent.fd}/${name}`;
  try {
    return await open(path, DIR_FLAGS);
  } catch (err) {
    if (codeOf(err) === 'ENOENT' && createMode !== undefined) {
      await mkdir(path, createMode).catch((e: unknown) => {
        if (codeOf(e) !== 'EEXIST') throw e;
      });
      return openChild(parent, name, host);
    }
    if (codeOf(err) === 'ELOOP' || codeOf(err) === 'ENOTDIR')
      throw new Error(`${host}: "${name}" on the way is not a folder now (a link or a file was put there)`, {
        cause: err,
      });
    throw err;
  }
}
