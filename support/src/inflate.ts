/**
 * One budget for inflated bytes, spent while inflating: a few KiB of gzip can stand for gigabytes, so each
 * inflation is given only what is left of the budget as zlib's output limit, and zlib stops as soon as it
 * is passed (never inflate first and measure after). Plain bytes (an uncompressed data URL) are spent
 * from the same budget, so a config's files are bounded as one sum, however they are spelled.
 */
import { createGunzip, gunzip, gunzipSync, type ZlibOptions } from 'node:zlib';
import { promisify } from 'node:util';

const gunzipAsync = promisify<Buffer, ZlibOptions, Buffer>(gunzip);

const MIB = 1024 * 1024;

/** "64 MiB", "240.0 MiB" from a MiB up, else the bytes. */
const formatBytes = (n: number): string =>
  n < MIB ? `${n} bytes` : `${n % MIB === 0 ? n / MIB : (n / MIB).toFixed(1)} MiB`;

/** The budget ran out while reading `what`: past `limit` bytes in all (sizes in the message). */
export class InflateLimitError extends Error {
  override readonly name = 'InflateLimitError';
  constructor(
    readonly what: string,
    readonly limit: number,
    /** Bytes spent before `what`: what the others already took. */
    readonly before: number,
  ) {
    super(
      `${what} inflates past the limit of ${formatBytes(limit)}${before > 0 ? ` (${formatBytes(before)} of it already taken before it)` : ''}`,
    );
  }
}

/** Not gzip (or cut short): what the caller reports as invalid input, not as a budget refusal. */
export class InvalidGzipError extends Error {
  override readonly name = 'InvalidGzipError';
}

const tooLarge = (err: unknown): boolean => (err as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE';

export class InflateBudget {
  #used = 0;

  constructor(readonly limit: number) {}

  get used(): number {
    return this.#used;
  }

  /** Takes `n` plain bytes of `what` from the budget. */
  spend(n: number, what: string): void {
    if (this.#used + n > this.limit) throw new InflateLimitError(what, this.limit, this.#used);
    this.#used += n;
  }

  /** Inflates on this thread, stopping once the budget is passed (for a worker or the host agent). */
  gunzipSync(raw: Buffer, what: string): Buffer {
    let out: Buffer;
    try {
      out = gunzipSync(raw, { maxOutputLength: this.#left() });
    } catch (err) {
      throw this.#failure(err, what);
    }
    this.spend(out.length, what);
    return out;
  }

  /** Inflates in libuv's thread pool, stopping once the budget is passed: the caller's thread stays free. */
  async gunzip(raw: Buffer, what: string): Promise<Buffer> {
    let out: Buffer;
    try {
      out = await gunzipAsync(raw, { maxOutputLength: this.#left() });
    } catch (err) {
      throw this.#failure(err, what);
    }
    this.spend(out.length, what);
    return out;
  }

  /**
   * Inflates in libuv's thread pool only to count: each chunk is spent and dropped, so what is held at
   * once is one chunk, not the file.
   */
  async count(raw: Buffer, what: string): Promise<void> {
    const start = this.#used;
    const inflate = createGunzip();
    const counted = new Promise<void>((resolve, reject) => {
      inflate.on('data', (chunk: Buffer) => {
        if (this.#used + chunk.length > this.limit) {
          inflate.destroy(new InflateLimitError(what, this.limit, start));
          return;
        }
        this.#used += chunk.length;
      });
      inflate.on('end', resolve);
      inflate.on('error', (err) =>
        reject(
          err instanceof InflateLimitError ? err : new InvalidGzipError(`${what}: not valid gzip`, { cause: err }),
        ),
      );
    });
    inflate.end(raw);
    await counted;
  }

  /** One byte more than is left, so reaching the limit exactly is allowed and passing it is seen. */
  #left(): number {
    return this.limit - this.#used + 1;
  }

  #failure(err: unknown, what: string): Error {
    if (tooLarge(err)) return new InflateLimitError(what, this.limit, this.#used);
    return new InvalidGzipError(`${what}: not valid gzip`, { cause: err });
  }
}
