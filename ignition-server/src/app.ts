/**
 * The serving port's HTTP handler: `GET /ignition` and nothing else. Authentication runs in a fixed order —
 * bearer present → JWT signature and expiry → token of a live token Secret → pool/hash headers — so nothing
 * of an entry is used for a forged or stale token (its one look-up finds the claims it was verified with first). Status codes (Flow 2 step 4): 401 for a missing, garbled,
 * forged, expired or revoked token; 403 when the NodePool header names another pool; 406 when the client
 * takes no spec version the payload fits in; 511 while the payload is not generated (Ignition retries 5xx);
 * 404 elsewhere. Every refusal is a code of errors.ts (listed in docs/errors.md) with a fixed text.
 *
 * `GET /ignition` is answered by a plain node:http handler: no framework, no per-request log line for a
 * payload served (only a refusal and the first payload served of each token Secret are logged; every
 * request is counted), the payload's bytes written without copying the large part. Every other request
 * (another path or method, a query string, a malformed URL) goes to an Express app loaded on first use,
 * which answers with the same codes.
 */
import type { IncomingHttpHeaders, IncomingMessage, RequestListener, ServerResponse } from 'node:http';
import type { NextFunction, Request, Response } from 'express';
import type { Logger } from '../../support/src/logger.js';
import { IGNITION_HEADERS } from '../../api/src/keys.js';
import type { TokenClaims, TokenVerifier } from './tokens.js';
import { joinFor, type TokenIndex, type TokenRef, type TokenSecretEntry } from './token-index.js';
import { payloadChunks, type Payload } from './payload/payload.js';
import {
  IGNITION_MEDIA_TYPE,
  SPEC_VERSIONS,
  negotiateVersion,
  servable,
  type SpecVersion,
} from './payload/versions.js';
import { HttpError } from './errors.js';

export interface AppDeps {
  authority: Pick<TokenVerifier, 'verify' | 'remembered'>;
  tokens: Pick<TokenIndex, 'lookup' | 'verified' | 'unloadedFor'>;
  payloads: { peek(key: string): Payload | undefined; lookup(key: string): Promise<Payload | undefined> };
  /** Called after a payload was served (not awaited: a Kubernetes write never sits in a request). */
  onServed: (entry: TokenSecretEntry) => void;
  /**
   * Logs the line of a first payload served. A serving thread hands it to the main thread: written on the
   * thread, to a synchronous stdout, it sat in the first fetch of every booting host.
   */
  logFirstServed: (line: RequestLine) => void;
  /** Called when a ready payload is in neither memory nor disk (the cache dir was wiped): regenerate. */
  onPayloadMissing: (entry: TokenSecretEntry) => void;
  /**
   * Reads the token Secrets of a pool and hash known by their metadata only (tokens.unloadedFor), so a
   * token they hold is known: after a restart, Secrets are listed without their data and read on demand.
   */
  load: (pool: string, hash: string) => Promise<void>;
  log: Logger;
  metrics: { request(code: number): void };
  now: () => number;
  /** The request came on a connection over the process's cap (serving/balance.ts): answered 503, then closed. */
  busy: (req: IncomingMessage) => boolean;
}

const BEARER = 'Bearer ';
/** The syntax of a bearer token (RFC 6750's b64token). */
const B64TOKEN = /^[A-Za-z0-9._~+/-]+=*$/;
/** GET carries no body; anything bigger than this is not an Ignition client. */
const MAX_BODY_BYTES = 1024;
/** Chunks below this are joined with their neighbours when a payload's large parts are written as they are. */
const SMALL_PAYLOAD_BYTES = 64 * 1024;
/**
 * Below this a payload goes out as one corked run of writes: one TLS write and one socket write, as plain
 * node:https makes for one buffer. The TLS layer copies the body once to join it (so does plain node:https),
 * which costs less than a write, a socket write and a wake-up per part (strace: 3 writes per 311 KB request
 * against plain Node's 1). Above, a payload's large parts are written one at a time, uncopied.
 */
const CORKED_PAYLOAD_BYTES = 512 * 1024;
const NODE_POOL = IGNITION_HEADERS.nodePool.toLowerCase();
const HASH = IGNITION_HEADERS.targetConfigVersionHash.toLowerCase();
const JOIN = IGNITION_HEADERS.joinMaterial.toLowerCase();
const CONTENT_TYPES = new Map<string, string>(SPEC_VERSIONS.map((v) => [v, `${IGNITION_MEDIA_TYPE};version=${v}`]));
const contentType = (version: SpecVersion): string =>
  CONTENT_TYPES.get(version) ?? `${IGNITION_MEDIA_TYPE};version=${version}`;

