/**
 * Keeps the serving threads' shares of the open connections even. Where the threads accept on one shared socket
 * (pool.ts: not on Linux), whichever thread's loop is waiting when connections arrive takes all it can: a burst
 * of connections (a client opening 64 at once) can land 53 on one thread and 11 on the other, and then the
 * crowded thread's hosts wait up to five times longer than the others, whatever the cores left idle. With a
 * socket per thread (`reusePort`, Linux) the kernel spreads them by a hash of the client's address and port,
 * which is even only on average. An accepted socket cannot be handed to another thread.
 *
 * So a thread holding more than its share asks the client to reconnect: its next response carries
 * `Connection: close` (every client of the serving port, Ignition included, reconnects for its next
 * request), and the new connection goes to whichever thread accepts it, most likely the idler one. A
 * thread counts the connections it has already asked to close as gone, so one burst does not close more
 * than the excess.
 *
 * The same counts cap the connections of the process (`--max-connections`): the threads serve one port, so
 * a cap per thread would refuse a host on the crowded thread while the other has room. A connection counts
 * once its TLS handshake is done, as it is then that it can hold a request and a payload; counting the ones
 * still in their handshake would let anyone who opens idle sockets fill the cap and shut every host out,
 * and those are bounded by the handshake timeout (support/src/https.ts). One over the cap is answered 503
 * (IGN_SERVER_BUSY) and closed, which costs no more than the handshake its client already made.
 */

/** Connections above the even share a thread keeps before it asks one to close. */
const SLACK = 1;

export class ConnectionBalance {
  /** Open connections per thread, shared by every thread (Atomics). */
  readonly #open: Int32Array;
  readonly #index: number;
  readonly #maxConnections: number;
  /** Connections of this thread told to close that have not closed yet. */
  #closing = 0;

  /**
   * `open` holds one counter per thread (pool.ts allocates it); `index` is this thread's; `maxConnections`
   * the cap over all of them.
   */
  constructor(open: SharedArrayBuffer, index: number, maxConnections = Number.POSITIVE_INFINITY) {
    this.#open = new Int32Array(open);
    this.#index = index;
    this.#maxConnections = maxConnections;
  }

  static buffer(threads: number): SharedArrayBuffer {
    return new SharedArrayBuffer(Int32Array.BYTES_PER_ELEMENT * threads);
  }

  /**
   * Counts a connection whose handshake is done; false when the process already held maxConnections: the
   * caller answers it 503. Threads counting at the same instant may both see the other's: near the cap, both
   * refuse rather than both admit.
   */
  opened(): boolean {
    Atomics.add(this.#open, this.#index, 1);
    return this.#total() <= this.#maxConnections;
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
    const total = this.#total();
    const mine = Atomics.load(this.#open, this.#index) - this.#closing;
    if (mine <= Math.ceil(total / threads) + SLACK) return false;
    this.#closing++;
    return true;
  }

  #total(): number {
    let total = 0;
    for (let i = 0; i < this.#open.length; i++) total += Atomics.load(this.#open, i);
    return total;
  }
}
