/**
 * The byte budget of the cache directory's payload files (`--cache-dir-max-bytes`): every distinct
 * (release, config) pair ever served leaves a file, so without a bound the directory grows with every config
 * change for the life of the volume. Files are kept in least-recently-used order (a file's mtime is its last
 * use, so the order survives a restart) and the oldest go first, at start and after every write. A pruned
 * payload is generated again if a host still asks for it. Pins are never pruned: they are a few bytes each,
 * and dropping one would let a moved tag change the payload of a pool.
 */
import { readdir, stat, unlink, utimes } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from '../../../support/src/logger.js';

/** A use refreshes a file's place (and its mtime) at most this often: the request path stays one Map look-up. */
const TOUCH_EVERY_MS = 60_000;

interface FileUse {
  bytes: number;
  usedAtMs: number;
}

export interface DirBudgetOptions {
  dir: string;
  maxBytes: number;
  log: Logger;
  now?: () => number;
}

export class DirBudget {
  readonly #opts: DirBudgetOptions;
  readonly #now: () => number;
  /** In least-recently-used order: a Map iterates in insertion order and a use re-inserts. */
  readonly #files = new Map<string, FileUse>();
  #bytes = 0;

  constructor(opts: DirBudgetOptions) {
    this.#opts = opts;
    this.#now = opts.now ?? Date.now;
  }

  get bytes(): number {
    return this.#bytes;
  }

  /** Reads the directory (oldest use first), removes temporary files a crash left, and prunes. */
  async load(): Promise<void> {
    const found: (FileUse & { name: string })[] = [];
    for (const name of await readdir(this.#opts.dir)) {
      const path = join(this.#opts.dir, name);
      if (name.endsWith('.tmp')) {
        await unlink(path).catch(() => undefined);
        continue;
      }
      const s = await stat(path).catch(() => undefined);
      if (s?.isFile()) found.push({ name, bytes: s.size, usedAtMs: Math.max(s.mtimeMs, s.atimeMs) });
    }
    found.sort((a, b) => a.usedAtMs - b.usedAtMs);
    for (const { name, ...use } of found) this.#set(name, use);
    await this.#prune();
  }

  /** A file was written: record it, then bring the directory back within the budget (never this file). */
  async added(name: string, bytes: number): Promise<void> {
    this.#forget(name);
    this.#set(name, { bytes, usedAtMs: this.#now() });
    await this.#prune(name);
  }

  /** The payload was served: it becomes the most recently used, and its mtime says so for the next start. */
  used(name: string): void {
    const use = this.#files.get(name);
    const now = this.#now();
    if (!use || now - use.usedAtMs < TOUCH_EVERY_MS) return;
    this.#files.delete(name);
    this.#files.set(name, { ...use, usedAtMs: now });
    const at = new Date(now);
    utimes(join(this.#opts.dir, name), at, at).catch(() => undefined);
  }

  #set(name: string, use: FileUse): void {
    this.#files.set(name, use);
    this.#bytes += use.bytes;
  }

  #forget(name: string): void {
    const use = this.#files.get(name);
    if (!use) return;
    this.#files.delete(name);
    this.#bytes -= use.bytes;
  }

  async #prune(keep?: string): Promise<void> {
    const victims: string[] = [];
    for (const name of this.#files.keys()) {
      if (this.#bytes <= this.#opts.maxBytes) break;
      if (name === keep) continue;
      this.#forget(name);
      victims.push(name);
    }
    if (victims.length === 0) return;
    await Promise.all(victims.map((name) => unlink(join(this.#opts.dir, name)).catch(() => undefined)));
    this.#opts.log.info(
      { pruned: victims.length, bytes: this.#bytes, maxBytes: this.#opts.maxBytes },
      'Pruned least recently used payloads from the cache directory',
    );
  }
}
