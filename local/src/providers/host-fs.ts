/**
 * Files of a host's root as its own processes see them: a host path (absolute, e.g. /etc/kubernetes/…) is
 * read and written under the root folder. A path whose folder resolves outside the root (a symlink the
 * payload or a previous boot left) is refused, so a host never reads or writes the machine's own files.
 */
import { mkdir, readFile, realpath, rename, rm, writeFile } from 'node:fs/promises';
import { dirname, join, relative, isAbsolute, sep } from 'node:path';

class HostPathError extends Error {
  override readonly name = 'HostPathError';
}

const isMissing = (err: unknown): boolean => (err as { code?: string }).code === 'ENOENT';

function outside(root: string, path: string): boolean {
  const inside = relative(root, path);
  return inside === '..' || inside.startsWith(`..${sep}`) || isAbsolute(inside);
}

export class HostFs {
  constructor(readonly root: string) {}

  /** The host path under the root, not yet resolved. */
  #under(hostPath: string): string {
    if (!isAbsolute(hostPath) || hostPath.split('/').includes('..'))
      throw new HostPathError(`"${hostPath}" is not an absolute host path`);
    return join(this.root, hostPath);
  }

  /** As #resolve, for a write: the folder is made first. */
  async #resolveToWrite(hostPath: string): Promise<string> {
    await mkdir(dirname(this.#under(hostPath)), { recursive: true, mode: 0o755 });
    return this.#resolve(hostPath);
  }

  /** Where a host path lives under the root, once its folder is known to resolve inside the root. */
  async #resolve(hostPath: string): Promise<string> {
    const target = this.#under(hostPath);
    const [root, folder] = await Promise.all([realpath(this.root), realpath(dirname(target))]);
    if (outside(root, folder)) throw new HostPathError(`${hostPath} resolves outside the host root`);
    return join(folder, target.slice(dirname(target).length + 1));
  }

  /** The file's text, or undefined when it (or its folder) does not exist. */
  async read(hostPath: string): Promise<string | undefined> {
    try {
      const file = await this.#resolve(hostPath);
      // A final symlink pointing out is refused as well: read through its resolved target.
      const real = await realpath(file);
      if (outside(await realpath(this.root), real))
        throw new HostPathError(`${hostPath} resolves outside the host root`);
      return await readFile(real, 'utf8');
    } catch (err) {
      if (isMissing(err)) return undefined;
      throw err;
    }
  }

  /** Writes atomically (a temporary file renamed over the target), so a crash never leaves half a key. */
  async write(hostPath: string, content: string, mode = 0o644): Promise<void> {
    const file = await this.#resolveToWrite(hostPath);
    const temporary = `${file}.${process.pid}.partial`;
    await writeFile(temporary, content, { mode });
    await rename(temporary, file);
  }

  async remove(hostPath: string): Promise<void> {
    try {
      await rm(await this.#resolve(hostPath), { force: true });
    } catch (err) {
      if (!isMissing(err)) throw err;
    }
  }
}
