/**
 * The serving port's HTTP app: `GET /ignition` and nothing else. Authentication runs in a fixed order —
 * bearer present → JWT signature and expiry → token of a live token Secret → pool/hash headers — so a
 * forged or stale token never reaches a look-up. Status codes (Flow 2 step 4): 401 for a missing, garbled,
 * forged, expired or revoked token; 403 when the NodePool header names another pool; 406 when the client
 * takes no spec version the payload fits in; 511 while the payload is not generated (Ignition retries 5xx);
 * 404 elsewhere. Every refusal is a code of errors.ts (listed in docs/errors.md) with a fixed text.
 */
import express, { type NextFunction, type Request, type Response } from 'express';
import type { Logger } from '../../support/src/logger.js';
import { IGNITION_HEADERS } from '../../api/src/keys.js';
import type { TokenAuthority, TokenClaims } from './tokens.js';
import { joinFor, type TokenIndex, type TokenSecretEntry } from './token-index.js';
import { payloadChunks, type Payload } from './payload/store.js';
import { IGNITION_MEDIA_TYPE, negotiateVersion, servable, type SpecVersion } from './payload/versions.js';
import { HttpError } from './errors.js';

export interface AppDeps {
  authority: Pick<TokenAuthority, 'verify'>;
  tokens: Pick<TokenIndex, 'find'>;
  payloads: { peek(key: string): Payload | undefined; lookup(key: string): Promise<Payload | undefined> };
  /** Called after a payload was served (not awaited: a Kubernetes write never sits in a request). */
  onServed: (entry: TokenSecretEntry) => void;
  /** Called when a ready payload is in neither memory nor disk (the cache dir was wiped): regenerate. */
  onPayloadMissing: (entry: TokenSecretEntry) => void;
  log: Logger;
  metrics?: { request(code: number): void };
  now?: () => number;
}

const BEARER = /^Bearer ([A-Za-z0-9._~+/-]+=*)$/;
/** GET carries no body; anything bigger than this is not an Ignition client. */
const MAX_BODY_BYTES = 1024;
const SMALL_PAYLOAD_BYTES = 64 * 1024;

interface Authorized {
  claims: TokenClaims;
  entry: TokenSecretEntry;
  token: string;
}

function bearerToken(req: Request): string {
  const header = req.headers.authorization;
  if (header === undefined) throw new HttpError('IGN_TOKEN_MISSING');
  const token = BEARER.exec(header)?.[1];
  if (token === undefined) throw new HttpError('IGN_TOKEN_MALFORMED');
  return token;
}

/** The optional headers of the stub must agree with the token. */
function checkHeaders(req: Request, claims: TokenClaims): void {
  const pool = req.headers[IGNITION_HEADERS.nodePool.toLowerCase()];
  if (pool !== undefined && pool !== claims.pool) throw new HttpError('IGN_POOL_MISMATCH');
  const hash = req.headers[IGNITION_HEADERS.targetConfigVersionHash.toLowerCase()];
  if (hash !== undefined && hash !== claims.hash) throw new HttpError('IGN_HASH_MISMATCH');
}

async function authorize(req: Request, deps: AppDeps, res: Response): Promise<Authorized> {
  const token = bearerToken(req);
  const claims = await deps.authority.verify(token);
  if (!claims) throw new HttpError('IGN_TOKEN_INVALID');
  res.locals.nodePool = claims.pool;
  const entry = deps.tokens.find(token, (deps.now ?? Date.now)());
  if (!entry || entry.secret.pool !== claims.pool || entry.secret.hash !== claims.hash) throw new HttpError('IGN_TOKEN_REVOKED');
  checkHeaders(req, claims);
  return { claims, entry, token };
}

async function payloadFor(entry: TokenSecretEntry, deps: AppDeps): Promise<Payload> {
  const state = entry.payload;
  if (state.state === 'pending') throw new HttpError('IGN_PAYLOAD_PENDING');
  if (state.state === 'failed') throw new HttpError(state.reason === 'InvalidConfig' ? 'IGN_PAYLOAD_INVALID_CONFIG' : 'IGN_PAYLOAD_RELEASE_UNAVAILABLE');
  const payload = deps.payloads.peek(state.key) ?? (await deps.payloads.lookup(state.key));
  if (!payload) {
    deps.onPayloadMissing(entry);
    throw new HttpError('IGN_PAYLOAD_REGENERATING');
  }
  return payload;
}