/** A request's log line (a refusal, or the first payload served of a token Secret): no header, no token. */
export interface RequestLine {
  method: string | undefined;
  path: string | undefined;
  status: number;
  nodePool: string | undefined;
  durationMs: number;
}

export const FIRST_SERVED_MESSAGE = 'Served the first payload of a token Secret';

function checkBody(headers: IncomingHttpHeaders): void {
  const length = Number(headers['content-length'] ?? 0);
  if (headers['transfer-encoding'] !== undefined || !(length <= MAX_BODY_BYTES))
    throw new HttpError('IGN_BODY_TOO_LARGE');
}

/** What follows `Bearer `; its syntax is checked only where it matters (serveIgnition). */
function bearerToken(headers: IncomingHttpHeaders): string {
  const header = headers.authorization;
  if (header === undefined) throw new HttpError('IGN_TOKEN_MISSING');
  if (!header.startsWith(BEARER)) throw new HttpError('IGN_TOKEN_MALFORMED');
  return header.slice(BEARER.length);
}

/** The optional headers of the stub must agree with the token. */
function checkHeaders(headers: IncomingHttpHeaders, claims: TokenClaims): void {
  const pool = headers[NODE_POOL];
  if (pool !== undefined && pool !== claims.pool) throw new HttpError('IGN_POOL_MISMATCH');
  const hash = headers[HASH];
  if (hash !== undefined && hash !== claims.hash) throw new HttpError('IGN_HASH_MISMATCH');
}

/**
 * One request on its way, and what it came to (for its log line and the first-fetch callback); each step
 * answers now or, when it must wait, returns a promise of the rest.
 */
interface InFlight {
  req: IncomingMessage;
  /** `req.headers`, read once: each read is a call. */
  headers: IncomingHttpHeaders;
  res: ServerResponse;
  deps: AppDeps;
  /** performance.now() when the request arrived. */
  started: number;
  nodePool?: string;
  /** The entry whose payload was served for the first time on this handler. */
  firstServed?: TokenSecretEntry;
}

const inFlight = (req: IncomingMessage, res: ServerResponse, deps: AppDeps): InFlight => ({
  req,
  headers: req.headers,
  res,
  deps,
  started: performance.now(),
  nodePool: undefined,
  firstServed: undefined,
});

type Step = void | Promise<void>;

/**
 * Bearer present → signature and expiry (verified before, or now) → the token's live entry → the payload. The
 * token's one look-up finds its entry with the claims it was verified with (most often on the main thread as
 * it was indexed, so a booting host's first fetch verifies nothing); the entry is used only once they hold.
 */
function serveIgnition(r: InFlight): Step {
  checkBody(r.headers);
  const token = bearerToken(r.headers);
  const { deps } = r;
  const now = deps.now();
  const ref = deps.tokens.lookup(token, now);
  if (ref?.claims && ref.claims.expiresAtMs > now) return withClaims(r, token, ref.claims, ref);
  // A token verified before is a JWT, so of the bearer syntax; only another is checked for it, before anything
  // else. A regular expression over every request's ~400 characters was a third of what the handler cost
  // above plain node:https (callgrind).
  if (!B64TOKEN.test(token)) throw new HttpError('IGN_TOKEN_MALFORMED');
  const claims = deps.authority.remembered(token);
  if (claims) return withClaims(r, token, claims, ref);
  return deps.authority.verify(token).then((verified) => {
    if (!verified) throw new HttpError('IGN_TOKEN_INVALID');
    deps.tokens.verified(token, verified);
    return withClaims(r, token, verified, deps.tokens.lookup(token, deps.now()));
  });
}

function withClaims(r: InFlight, token: string, claims: TokenClaims, ref: TokenRef | undefined): Step {
  r.nodePool = claims.pool;
  const { deps } = r;
  // A token Secret known by its metadata only (after a restart) is read first, then asked again.
  if (ref || deps.tokens.unloadedFor(claims.pool, claims.hash).length === 0) return withEntry(r, claims, ref);
  return deps.load(claims.pool, claims.hash).then(() => withEntry(r, claims, deps.tokens.lookup(token, deps.now())));
}

