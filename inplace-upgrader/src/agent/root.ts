/**
 * Host paths resolved inside the host root, the one way the agent turns a host path into a path on this
 * machine. `join(root, path)` is not enough: it climbs out of the root on `..`, and this machine's kernel
 * follows a link the host holds as this machine sees it, so an absolute target lands in the agent's own
 * filesystem. Here every link met on the way is read and followed as the host itself will follow it once it
 * runs from that root: an absolute target from the root, a relative one from the link's folder, and never
 * out of the root. The last name of a path is not followed: it is the entry itself, read, written or removed
 * as it is.
 *
 * What is left is a race: a link put in place between the check and the write. Files are created with
 * O_NOFOLLOW|O_EXCL, so the last name can never be a link; a folder on the way swapped for a link meanwhile
 * would need a process on the host racing the agent, which already runs as root there.
 */
import { constants } from 'node:fs';
import { lstat, open, readlink } from 'node:fs/promises';
import { join } from 'node:path';
import { UnsupportedConfigError } from './ignition.js';

/** As Linux's MAXSYMLINKS: more links than this on one path is a loop. */
export const MAX_LINKS = 40;

export interface Resolved {
  /** The host path with no link left on the way (e.g. /var/home/core/.ssh for /home/core/.ssh). */
  host: string;
  /** Where that is on this machine. */
  local: string;
}

/** The names of an absolute host path; refuses `.` and `..` (a host path the agent is given names a place, it does not climb). */
export function namesOf(path: string): string[] {
  if (!path.startsWith('/') || path.includes('\0')) throw new UnsupportedConfigError(`path "${path}" is not absolute`);
  const names = path.split('/').filter((n) => n !== '');
  if (names.some((n) => n === '.' || n === '..'))
    throw new UnsupportedConfigError(`path "${path}" has a "." or ".." component`);
  return names;
}

/** The target of the link at `local`, or undefined when there is no link there (nothing, or a file or folder). */
async function linkAt(local: string): Promise<string | undefined> {
  try {
    return (await lstat(local)).isSymbolicLink() ? await readlink(local) : undefined;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    // Nothing there yet (or a file where a folder would be): the rest of the path is created, or fails, later.
    if (code === 'ENOENT' || code === 'ENOTDIR') return undefined;
    throw err;
  }
}

/** Resolves `path` inside `root`, following every link on the way to its last name (see the top of this file). */
export async function resolveInRoot(root: string, path: string): Promise<Resolved> {
  const names = namesOf(path);
  const last = names.pop();
  const done: string[] = [];
  // Names still to walk, the next one at the end.
  const todo = names.reverse();
  let links = 0;
  let link = '';
  for (let name = todo.pop(); name !== undefined; name = todo.pop()) {
    if (name === '' || name === '.') continue;
    if (name === '..') {
      if (done.length === 0)
        throw new UnsupportedConfigError(`${path}: the host link ${link} leads out of the host root`);
      done.pop();
      continue;
    }
    const target = await linkAt(join(root, ...done, name));
    if (target === undefined) {
      done.push(name);
      continue;
    }
    if (++links > MAX_LINKS)
      throw new UnsupportedConfigError(
        `${path}: more than ${MAX_LINKS} links on the way (a loop of links on the host)`,
      );
    link = `/${[...done, name].join('/')} -> ${target}`;
    if (target.startsWith('/')) done.length = 0;
    todo.push(...target.split('/').reverse());
  }
  if (last !== undefined) done.push(last);
  return { host: `/${done.join('/')}`, local: join(root, ...done) };
}

/** Creates a file that must not exist yet, never through a link, with exactly `mode` (the umask is not applied). */
export async function createFile(local: string, data: Buffer | string, mode: number): Promise<void> {
  const handle = await open(
    local,
    constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW,
    mode,
  );
  try {
    await handle.chmod(mode);
    await handle.writeFile(data);
  } finally {
    await handle.close();
  }
}

/** Reads a file, never through a link. */
export async function readNoFollow(local: string): Promise<Buffer> {
  const handle = await open(local, constants.O_RDONLY | constants.O_NOFOLLOW);
  try {
    return await handle.readFile();
  } finally {
    await handle.close();
  }
}

/** chmod of a folder, never through a link (chmod(2) would follow one). */
export async function chmodDir(local: string, mode: number): Promise<void> {
  const handle = await open(local, constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW);
  try {
    await handle.chmod(mode);
  } finally {
    await handle.close();
  }
}