function send(res: Response, chunks: Buffer[], version: SpecVersion, head: boolean): void {
  const length = chunks.reduce((n, c) => n + c.length, 0);
  res.status(200);
  res.set({
    'content-type': `${IGNITION_MEDIA_TYPE};version=${version}`,
    'content-length': String(length),
    'cache-control': 'no-store',
  });
  if (head) return void res.end();
  // A small payload goes out in one write (one TLS record batch, no writev of three slices); a large one
  // without copying its tail.
  if (length < SMALL_PAYLOAD_BYTES) return void res.end(Buffer.concat(chunks, length));
  for (const c of chunks.slice(0, -1)) res.write(c);
  res.end(chunks[chunks.length - 1]);
}

function ignitionHandler(deps: AppDeps) {
  return async (req: Request, res: Response): Promise<void> => {
    const { entry, token } = await authorize(req, deps, res);
    const version = negotiateVersion(req.headers.accept);
    if (version === undefined) throw new HttpError('IGN_SPEC_UNACCEPTABLE');
    const payload = await payloadFor(entry, deps);
    if (!servable(payload.minVersion, version)) throw new HttpError('IGN_SPEC_TOO_OLD', `${payload.minVersion} or newer`);
    // The pool's join material goes to hosts; the upgrader's nodes joined long ago and ask without it.
    const join = req.headers[IGNITION_HEADERS.joinMaterial.toLowerCase()] === 'omit' ? undefined : joinFor(entry, token);
    send(res, payloadChunks(payload, version, join), version, req.method === 'HEAD');
    if (!entry.served) {
      entry.served = true;
      deps.onServed(entry);
    }
  };
}

function requestLog(deps: AppDeps) {
  return (req: Request, res: Response, next: NextFunction): void => {
    const started = performance.now();
    res.on('finish', () => {
      deps.metrics?.request(res.statusCode);
      const nodePool = typeof res.locals.nodePool === 'string' ? res.locals.nodePool : undefined;
      const line = { method: req.method, path: req.path, status: res.statusCode, nodePool, durationMs: Math.round((performance.now() - started) * 10) / 10 };
      if (res.statusCode >= 500 && res.statusCode !== 511) deps.log.error(line, 'Request failed');
      else deps.log.info(line, 'Request');
    });
    next();
  };
}

function boundedBody(req: Request, _res: Response, next: NextFunction): void {
  const length = Number(req.headers['content-length'] ?? 0);
  if (req.headers['transfer-encoding'] !== undefined || !(length <= MAX_BODY_BYTES)) throw new HttpError('IGN_BODY_TOO_LARGE');
  next();
}

/** Errors of express itself (e.g. a malformed URL) carry a status; anything else is ours and a 500. */
function toHttpError(err: unknown): HttpError {
  if (err instanceof HttpError) return err;
  const status = (err as { status?: unknown } | undefined)?.status;
  if (typeof status === 'number' && status >= 400 && status < 500) return new HttpError('IGN_BAD_REQUEST');
  return new HttpError('IGN_INTERNAL');
}

export function createApp(deps: AppDeps): express.Express {
  const app = express();
  app.disable('x-powered-by');
  app.disable('etag');
  app.set('query parser', false);
  app.set('strict routing', true);
  app.set('case sensitive routing', true);
  app.use(requestLog(deps));
  app.use(boundedBody);
  app.get('/ignition', ignitionHandler(deps));
  app.use(() => {
    throw new HttpError('IGN_NOT_FOUND');
  });
  // The one error middleware: known outcomes get their code, status and fixed text; anything else is
  // IGN_INTERNAL, whose details stay in the log.
  app.use((err: unknown, _req: Request, res: Response, _next: NextFunction) => {
    const known = toHttpError(err);
    if (known.status >= 500 && !(err instanceof HttpError)) deps.log.error({ err }, 'Unexpected error serving a request');
    res.status(known.status).set({ 'content-type': 'text/plain; charset=utf-8', 'cache-control': 'no-store', ...known.headers });
    res.send(known.body);
  });
  return app;
}
