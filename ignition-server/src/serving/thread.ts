/**
 * A serving thread (see pool.ts): its own HTTPS server on the serving port, answering
 * `/ignition` from its copy of the token index and the payloads held in shared memory. It reads nothing
 * from Kubernetes and writes nothing: what it cannot answer alone (a token Secret known by metadata only, a
 * payload not in memory) it asks the main thread for, and what it did (a first fetch, a payload gone) it
 * tells it. Even the log line of a first fetch is the main thread's to write (see REPORT_EVERY_MS).
 */
import type { IncomingMessage, RequestListener } from 'node:http';
import type { Socket } from 'node:net';
import type { TLSSocket } from 'node:tls';
import { isMainThread, parentPort, workerData, type MessagePort } from 'node:worker_threads';
import { createLogger, type Logger } from '../../../support/src/logger.js';
import { collectGarbage } from '../../../support/src/collect-garbage.js';
import { createApp, type RequestLine } from '../app.js';
import { startHttpsServer, type HttpsServer } from '../../../support/src/https.js';
import { applyChange, TokenIndex } from '../token-index.js';
import { createTokenVerifier } from '../tokens.js';
import type { Payload } from '../payload/payload.js';
import type { FirstFetches, FromThread, SharedPayload, ThreadData, ThreadStats, ToThread } from './messages.js';
import { ConnectionBalance } from './balance.js';
import { watchPauses } from './pauses.js';

/** How long a question to the main thread may take before the request is answered 500. */
const ASK_TIMEOUT_MS = 30_000;

/**
 * How long a thread collects first fetches before telling the main thread of them in one message: a message
 * per booting host cost each ~50 µs of the serving thread in a boot storm. A crashed thread loses at most
 * this much of them: their log lines, and their stamps (which the main thread holds up to 30 s before writing).
 */
const REPORT_EVERY_MS = 20;

/** A payload the main thread holds, on this thread: a view of the same shared bytes, not a copy. */
function fromShared(p: SharedPayload): Payload {
  return { key: p.key, minVersion: p.minVersion, joinAt: p.joinAt, tail: Buffer.from(p.bytes, p.offset, p.length) };
}

/** What the main thread holds, mirrored: the index's changes, the payloads in memory. */
function hold(index: TokenIndex, payloads: Map<string, Payload>, msg: ToThread): void {
  if (msg.t === 'changes') for (const c of msg.changes) applyChange(index, c);
  else if (msg.t === 'evict') payloads.delete(msg.key);
  else if (msg.t === 'payload') payloads.set(msg.payload.key, fromShared(msg.payload));
}

/**
 * Payloads not in this thread's memory, asked of the main thread once per key however many requests miss them at
 * once: each answer read from disk is a payload-sized buffer. The answer is what memory holds now (its `payload`
 * message came first), else the bytes the reply carries: a payload larger than the cache is never held, and is
 * served from those for the requests that asked.
 */
export function lookups(
  payloads: Map<string, Payload>,
  ask: (key: string) => Promise<SharedPayload | undefined>,
): (key: string) => Promise<Payload | undefined> {
  const asking = new Map<string, Promise<Payload | undefined>>();
  return (key) => {
    let answer = asking.get(key);
    if (!answer) {
      answer = ask(key)
        .then((found) => payloads.get(key) ?? (found && fromShared(found)))
        .finally(() => asking.delete(key));
      asking.set(key, answer);
    }
    return answer;
  };
}

/**
 * The thread's share of connections (balance.ts): counted as they finish their handshake and close, one
 * over the process's cap marked busy (every request on it answered 503), and the app behind it.
 */
function balanced(balance: ConnectionBalance): {
  busy: (req: IncomingMessage) => boolean;
  app: (app: RequestListener) => RequestListener;
  track: (socket: TLSSocket) => void;
} {
  const asked = new WeakSet<object>();
  const over = new WeakSet<object>();
  return {
    busy: (req) => over.has(req.socket),
    app: (app) => (req, res) => {
      if (!asked.has(req.socket) && balance.shouldClose()) {
        asked.add(req.socket);
        res.shouldKeepAlive = false;
      }
      app(req, res);
    },
    track: (socket) => {
      if (!balance.opened()) over.add(socket);
      socket.once('close', () => balance.closed(asked.has(socket)));
    },
  };
}

/** First fetches and their log lines, told to the main thread every REPORT_EVERY_MS, and at once on a drain. */
function reporter(post: (msg: FromThread) => void): {
  served(key: string): void;
  line(line: RequestLine): void;
  flush(): void;
} {
  let batch: FirstFetches | undefined;
  let timer: NodeJS.Timeout | undefined;
  const flush = (): void => {
    clearTimeout(timer);
    if (batch) post(batch);
    batch = undefined;
  };
  const open = (): FirstFetches => {
    if (batch) return batch;
    timer = setTimeout(flush, REPORT_EVERY_MS);
    return (batch = { t: 'served', served: [], lines: [] });
  };
  return {
    served: (key) => void open().served.push({ key, atMs: Date.now() }),
    line: (line) => void open().lines.push(line),
    flush,
  };
}