function withEntry(r: InFlight, claims: TokenClaims, ref: TokenRef | undefined): Step {
  if (!ref || ref.entry.secret.pool !== claims.pool || ref.entry.secret.hash !== claims.hash)
    throw new HttpError('IGN_TOKEN_REVOKED');
  const { entry } = ref;
  checkHeaders(r.headers, claims);
  const version = negotiateVersion(r.headers.accept);
  if (version === undefined) throw new HttpError('IGN_SPEC_UNACCEPTABLE');
  const key = payloadKey(entry);
  const payload = r.deps.payloads.peek(key);
  if (payload) return respond(r, { ref, version, payload });
  return r.deps.payloads.lookup(key).then((found) => {
    if (!found) {
      r.deps.onPayloadMissing(entry);
      throw new HttpError('IGN_PAYLOAD_REGENERATING');
    }
    respond(r, { ref, version, payload: found });
  });
}

/** The content key of a ready payload; a pending or failed one is a 511 with its reason. */
function payloadKey(entry: TokenSecretEntry): string {
  const state = entry.payload;
  if (state.state === 'pending') throw new HttpError('IGN_PAYLOAD_PENDING');
  if (state.state === 'failed')
    throw new HttpError(
      state.reason === 'InvalidConfig' ? 'IGN_PAYLOAD_INVALID_CONFIG' : 'IGN_PAYLOAD_RELEASE_UNAVAILABLE',
    );
  return state.key;
}

function respond(r: InFlight, a: { ref: TokenRef; version: SpecVersion; payload: Payload }): void {
  if (!servable(a.payload.minVersion, a.version))
    throw new HttpError('IGN_SPEC_TOO_OLD', `${a.payload.minVersion} or newer`);
  // The pool's join material goes to hosts; the upgrader's nodes joined long ago and ask without it.
  const join = r.headers[JOIN] === 'omit' ? undefined : joinFor(a.ref);
  send(r.res, payloadChunks(a.payload, a.version, join), a.version, r.req.method === 'HEAD');
  const { entry } = a.ref;
  if (!entry.served) {
    entry.served = true;
    r.firstServed = entry;
    r.deps.onServed(entry);
  }
}

/**
 * Runs of small chunks joined into one write, large chunks written as they are: the large part of a payload
 * is never copied (a write of several buffers would be joined into one by the TLS layer).
 */
function writes(chunks: Buffer[]): Buffer[] {
  const out: Buffer[] = [];
  let small: Buffer[] = [];
  for (const c of chunks) {
    if (c.length < SMALL_PAYLOAD_BYTES) {
      small.push(c);
      continue;
    }
    if (small.length > 0) out.push(Buffer.concat(small));
    small = [];
    out.push(c);
  }
  if (small.length > 0) out.push(Buffer.concat(small));
  return out;
}

/**
 * A payload's chunks (below CORKED_PAYLOAD_BYTES) as one corked run of writes: the TLS layer joins them behind the headers in one
 * copy, as it copies any body behind its headers. Joining them here first (Buffer.concat) cost a second copy
 * and an allocation per request, and the copy out of shared memory is a slow, relaxed one: about a quarter of
 * what the handler cost above plain node:https (callgrind).
 */
function writeCorked(res: ServerResponse, chunks: Buffer[]): void {
  res.cork();
  const last = chunks.length - 1;
  for (let i = 0; i < last; i++) res.write(chunks[i]);
  res.end(chunks[last]);
  res.uncork();
}

function send(res: ServerResponse, chunks: Buffer[], version: SpecVersion, head: boolean): void {
  let length = 0;
  for (const c of chunks) length += c.length;
  // As a flat list: Node walks an object's keys with for-in and checks each with hasOwnProperty.
  res.writeHead(200, ['content-type', contentType(version), 'content-length', length, 'cache-control', 'no-store']);
  if (head) return void res.end();
  if (length < CORKED_PAYLOAD_BYTES) return writeCorked(res, chunks);
  const parts = writes(chunks);
  // Each part is written once the one before has gone to TLS: parts buffered behind a write in flight go
  // out as one writev, which Node's TLS layer first copies into one buffer (a copy of the whole payload).
  let i = 0;
  const next = (err?: Error | null): void => {
    if (err) return;
    const part = parts[i++];
    if (i === parts.length) res.end(part);
    else res.write(part, next);
  };
  // The headers and the first (small) part go in one TLS record.
  res.cork();
  next();
  res.uncork();
}

