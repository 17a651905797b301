/**
 * Payloads, generated once per (release digest, config) pair and shared by every pool and token with that
 * pair. Concurrent first requests wait on the same generation (single flight). Results live in a
 * byte-bounded LRU and on disk (`--cache-dir`): a restarted server reads them back instead of generating
 * again, and a payload evicted from memory comes back from disk.
 *
 * With a shared store (shared.ts: an OCI repository every replica reaches), what one replica generated is
 * read by the others and by every pod that comes after: a miss goes memory → disk → shared store →
 * generation, and a generation is pushed there. Only one replica generates then (`generates`: the leader);
 * the others wait for the shared store to hold the payload (NotGeneratedYetError), so N replicas and any
 * number of restarts generate each (release, config) once.
 *
 * Two small files make that work without the registry: `pins/<sha256(ref, config)>` pins a release
 * reference (a tag may move) to the manifest digest it had at first generation, so a pool's hosts all get
 * the same bytes; `payloads/<sha256(digest, config)>` holds the payload; `config` in both is the configDigest
 * of the config documents. The documents themselves are read (ConfigSource) only when a payload is in
 * neither place: a server holding thousands of token Secrets keeps one digest per Secret, not its config.
 */
import type { ConditionReason } from '../../../api/src/conditions.js';
import { randomBytes } from 'node:crypto';
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { LRUCache } from 'lru-cache';
import type { Logger } from '../../../support/src/logger.js';
import { NotReadyError } from '../../../support/src/errors.js';
import { InvalidReleaseError, ReleaseUnavailableError, type Release } from '../release/types.js';
import { InvalidConfigError, renderPayload } from './render.js';
import { checkConfigBytes } from './budget.js';
import { DEFAULT_MAX_CONFIG_BYTES } from '../../../api/src/limits.js';
import type { Validator } from './validate.js';
import { DirBudget } from './dir-budget.js';
import { versionIndex, type SpecVersion } from './versions.js';
import { configDigest, sha } from './digest.js';
import { payloadChunks, type Payload } from './payload.js';
import { parsePayloadFile, payloadFileChunks, readShared, toPayload } from './format.js';
import type { SharedPayloads } from './shared.js';

export { payloadBytes, type Payload } from './payload.js';

/** The newest version the local ignition-validate parses. */
const VALIDATE_AT: SpecVersion = '3.3.0';

/** Why a payload could not be generated: the failures of the NodePool's ValidGeneratedPayload condition. */
export type FailureReason = Exclude<ConditionReason<'ValidGeneratedPayload'>, 'AsExpected' | 'Pending'>;

