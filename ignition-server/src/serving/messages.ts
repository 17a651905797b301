/** What the main thread and the serving threads tell each other (pool.ts, thread.ts). */
import type { IndexChange } from '../token-index.js';
import type { RequestLine } from '../app.js';
import type { SpecVersion } from '../payload/versions.js';
import type { ThreadPauses } from './pauses.js';

/** What a serving thread starts with. */
export interface ThreadData {
  /** Thread number, for its log lines. */
  index: number;
  certFile: string;
  keyFile: string;
  /** SPKI PEM of the token signing key: threads verify, never mint. */
  publicKeyPem: string;
  logLevel: string;
  logName: string;
  reloadIntervalMs: number;
  headersTimeoutMs?: number;
  requestTimeoutMs?: number;
  handshakeTimeoutMs?: number;
  /** Connections the process holds at most, over all its threads (balance.ts). */
  maxConnections: number;
  /** Open connections per thread, shared by all (balance.ts). */
  connections: SharedArrayBuffer;
}

/** A payload held in memory, its bytes in shared memory (one copy for every thread). */
export interface SharedPayload {
  key: string;
  minVersion: SpecVersion;
  joinAt: number;
  bytes: SharedArrayBuffer;
  offset: number;
  length: number;
}

export type ToThread =
  | { t: 'changes'; changes: IndexChange[] }
  | { t: 'payload'; payload: SharedPayload }
  | { t: 'evict'; key: string }
  | { t: 'listen'; address: string; fd?: number; reusePort?: boolean }
  /**
   * `payload`: a lookup's answer. The thread serves it for the requests that asked even when memory did not keep
   * it (larger than the whole cache, it is read from disk for each lookup and never held by the threads).
   */
  | { t: 'reply'; id: number; error?: string; payload?: SharedPayload }
  /** `pauses`: also the thread's pauses since the previous such look (pauses.ts). */
  | { t: 'stats'; id: number; pauses?: boolean }
  | { t: 'drain'; timeoutMs: number }
  /** The memory saver is back on after a burst: the thread collects its own heap (support/src/memory-saver.ts). */
  | { t: 'collect' };

/** Counts since the thread started. */
export interface ThreadStats {
  /** Requests by HTTP status. */
  requests: Record<string, number>;
  /** Payloads served from memory since the last report, by content key (the main thread's LRUs learn of it). */
  used: Record<string, number>;
  /** When asked for. */
  pauses?: ThreadPauses;
}

/** The first fetches a thread served lately, and their log lines, told in one message (thread.ts). */
export interface FirstFetches {
  t: 'served';
  /** Each token Secret's key, with the time (epoch ms) its payload was served. */
  served: { key: string; atMs: number }[];
  lines: RequestLine[];
}

export type FromThread =
  | { t: 'listening'; port: number; fd: number }
  | FirstFetches
  | { t: 'missing'; key: string }
  | { t: 'load'; id: number; pool: string; hash: string }
  | { t: 'lookup'; id: number; key: string }
  | { t: 'stats'; id: number; stats: ThreadStats }
  | { t: 'drained' }
  | { t: 'collected' }
  | { t: 'failed'; error: string };
