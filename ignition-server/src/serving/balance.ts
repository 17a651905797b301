/**
 * Keeps the serving threads' shares of the open connections even. The threads accept on one shared socket
 * (pool.ts), and whichever thread's loop is waiting when connections arrive takes all it can: a burst of
 * connections (a client opening 64 at once) can land 53 on one thread and 11 on the other, and then the
 * crowded thread's hosts wait up to five times longer than the others, whatever the cores left idle.
 * Node 20 has no SO_REUSEPORT, and an accepted socket cannot be handed to another thread.
 *
 * So a thread holding more than its share asks the client to reconnect: its next response carries
 * `Connection: close` (every client of the serving port, Ignition included, reconnects for its next
 * request), and the new connection goes to whichever thread accepts it, most likely the idler one. A
 * thread counts the connections it has already asked to close as gone, so one burst does not close more
 * than the excess.
 */

/** Connections above the even share a thread keeps before it asks one to close. */
const SLACK = 1;

export class ConnectionBalance {
  /** Open connections per thread, shared by every thread (Atomics). */
  readonly #open: Int32Array;
  readonly #index: number;
  /** Connections of this thread told to close that have not closed yet. */
  #closing = 0;

  /** `open` holds one counter per thread (pool.ts allocates it); `index` is this thread's. */
  constructor(open: SharedArrayBuffer, index: number) {
    this.#open = new Int32Array(open);
    this.#index = index;
  }

  static buffer(threads: number): SharedArrayBuffer {
    return new SharedArrayBuffer(Int32Array.BYTES_PER_ELEMENT * threads);
  }

  opened(): void {
    Atomics.add(this.#open, this.#index, 1);
  }

  /** `asked`: this connection was told to close by shouldClose(). */
  closed(asked: boolean): void {
    Atomics.sub(this.#open, this.#index, 1);
    if (asked) this.#closing--;
  }

  /** Whether this thread holds more than its share: if so, the caller closes the connection after this response. */
  shouldClose(): boolean {
    const threads = this.#open.length;
    if (threads < 2) return false;
    let total = 0;
    for (let i = 0; i < threads; i++) total += Atomics.load(this.#open, i);
    const mine = Atomics.load(this.#open, this.#index) - this.#closing;
    if (mine <= Math.ceil(total / threads) + SLACK) return false;
    this.#closing++;
    return true;
  }
}
