/**
 * Host paths resolved inside the host root, the one way the agent turns a host path into a path on this
 * machine. `join(root, path)` is not enough: it climbs out of the root on `..`, and this machine's kernel
 * follows a link the host holds as this machine sees it, so an absolute target lands in the agent's own
 * filesystem. Here every link met on the way is read and followed as the host itself will follow it once it
 * runs from that root: an absolute target from the root, a relative one from the link's folder, and never
 * out of the root. The last name of a path is not followed: it is the entry itself, read, written or removed
 * as it is.
 *
 * Only links root owns are followed (or links of the agent's own user, which is root on a host). A link a user
 * owns is one that user put there and may point anywhere, `/home/core/.ssh -> /root/.ssh` or `-> /etc`: the path
 * is refused, and the node's Degraded reason says which link. That settles the state the agent checks; the
 * race between the check and the write (a folder a user owns swapped for a link meanwhile) is closed by writing
 * through folders held open by descriptor (held.ts), never by path.
 */
import { constants } from 'node:fs';
import { lstat, open, readlink } from 'node:fs/promises';
import { join } from 'node:path';
import { UnsupportedConfigError } from '../../support/src/ignition/refusal.js';

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

/** Owners whose links are followed: root, and the agent's own user (the same on a host; not in tests). */
const TRUSTED = new Set([0, process.getuid?.() ?? 0]);

/** The link at `local`, or undefined when there is no link there (nothing, or a file or folder). */
async function linkAt(local: string): Promise<{ target: string; uid: number } | undefined> {
  try {
    const st = await lstat(local);
    return st.isSymbolicLink() ? { target: await readlink(local), uid: st.uid } : undefined;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    // Nothing there yet (or a file where a folder would be): the rest of the path is created, or fails, later.
    if (code === 'ENOENT' || code === 'ENOTDIR') return undefined;
    throw err;
  }
}

function refuseUntrusted(uid: number, link: string, path: string): void {
  if (!TRUSTED.has(uid))
    throw new UnsupportedConfigError(
      `${path}: the host link ${link} is owned by uid ${uid}, and the agent never follows a link a user other than root controls`,
    );
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
    const found = await linkAt(join(root, ...done, name));
    if (found === undefined) {
      done.push(name);
      continue;
    }
    const { target, uid } = found;
    link = `/${[...done, name].join('/')} -> ${target}`;
    refuseUntrusted(uid, link, path);
    if (++links > MAX_LINKS)
      throw new UnsupportedConfigError(
        `${path}: more than ${MAX_LINKS} links on the way (a loop of links on the host)`,
      );
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
