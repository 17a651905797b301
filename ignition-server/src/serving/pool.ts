/**
 * The serving threads: `/ignition` answered on every core. A Node process runs JavaScript on one core, and
 * TLS on a megabyte payload is CPU work, so the serving port is answered by N worker threads (by default one
 * per core), each with its own HTTPS server accepting on the serving port, while the main thread
 * keeps the control plane (informer, generation, leader writes, ops port).
 *
 * Threads rather than processes, so a payload is held once: its bytes live in a SharedArrayBuffer
 * (payload/store.ts) that every thread sends from. Each thread keeps a copy of the token index, fed by the
 * index's changes (TokenIndex.observe) in order, so the verified-token, pool and revocation checks of every
 * request are made on the thread, with no round trip; only the leader writes, from the main thread.
 *
 * On Linux each thread has a listening socket of its own on the port (REUSE_PORT); elsewhere the threads share
 * one file descriptor (Node cannot duplicate a socket), and a thread closing its server would close it for
 * all. Either way stopping drains (no keep-alive, new connections dropped, in-flight requests finished) and
 * the process's exit closes the sockets.
 */
import { setFlagsFromString } from 'node:v8';
import { Worker } from 'node:worker_threads';
import type { Logger } from '../../../support/src/logger.js';
import type { IndexChange, TokenIndex } from '../token-index.js';
import type { Payload } from '../payload/payload.js';
import type { PayloadObserver } from '../payload/store.js';
import { FIRST_SERVED_MESSAGE } from '../app.js';
import type { FirstFetches, FromThread, SharedPayload, ThreadData, ThreadStats, ToThread } from './messages.js';
import { ConnectionBalance } from './balance.js';
import type { ThreadPauses } from './pauses.js';

export interface ServingPoolOptions {
  threads: number;
  address: string;
  certFile: string;
  keyFile: string;
  publicKeyPem: string;
  index: Pick<TokenIndex, 'observe'>;
  store: {
    observe(observer: PayloadObserver): void;
    lookup(key: string): Promise<Payload | undefined>;
    touch(key: string, hits: number): void;
  };
  /** A thread served a token Secret's payload for the first time, at `atMs` (epoch ms). */
  onServed(key: string, atMs: number): void;
  /** A thread found a ready payload in neither memory nor disk. */
  onPayloadMissing(key: string): void;
  /** Read the token Secrets of a pool and hash known by metadata only. */
  load(pool: string, hash: string): Promise<void>;
  /** A thread failed (it cannot be replaced: the listening socket may have gone with it). */
  onFailed(err: Error): void;
  log: Logger;
  logName: string;
  logLevel: string;
  reloadIntervalMs: number;
  headersTimeoutMs?: number;
  requestTimeoutMs?: number;
  handshakeTimeoutMs?: number;
  /** Connections the process holds at most, over all its threads, once their handshake is done (balance.ts). */
  maxConnections: number;
  /** How often the threads' use of payloads is reported to the store's LRUs (default 5 s). */
  statsIntervalMs?: number;
}

const THREAD_MODULE = new URL('./thread.js', import.meta.url);

/**
 * On Linux each thread binds the port with a socket of its own (SO_REUSEPORT) and the kernel spreads new
 * connections evenly over them. On one shared socket, the thread that woke first took a burst of handshakes
 * while the other waited: in a boot storm, the client's handshake p99 was 4 to 10 times plain Node's.
 */
const REUSE_PORT = process.platform === 'linux';

/**
 * The least young generation of each serving thread, in MB per semi-space (V8 collects it by copying what is
 * alive from one semi-space to the other). Node starts a thread's at half this and grows it only when much
 * survives, but a host's handshake and response leave tens of KB of objects that die young, so in a boot storm (2,000
 * hosts over 10 s) each thread collected it 3 to 8 times a second; on 2 cores shared with the apiserver and
 * etcd some of those pauses took 20 to 50 ms, every handshake on the thread waiting behind them, and the
 * connections alive across a collection moved to the old generation, which then needed a full collection
 * every few seconds. At 16 MB the threads collected 0 to 2 times a second and the storm's slow seconds went;
 * 8 MB keeps part of that for less resident memory (docs/benchmarks.md, the storm and memory rows). The main
 * thread's heap is Node's as before: the flag is read only by isolates created after it is set.
 */
