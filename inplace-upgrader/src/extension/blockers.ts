/**
 * The in-place decision's payload inspection (inPlaceBlockers) on a thread of its own (blockers-thread.ts):
 * a payload's files are decoded and inflated there, within the byte budget, so a large or hostile payload
 * never delays the main thread's Lease renewal. One thread, started on first use and restarted if it dies;
 * requests queue on it in order.
 */
import { Worker } from 'node:worker_threads';
import { DEFAULT_MAX_CONFIG_BYTES } from '../../../api/src/limits.js';

export interface BlockersRequest {
  id: number;
  payload: ArrayBuffer;
  maxConfigBytes: number;
}

export type BlockersReply = { id: number; blockers: string[] } | { id: number; error: string };

const THREAD_MODULE = new URL('./blockers-thread.js', import.meta.url);

interface Pending {
  resolve: (blockers: string[]) => void;
  reject: (err: Error) => void;
}

export class BlockersThread {
  readonly #maxConfigBytes: number;
  readonly #pending = new Map<number, Pending>();
  #worker: Worker | undefined;
  #nextId = 0;

  constructor(maxConfigBytes = DEFAULT_MAX_CONFIG_BYTES) {
    this.#maxConfigBytes = maxConfigBytes;
  }

  /** What the agent would refuse in this payload (see inPlaceBlockers); rejects past the budget, with the sizes. */
  blockers(payload: Buffer | string): Promise<string[]> {
    const id = this.#nextId++;
    // One copy, in an ArrayBuffer of its own that moves to the thread (a Buffer may share a pool with others).
    const copy = (typeof payload === 'string' ? new TextEncoder().encode(payload) : new Uint8Array(payload)).buffer;
    const req: BlockersRequest = { id, payload: copy, maxConfigBytes: this.#maxConfigBytes };
    return new Promise((resolve, reject) => {
      this.#pending.set(id, { resolve, reject });
      this.#thread().postMessage(req, [copy]);
    });
  }

  async stop(): Promise<void> {
    const worker = this.#worker;
    this.#worker = undefined;
    await worker?.terminate();
  }

  #thread(): Worker {
    if (this.#worker) return this.#worker;
    const worker = new Worker(THREAD_MODULE);
    // An idle inspector must not keep the process alive at shutdown.
    worker.unref();
    worker.on('message', (reply: BlockersReply) => this.#settle(reply));
    worker.on('error', (err) => this.#failAll(new Error('the payload inspection thread failed', { cause: err })));
    worker.on('exit', (code) => {
      if (this.#worker === worker) this.#worker = undefined;
      this.#failAll(new Error(`the payload inspection thread exited with code ${code}`));
    });
    this.#worker = worker;
    return worker;
  }

  #settle(reply: BlockersReply): void {
    const pending = this.#pending.get(reply.id);
    this.#pending.delete(reply.id);
    if (!pending) return;
    if ('blockers' in reply) pending.resolve(reply.blockers);
    else pending.reject(new Error(reply.error));
  }

  #failAll(err: Error): void {
    for (const pending of this.#pending.values()) pending.reject(err);
    this.#pending.clear();
  }
}