export class GenerationError extends Error {
  override readonly name = 'GenerationError';
  constructor(
    readonly reason: FailureReason,
    message: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/** The shared store holds neither the payload nor its pin yet, and this replica does not generate: ask again later. */
export class NotGeneratedYetError extends NotReadyError {}

export interface StoreMetrics {
  generationSeconds(seconds: number, outcome: 'success' | 'failure'): void;
  /** A pin or payload read from, or pushed to, the shared store (or a push that failed). */
  shared(event: 'read' | 'pushed' | 'push_failed'): void;
  cacheHit(): void;
  cacheMiss(): void;
  cacheBytes(bytes: number): void;
}

/** Told what the in-memory cache holds: a payload now held, a payload let go. */
export interface PayloadObserver {
  cached(payload: Payload): void;
  evicted(key: string): void;
}

/** A pool's config documents, known by digest and read only to generate. */
export interface ConfigSource {
  sha256: string;
  read: () => Promise<string>;
}

export interface PayloadStoreOptions {
  cacheDir: string;
  maxBytes: number;
  /** Budget of the payload files in the cache directory, least recently used pruned first. */
  maxDirBytes: number;
  /**
   * Throws when this server must not read the reference (ReleasePolicy). Asked before anything else, the
   * pins and payloads on disk included: what an earlier, wider policy let in is not served under a narrower one.
   */
  admit?: (ref: string) => void;
  /** Resolves a reference to its manifest digest (a registry round trip for a tag). */
  resolve: (ref: string) => Promise<string>;
  read: (ref: string, digest: string) => Promise<Release>;
  validate?: Validator;
  /** Bytes the files of one payload may take in all, decoded and inflated (default DEFAULT_MAX_CONFIG_BYTES; see budget.ts). */
  maxConfigBytes?: number;
  /** Payloads and pins shared by every replica; without it, each replica generates its own. */
  shared?: SharedPayloads;
  /** With a shared store: whether this replica generates (and pins) now; the others wait for its results. */
  generates?: () => boolean;
  /** How long a replica that does not generate waits before looking in the shared store again (default 1 s). */
  sharedRetryMs?: number;
  metrics?: StoreMetrics;
  log: Logger;
}

export { configDigest } from './digest.js';

function classify(err: unknown): GenerationError {
  if (err instanceof GenerationError) return err;
  if (err instanceof InvalidConfigError || err instanceof InvalidReleaseError)
    return new GenerationError('InvalidConfig', err.message, { cause: err });
  if (err instanceof ReleaseUnavailableError)
    return new GenerationError('ReleaseUnavailable', err.message, { cause: err });
  return new GenerationError('ReleaseUnavailable', `payload generation failed: ${(err as Error).message}`, {
    cause: err,
  });
}

export class PayloadStore {
  readonly #opts: PayloadStoreOptions;
  readonly #cache: LRUCache<string, Payload>;
  readonly #pins = new Map<string, string>();
  readonly #flights = new Map<string, Promise<Payload>>();
  /**
   * Reads of payload files under way, by key. Each read fills a new SharedArrayBuffer the size of the payload,
   * outside the heap: without one read per key, N requests missing the same payload at once held N copies.
   */
  readonly #reads = new Map<string, Promise<Payload | undefined>>();
  readonly #pinning = new Map<string, Promise<string>>();
  readonly #dir: DirBudget;
  /** Generations that failed for good (invalid config or release), so they are not retried in a loop. */
  readonly #invalid = new Map<string, GenerationError>();
  /** How many generations ran (not served from memory or disk): a restart with a warm disk makes none. */
  generations = 0;
  #observer: PayloadObserver | undefined;

  constructor(opts: PayloadStoreOptions) {
    this.#opts = opts;
    this.#cache = new LRUCache<string, Payload>({
      maxSize: opts.maxBytes,
      sizeCalculation: (p) => Math.max(1, p.tail.length + 64),
      // Entries bigger than the whole cache are served from disk instead: lookup() reads them back each time.
      maxEntrySize: opts.maxBytes,
      dispose: (_p, key, reason) => {
        opts.metrics?.cacheBytes(this.#cache.calculatedSize);
        if (reason !== 'set') this.#observer?.evicted(key);
      },
    });
    this.#dir = new DirBudget({ dir: join(opts.cacheDir, 'payloads'), maxBytes: opts.maxDirBytes, log: opts.log });
  }

  async init(): Promise<void> {
    await mkdir(join(this.#opts.cacheDir, 'pins'), { recursive: true });
    await mkdir(join(this.#opts.cacheDir, 'payloads'), { recursive: true });
    await this.#dir.load();
  }

  /** Follows what memory holds (the serving threads hold exactly that); told of every payload held now. */
  observe(observer: PayloadObserver): void {
    this.#observer = observer;
    for (const p of this.#cache.values()) observer.cached(p);
  }

  /** Payloads served elsewhere (a serving thread) count as used: the LRUs in memory and on disk keep them. */
  touch(key: string, hits: number): void {
    if (this.#cache.get(key) === undefined) return;
    for (let i = 0; i < hits; i++) this.#opts.metrics?.cacheHit();
    this.#dir.used(key);
  }

  /** The payload when it is in memory: the request path's only synchronous look-up. */
  peek(key: string): Payload | undefined {
    const p = this.#cache.get(key);
    if (!p) return undefined;
    this.#opts.metrics?.cacheHit();
    this.#dir.used(key);
    return p;
  }

  /** The payload by content key from memory or disk; undefined when it was never generated here. */
  async lookup(key: string): Promise<Payload | undefined> {
    const hit = this.peek(key);
    if (hit) return hit;
    this.#opts.metrics?.cacheMiss();
    return this.#readPayload(key);
  }

  /** The payload of (release reference, config documents): from memory, disk, or one shared generation. */
  async ensure(ref: string, config: ConfigSource): Promise<Payload> {
    try {
      this.#opts.admit?.(ref);
    } catch (err) {
      throw classify(err);
    }
    const digest = await this.#pin(ref, config.sha256);
    const key = sha(digest, config.sha256);
    const known = this.#invalid.get(key);
    if (known) throw known;
    const hit = this.peek(key);
    if (hit) return hit;
    let flight = this.#flights.get(key);
    if (!flight) {
      this.#opts.metrics?.cacheMiss();
      flight = this.#loadOrGenerate(ref, digest, config, key).finally(() => this.#flights.delete(key));
      this.#flights.set(key, flight);
    }
    return flight;
  }

  /** One pinning at a time per (reference, config): concurrent first requests resolve and share it once. */
  #pin(ref: string, configSha256: string): Promise<string> {
    const pinKey = sha(ref, configSha256);
    let pinning = this.#pinning.get(pinKey);
    if (!pinning) {
      pinning = this.#pinOnce(ref, pinKey).finally(() => this.#pinning.delete(pinKey));
      this.#pinning.set(pinKey, pinning);
    }
    return pinning;
  }

  async #pinOnce(ref: string, pinKey: string): Promise<string> {
    const known = this.#pins.get(pinKey) ?? (await this.#readFile(join('pins', pinKey)))?.toString('utf8');
    if (known) {
      this.#pins.set(pinKey, known);
      return known;
    }
    const shared = await this.#fromShared(`pin-${pinKey}`);
    if (shared) {
      await this.#writeFile(join('pins', pinKey), shared);
      this.#pins.set(pinKey, shared.toString('utf8'));
      return shared.toString('utf8');
    }
    this.#mayGenerate(ref);
    let digest: string;
    try {
      digest = await this.#opts.resolve(ref);
    } catch (err) {
      throw classify(err);
    }
    // Shared before use: a tag that moves later still gives every replica the digest pinned first.
    await this.#toShared(`pin-${pinKey}`, Buffer.from(digest));
    await this.#writeFile(join('pins', pinKey), Buffer.from(digest));
    this.#pins.set(pinKey, digest);
    return digest;
  }

  async #loadOrGenerate(ref: string, digest: string, config: ConfigSource, key: string): Promise<Payload> {
    const stored = (await this.#readPayload(key)) ?? (await this.#readShared(key));
    if (stored) return stored;
    this.#mayGenerate(ref);
    const started = performance.now();
    try {
      const payload = await this.#generate(ref, digest, config, key);
      this.#opts.metrics?.generationSeconds((performance.now() - started) / 1000, 'success');
      const chunks = payloadFileChunks(payload);
      await this.#toShared(`payload-${key}`, chunks);
      await this.#persist(key, chunks);
      this.#remember(payload);
      return payload;
    } catch (err) {
      this.#opts.metrics?.generationSeconds((performance.now() - started) / 1000, 'failure');
      const failure = classify(err);
      if (failure.reason === 'InvalidConfig') this.#invalid.set(key, failure);
      throw failure;
    }
  }

  async #generate(ref: string, digest: string, source: ConfigSource, key: string): Promise<Payload> {
    this.generations++;
    const config = await source.read();
    // The Secret was replaced under the same name: its update is on the way and generates the new pair.
    if (configDigest(config) !== source.sha256)
      throw new Error('the config changed since the token Secret was seen; retrying');
    let docs: unknown;
    try {
      docs = JSON.parse(config === '' ? '[]' : config);
    } catch (err) {
      throw new InvalidConfigError('the config documents are not JSON', { cause: err });
    }
    const release = await this.#opts.read(ref, digest);
    if (release.digest !== digest)
      throw new ReleaseUnavailableError(`release ${ref} resolved to ${release.digest}, expected the pinned ${digest}`);
    await checkConfigBytes(release, docs, this.#opts.maxConfigBytes ?? DEFAULT_MAX_CONFIG_BYTES);
    const payload = toPayload(key, renderPayload(release, docs));
    await this.#validate(payload);
    this.#opts.log.info(
      { payload: key.slice(0, 16), release: ref, digest, bytes: payload.tail.length },
      'Generated a payload',
    );
    return payload;
  }

  async #validate(payload: Payload): Promise<void> {
    if (!this.#opts.validate || versionIndex(payload.minVersion) > versionIndex(VALIDATE_AT)) return;
    let report: string | undefined;
    try {
      report = await this.#opts.validate(payloadChunks(payload, VALIDATE_AT));
    } catch (err) {
      this.#opts.log.warn({ err }, 'Could not run the Ignition validator; serving the payload unvalidated');
      return;
    }
    if (report !== undefined)
      throw new InvalidConfigError(`the merged payload is not valid Ignition: ${report.slice(0, 500)}`);
  }

  #remember(payload: Payload): void {
    this.#cache.set(payload.key, payload);
    if (this.#cache.has(payload.key)) this.#observer?.cached(payload);
    this.#opts.metrics?.cacheBytes(this.#cache.calculatedSize);
  }

  /** Without a shared store every replica generates; with one, only the one `generates` names. */
  #mayGenerate(ref: string): void {
    if (this.#opts.shared && this.#opts.generates?.() === false) {
      throw new NotGeneratedYetError(
        `the payload of ${ref} is not in ${this.#opts.shared.where} yet; the generating replica puts it there`,
        this.#opts.sharedRetryMs ?? 1_000,
      );
    }
  }

  /** An entry of the shared store; a store that cannot be read is as good as empty (generation still works). */
  async #fromShared(name: string): Promise<Buffer | undefined> {
    if (!this.#opts.shared) return undefined;
    try {
      const bytes = await this.#opts.shared.get(name);
      if (bytes) this.#opts.metrics?.shared('read');
      return bytes;
    } catch (err) {
      this.#opts.log.warn({ err, store: this.#opts.shared.where }, 'Could not read the shared payload store');
      return undefined;
    }
  }

  async #toShared(name: string, bytes: Buffer | Buffer[]): Promise<void> {
    if (!this.#opts.shared) return;
    try {
      await this.#opts.shared.put(name, Array.isArray(bytes) ? Buffer.concat(bytes) : bytes);
      this.#opts.metrics?.shared('pushed');
    } catch (err) {
      // This replica serves what it generated either way; the others generate it again if they must.
      this.#opts.metrics?.shared('push_failed');
      this.#opts.log.warn({ err, store: this.#opts.shared.where }, 'Could not push to the shared payload store');
    }
  }

  async #readShared(key: string): Promise<Payload | undefined> {
    const bytes = await this.#fromShared(`payload-${key}`);
    const payload = bytes && parsePayloadFile(key, bytes);
    if (!bytes || !payload) return undefined;
    await this.#persist(key, bytes);
    this.#remember(payload);
    return payload;
  }

  async #persist(key: string, bytes: Buffer | Buffer[]): Promise<void> {
    const length = Array.isArray(bytes) ? bytes.reduce((n, b) => n + b.length, 0) : bytes.length;
    if (await this.#writeFile(join('payloads', key), bytes)) await this.#dir.added(key, length);
  }

  /** One read at a time per key: concurrent misses share it (see #reads). */
  #readPayload(key: string): Promise<Payload | undefined> {
    let read = this.#reads.get(key);
    if (!read) {
      read = this.#readPayloadOnce(key).finally(() => this.#reads.delete(key));
      this.#reads.set(key, read);
    }
    return read;
  }

  async #readPayloadOnce(key: string): Promise<Payload | undefined> {
    if (!/^[a-f0-9]{64}$/.test(key)) return undefined;
    const bytes = await readShared(join(this.#opts.cacheDir, 'payloads', key));
    const payload = bytes && parsePayloadFile(key, bytes);
    if (!payload) return undefined;
    this.#dir.used(key);
    this.#remember(payload);
    return payload;
  }

  async #readFile(rel: string): Promise<Buffer | undefined> {
    try {
      return await readFile(join(this.#opts.cacheDir, rel));
    } catch {
      return undefined;
    }
  }

  /** Written to a temporary name then renamed: a crash never leaves a half payload behind. */
  async #writeFile(rel: string, bytes: Buffer | Buffer[]): Promise<boolean> {
    const path = join(this.#opts.cacheDir, rel);
    const tmp = `${path}.${randomBytes(6).toString('hex')}.tmp`;
    try {
      await writeFile(tmp, bytes);
      await rename(tmp, path);
      return true;
    } catch (err) {
      // The disk copy is an optimisation; serving from memory still works.
      this.#opts.log.warn({ err, path }, 'Could not persist to the payload cache directory');
      return false;
    }
  }

  get bytesInMemory(): number {
    return this.#cache.calculatedSize;
  }

  /** Bytes of the payload files in the cache directory. */
  get bytesOnDisk(): number {
    return this.#dir.bytes;
  }
}