/** Errors of express itself (e.g. a malformed URL) carry a status; anything else is ours and a 500. */
function toHttpError(err: unknown): HttpError {
  if (err instanceof HttpError) return err;
  const status = (err as { status?: unknown } | undefined)?.status;
  if (typeof status === 'number' && status >= 400 && status < 500) return new HttpError('IGN_BAD_REQUEST');
  return new HttpError('IGN_INTERNAL');
}

/** Known outcomes get their code, status and fixed text; anything else is IGN_INTERNAL, its details logged. */
function refuse(res: ServerResponse, err: unknown, log: Logger): void {
  const known = toHttpError(err);
  if (known.status >= 500 && !(err instanceof HttpError)) log.error({ err }, 'Unexpected error serving a request');
  if (res.headersSent) return void res.destroy();
  const body = Buffer.from(known.body);
  res.writeHead(known.status, {
    'content-type': 'text/plain; charset=utf-8',
    'cache-control': 'no-store',
    ...known.headers,
    'content-length': String(body.length),
  });
  res.end(body);
}

/** A refusal, and the first payload served of each token Secret, are logged; every request is counted. */
function finished(r: InFlight): void {
  const { req, deps } = r;
  const status = r.res.statusCode;
  deps.metrics.request(status);
  if (status < 400 && !r.firstServed) return;
  const path = (req.url ?? '/').split('?')[0];
  const line: RequestLine = {
    method: req.method,
    path,
    status,
    nodePool: r.nodePool,
    durationMs: Math.round((performance.now() - r.started) * 10) / 10,
  };
  if (status < 400) deps.logFirstServed(line);
  else if (status >= 500 && status !== 511) deps.log.error(line, 'Request failed');
  else deps.log.info(line, 'Request refused');
}

function failed(r: InFlight, err: unknown, done: (r: InFlight) => void): void {
  refuse(r.res, err, r.deps.log);
  done(r);
}

/**
 * Serves or refuses, then `done` (counting, logging): without a promise when nothing had to wait, and
 * without a closure made for a request that does not wait either.
 */
function answer(r: InFlight, done: (r: InFlight) => void): void {
  let step: Step;
  try {
    step = serveIgnition(r);
  } catch (err) {
    return failed(r, err, done);
  }
  if (step)
    step.then(
      () => done(r),
      (err: unknown) => failed(r, err, done),
    );
  else done(r);
}

/** The Express app counts and logs on 'finish' instead. */
const finishedLater = (): void => undefined;

async function expressApp(deps: AppDeps): Promise<RequestListener> {
  const { default: express } = await import('express');
  const app = express();
  app.disable('x-powered-by');
  app.disable('etag');
  app.set('query parser', false);
  app.set('strict routing', true);
  app.set('case sensitive routing', true);
  app.use((req, res, next) => {
    const r = inFlight(req, res, deps);
    res.locals.inFlight = r;
    res.on('finish', () => finished(r));
    next();
  });
  // Counted and logged on 'finish' (above), like every request of this app.
  app.get('/ignition', (_req, res) => answer(res.locals.inFlight as InFlight, finishedLater));
  app.use((req) => {
    checkBody(req.headers);
    throw new HttpError('IGN_NOT_FOUND');
  });
  app.use((err: unknown, _req: Request, res: Response, _next: NextFunction) => refuse(res, err, deps.log));
  return app;
}

/** Counted, never logged: under overload, a log line per refusal would add to the load. */
function refuseBusy(res: ServerResponse, deps: AppDeps): void {
  res.shouldKeepAlive = false;
  res.setHeader('retry-after', '1');
  refuse(res, new HttpError('IGN_SERVER_BUSY'), deps.log);
  deps.metrics.request(res.statusCode);
}

/** The handler of the serving port. */
export function createApp(deps: AppDeps): RequestListener {
  let fallback: Promise<RequestListener> | undefined;
  return (req, res) => {
    if (deps.busy(req)) return refuseBusy(res, deps);
    if (req.url === '/ignition' && (req.method === 'GET' || req.method === 'HEAD')) {
      answer(inFlight(req, res, deps), finished);
      return;
    }
    fallback ??= expressApp(deps);
    fallback.then(
      (app) => app(req, res),
      (err: unknown) => refuse(res, err, deps.log),
    );
  };
}