const YOUNG_SEMI_SPACE_MB = 8;

/** How long a serving thread's heap collection is waited for (a last-resort collection takes tens of ms). */
const COLLECT_WAIT_MS = 5_000;

/** How long a thread's stats are waited for; a thread that does not answer counts nothing this time. */
const STATS_WAIT_MS = 5_000;

/** The address with the port the first thread was given (the address may ask for any port, `:0`). */
function withPort(address: string, port: number): string {
  return `${address.slice(0, address.lastIndexOf(':') + 1)}${port}`;
}

interface Thread {
  index: number;
  worker: Worker;
  /** Resolves on the thread's next message of this kind. */
  next: Map<string, (msg: FromThread) => void>;
}

export class ServingPool {
  readonly #opts: ServingPoolOptions;
  readonly #threads: Thread[] = [];
  #changes: IndexChange[] = [];
  #flushScheduled = false;
  #stopping = false;
  #statsId = 0;
  readonly #statsWaiting = new Map<number, (stats: ThreadStats) => void>();
  #timer: NodeJS.Timeout | undefined;
  #connections: SharedArrayBuffer | undefined;
  port = 0;

  constructor(opts: ServingPoolOptions) {
    this.#opts = opts;
  }

  /** Starts the threads and keeps them fed with the index and the payloads; they accept once listen() is called. */
  start(): void {
    const opts = this.#opts;
    const threads = Math.max(1, opts.threads);
    this.#connections = ConnectionBalance.buffer(threads);
    setFlagsFromString(`--min-semi-space-size=${YOUNG_SEMI_SPACE_MB}`);
    for (let i = 0; i < threads; i++) this.#threads.push(this.#spawn(i, this.#connections));
    opts.index.observe((change) => this.#queueChange(change));
    opts.store.observe({
      cached: (p) => this.#broadcast({ t: 'payload', payload: shared(p) }),
      evicted: (key) => this.#broadcast({ t: 'evict', key }),
    });
  }

  /** Lets the threads accept (the first binds the address, the others its port, or its socket); resolves when all do. */
  async listen(): Promise<void> {
    const opts = this.#opts;
    const [first, ...rest] = this.#threads as [Thread, ...Thread[]];
    const listening = await this.#listen(first, { t: 'listen', address: opts.address, reusePort: REUSE_PORT });
    this.port = listening.port;
    const same = REUSE_PORT
      ? { address: withPort(opts.address, listening.port), reusePort: true }
      : { address: opts.address, fd: listening.fd };
    await Promise.all(rest.map((t) => this.#listen(t, { t: 'listen', ...same })));
    this.#timer = setInterval(() => void this.#touchUsed(), opts.statsIntervalMs ?? 5_000);
    this.#timer.unref();
    opts.log.info({ threads: this.#threads.length, servingPort: this.port }, 'Serving threads accepting');
  }

  /** Every thread's counts (requests by status since it started); with `pauses`, its pauses since the last look. */
  async stats(pauses = false): Promise<ThreadStats[]> {
    this.#flush();
    return Promise.all(
      this.#threads.map((t) => {
        const id = ++this.#statsId;
        const answer = answerWithin(this.#statsWaiting, id, STATS_WAIT_MS, { requests: {}, used: {} });
        t.worker.postMessage({ t: 'stats', id, pauses } satisfies ToThread);
        return answer;
      }),
    );
  }

  /** Requests by status, summed over the threads. */
  async requests(): Promise<Record<string, number>> {
    const sum: Record<string, number> = {};
    for (const s of await this.stats()) {
      this.#touch(s);
      for (const [code, n] of Object.entries(s.requests)) sum[code] = (sum[code] ?? 0) + n;
    }
    return sum;
  }

  /** Each thread's event-loop delay and GC pauses since the last call (pauses.ts), in thread order. */
  async pauses(): Promise<(ThreadPauses | undefined)[]> {
    const stats = await this.stats(true);
    // Their payload uses too: the thread counts them from zero again once it has answered.
    for (const s of stats) this.#touch(s);
    return stats.map((s) => s.pauses);
  }

  /**
   * Each thread collects its own heap (the memory saver back on after a burst: support/src/memory-saver.ts), one
   * after the other: one thread paused at a time, and the process's flag that exposes gc set by one at a time.
   * A thread that does not answer within COLLECT_WAIT_MS is not waited for.
   */
  async collect(): Promise<void> {
    for (const t of this.#threads) {
      if (this.#stopping) return;
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<'late'>(
        (resolve) => (timer = setTimeout(() => resolve('late'), COLLECT_WAIT_MS).unref()),
      );
      const answer = await Promise.race([this.#ask(t, { t: 'collect' }, 'collected'), late]);
      clearTimeout(timer);
      if (answer !== 'late') continue;
      // Its late answer is then dropped. Should the next collect have asked by then, it takes that answer for its
      // own, one collection early: harmless, the answer only paces the threads one after another.
      t.next.delete('collected');
      // The next thread is asked all the same: one thread's heap stays as it was until the next quiet spell.
      if (!this.#stopping)
        this.#opts.log.warn(
          { thread: t.index, waitedMs: COLLECT_WAIT_MS },
          'A serving thread did not collect its heap in time',
        );
    }
  }

  /** Stops serving (see the module comment); the threads end with the process. */
  async drain(timeoutMs = 10_000): Promise<void> {
    this.#stopping = true;
    clearInterval(this.#timer);
    await Promise.all(this.#threads.map((t) => this.#ask(t, { t: 'drain', timeoutMs }, 'drained')));
    for (const t of this.#threads) t.worker.unref();
  }

  #spawn(index: number, connections: SharedArrayBuffer): Thread {
    const o = this.#opts;
    const data: ThreadData = {
      index,
      certFile: o.certFile,
      keyFile: o.keyFile,
      publicKeyPem: o.publicKeyPem,
      logLevel: o.logLevel,
      logName: o.logName,
      reloadIntervalMs: o.reloadIntervalMs,
      headersTimeoutMs: o.headersTimeoutMs,
      requestTimeoutMs: o.requestTimeoutMs,
      handshakeTimeoutMs: o.handshakeTimeoutMs,
      maxConnections: o.maxConnections,
      connections,
    };
    // A profile of the process (the benchmark's --cpu-prof) covers the threads; other flags are the process's.
    const worker = new Worker(THREAD_MODULE, { workerData: data, execArgv: profilingFlags(process.execArgv) });
    const thread: Thread = { index, worker, next: new Map() };
    worker.on('message', (msg: FromThread) => this.#onMessage(thread, msg));
    worker.on('error', (err) => this.#failed(new Error(`serving thread ${index} failed`, { cause: err })));
    worker.on('exit', (code) => this.#failed(new Error(`serving thread ${index} exited with code ${code}`)));
    return thread;
  }

  #failed(err: Error): void {
    if (this.#stopping) return;
    this.#stopping = true;
    this.#opts.log.error({ err }, 'A serving thread failed');
    this.#opts.onFailed(err);
  }

  #listen(t: Thread, msg: ToThread): Promise<{ port: number; fd: number }> {
    return new Promise((resolve, reject) => {
      // One of the two answers comes; the other waiter goes with it (a later failure is the thread's, not this).
      t.next.set('failed', (m) => {
        t.next.delete('listening');
        reject(new Error(m.t === 'failed' ? m.error : 'failed'));
      });
      t.next.set('listening', (m) => {
        t.next.delete('failed');
        resolve(m.t === 'listening' ? m : { port: 0, fd: -1 });
      });
      this.#post(t, msg);
    });
  }

  #ask(t: Thread, msg: ToThread, answer: FromThread['t']): Promise<void> {
    return new Promise((resolve) => {
      t.next.set(answer, () => resolve());
      this.#post(t, msg);
    });
  }

  #onMessage(t: Thread, msg: FromThread): void {
    const waiter = t.next.get(msg.t);
    if (waiter) {
      t.next.delete(msg.t);
      return waiter(msg);
    }
    switch (msg.t) {
      case 'served':
        return this.#firstFetches(t, msg);
      case 'missing':
        return this.#opts.onPayloadMissing(msg.key);
      case 'load':
        return this.#answer(t, msg.id, this.#opts.load(msg.pool, msg.hash));
      case 'lookup':
        return this.#answer(
          t,
          msg.id,
          this.#opts.store.lookup(msg.key).then((p) => p && shared(p)),
        );
      case 'stats':
        return this.#statsWaiting.get(msg.id)?.(msg.stats);
      case 'failed':
        return this.#failed(new Error(msg.error));
    }
  }

  /** A thread's first fetches: recorded, and their lines written here, off the serving threads. */
  #firstFetches(t: Thread, msg: FirstFetches): void {
    for (const { key, atMs } of msg.served) this.#opts.onServed(key, atMs);
    for (const line of msg.lines) this.#opts.log.info({ ...line, thread: t.index }, FIRST_SERVED_MESSAGE);
  }

  /** Replies once the work is done: the index changes and payloads it made were posted before. */
  #answer(t: Thread, id: number, work: Promise<SharedPayload | undefined | void>): void {
    work.then(
      (payload) => this.#post(t, payload ? { t: 'reply', id, payload } : { t: 'reply', id }),
      (err: unknown) => this.#post(t, { t: 'reply', id, error: (err as Error).message }),
    );
  }

  async #touchUsed(): Promise<void> {
    for (const s of await this.stats()) this.#touch(s);
  }

  #touch(s: ThreadStats): void {
    for (const [key, hits] of Object.entries(s.used)) this.#opts.store.touch(key, hits);
  }

  #queueChange(change: IndexChange): void {
    this.#changes.push(change);
    if (this.#flushScheduled) return;
    this.#flushScheduled = true;
    setImmediate(() => this.#flush());
  }

  /** Index changes go out in batches, and always before any other message (a reply must not overtake them). */
  #flush(): void {
    this.#flushScheduled = false;
    if (this.#changes.length === 0) return;
    const msg: ToThread = { t: 'changes', changes: this.#changes };
    this.#changes = [];
    for (const t of this.#threads) t.worker.postMessage(msg);
  }

  #post(t: Thread, msg: ToThread): void {
    this.#flush();
    t.worker.postMessage(msg);
  }

  #broadcast(msg: ToThread): void {
    this.#flush();
    for (const t of this.#threads) t.worker.postMessage(msg);
  }
}

/**
 * The answer to question `id` from `waiting`, or `fallback` once `ms` have passed. Either way its waiter leaves the
 * map: stats are asked every few seconds for the process's life, and a waiter kept is a closure per thread each time.
 */
export function answerWithin<T>(
  waiting: Map<number, (answer: T) => void>,
  id: number,
  ms: number,
  fallback: T,
): Promise<T> {
  return new Promise((resolve) => {
    const done = (answer: T): void => {
      clearTimeout(timer);
      waiting.delete(id);
      resolve(answer);
    };
    const timer = setTimeout(() => done(fallback), ms);
    waiting.set(id, done);
  });
}

function shared(p: Payload): SharedPayload {
  if (!(p.tail.buffer instanceof SharedArrayBuffer)) throw new Error('payload bytes are not in shared memory');
  return {
    key: p.key,
    minVersion: p.minVersion,
    joinAt: p.joinAt,
    bytes: p.tail.buffer,
    offset: p.tail.byteOffset,
    length: p.tail.length,
  };
}

/** The process's --cpu-prof flags, each with its value when given as the next argument (`--cpu-prof-dir <dir>`). */
export function profilingFlags(execArgv: readonly string[]): string[] {
  const flags: string[] = [];
  execArgv.forEach((a, i) => {
    if (!a.startsWith('--cpu-prof')) return;
    const value = execArgv[i + 1];
    flags.push(a !== '--cpu-prof' && !a.includes('=') && value !== undefined ? `${a}=${value}` : a);
  });
  return flags;
}