/** A question to the main thread, waiting for its reply. */
interface Waiter {
  resolve: (payload?: SharedPayload) => void;
  reject: (err: Error) => void;
  timer: NodeJS.Timeout;
}

/** Questions to the main thread, answered by a `reply` with the same id (a lookup's with the payload found). */
function asker(port: MessagePort): {
  ask(msg: FromThread & { id: number }): Promise<SharedPayload | undefined>;
  reply(id: number, error?: string, payload?: SharedPayload): void;
  nextId(): number;
} {
  const waiting = new Map<number, Waiter>();
  let id = 0;
  return {
    nextId: () => ++id,
    ask: (msg) =>
      new Promise<SharedPayload | undefined>((resolve, reject) => {
        const timer = setTimeout(() => {
          waiting.delete(msg.id);
          reject(new Error(`the main thread did not answer ${msg.t} within ${ASK_TIMEOUT_MS} ms`));
        }, ASK_TIMEOUT_MS);
        waiting.set(msg.id, { resolve, reject, timer });
        port.postMessage(msg);
      }),
    reply: (replyId, error, payload) => {
      const w = waiting.get(replyId);
      if (!w) return;
      waiting.delete(replyId);
      clearTimeout(w.timer);
      if (error === undefined) w.resolve(payload);
      else w.reject(new Error(error));
    },
  };
}

/** This thread's heap collected (support/src/collect-garbage.ts), answered even when that failed. */
function collect(log: Logger, post: (msg: FromThread) => void): void {
  try {
    collectGarbage();
  } catch (err) {
    log.warn({ err }, 'Collecting the heap failed');
  }
  post({ t: 'collected' });
}

function run(port: MessagePort, data: ThreadData): void {
  const post = (msg: FromThread): void => port.postMessage(msg);
  const log = createLogger({ name: data.logName, level: data.logLevel }).child({ part: 'http', thread: data.index });
  const index = new TokenIndex({ byPool: false });
  const payloads = new Map<string, Payload>();
  const stats: ThreadStats = { requests: {}, used: {} };
  const questions = asker(port);
  const reports = reporter(post);
  const share = balanced(new ConnectionBalance(data.connections, data.index, data.maxConnections));
  const pauses = watchPauses();
  const lookup = lookups(payloads, (key) => questions.ask({ t: 'lookup', id: questions.nextId(), key }));
  const app = createApp({
    authority: createTokenVerifier(data.publicKeyPem),
    tokens: index,
    payloads: {
      peek(key) {
        const p = payloads.get(key);
        if (p) stats.used[key] = (stats.used[key] ?? 0) + 1;
        return p;
      },
      lookup,
    },
    onServed: (entry) => reports.served(entry.secret.key),
    logFirstServed: (line) => reports.line(line),
    onPayloadMissing: (entry) => post({ t: 'missing', key: entry.secret.key }),
    load: async (pool, hash) => void (await questions.ask({ t: 'load', id: questions.nextId(), pool, hash })),
    log,
    metrics: { request: (code) => void (stats.requests[code] = (stats.requests[code] ?? 0) + 1) },
    now: Date.now,
    busy: share.busy,
  });
  const answerStats = (id: number, withPauses = false): void => {
    post({ t: 'stats', id, stats: withPauses ? { ...stats, pauses: pauses.look() } : { ...stats } });
    stats.used = {};
  };
  let server: HttpsServer | undefined;
  const listen = async (msg: Extract<ToThread, { t: 'listen' }>): Promise<void> => {
    server = await startHttpsServer({
      address: msg.address,
      fd: msg.fd,
      reusePort: msg.reusePort,
      certFile: data.certFile,
      keyFile: data.keyFile,
      app: share.app(app),
      log,
      reloadIntervalMs: data.reloadIntervalMs,
      headersTimeoutMs: data.headersTimeoutMs,
      requestTimeoutMs: data.requestTimeoutMs,
      handshakeTimeoutMs: data.handshakeTimeoutMs,
    });
    server.server.on('secureConnection', (socket: TLSSocket) => share.track(socket));
    server.server.on('connection', (socket: Socket) => pauses.track(socket));
    post({ t: 'listening', port: server.port, fd: server.fd });
  };
  const drain = async (timeoutMs: number): Promise<void> => {
    await server?.drain(timeoutMs);
    reports.flush();
    post({ t: 'drained' });
  };
  port.on('message', (msg: ToThread) => {
    switch (msg.t) {
      case 'changes':
      case 'payload':
      case 'evict':
        return hold(index, payloads, msg);
      case 'listen':
        return void listen(msg).catch((err: unknown) => post({ t: 'failed', error: (err as Error).message }));
      case 'reply':
        return questions.reply(msg.id, msg.error, msg.payload);
      case 'stats':
        return answerStats(msg.id, msg.pauses);
      case 'collect':
        return collect(log, post);
      case 'drain':
        return void drain(msg.timeoutMs);
    }
  });
}

if (!isMainThread && parentPort) run(parentPort, workerData as ThreadData);
