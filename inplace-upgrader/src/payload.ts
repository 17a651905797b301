/**
 * Where the upgrader gets a node's payload (the full Ignition config of a pool at a hash). The real source
 * asks the ignition server exactly as a host does: GET /ignition with the pool's token and headers.
 */
import { request as httpsRequest } from 'node:https';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import * as k8s from '#k8s';
import {
  ANNOTATIONS,
  IGNITION_ERROR_HEADER,
  IGNITION_HEADERS,
  SECRET_KEYS,
  tokenSecretName,
} from '../../api/src/keys.js';
import { isNotFound, NotReadyError } from '../../support/src/errors.js';
import type { Logger } from '../../support/src/logger.js';
import type { BootedPayload } from './desired.js';

export interface PayloadRequest {
  /** Management namespace of the pool (and of its token Secret). */
  namespace: string;
  pool: string;
  hash: string;
}

export interface PayloadSource {
  /** The Ignition config (JSON bytes); NotReadyError while it cannot be had yet. */
  fetch(req: PayloadRequest): Promise<Buffer>;
}

/** What the Ignition client announces it accepts; the server answers in that spec version. */
const IGNITION_ACCEPT = 'application/vnd.coreos.ignition+json;version=3.4.0, */*;q=0.1';

/** The ignition server's code for a well-signed token it holds no Secret for (its error registry). */
const TOKEN_UNKNOWN = 'IGN_TOKEN_REVOKED';

export interface IgnitionServerOptions {
  kubeConfig: k8s.KubeConfig;
  /** Base URL of the ignition server, e.g. https://ignition.example:9090 */
  url: string;
  /** PEM CA bundle of its serving certificate (empty: the system's). */
  caPem?: string;
  timeoutMs?: number;
}

function get(
  url: URL,
  headers: Record<string, string>,
  opts: { caPem?: string; timeoutMs: number },
): Promise<{ status: number; code?: string; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const onResponse = (res: IncomingMessage): void => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      const code = res.headers[IGNITION_ERROR_HEADER.toLowerCase()];
      res.on('end', () =>
        resolve({
          status: res.statusCode ?? 0,
          code: typeof code === 'string' ? code : undefined,
          body: Buffer.concat(chunks),
        }),
      );
      res.on('error', reject);
    };
    const req =
      url.protocol === 'https:'
        ? httpsRequest(url, { headers, ca: opts.caPem || undefined, timeout: opts.timeoutMs }, onResponse)
        : httpRequest(url, { headers, timeout: opts.timeoutMs }, onResponse);
    req.on('timeout', () => req.destroy(new Error(`no answer from ${url.origin} in ${opts.timeoutMs} ms`)));
    req.on('error', reject);
    req.end();
  });
}

export class IgnitionServerPayloadSource implements PayloadSource {
  #opts: IgnitionServerOptions;
  #core: k8s.CoreV1Api;

  constructor(opts: IgnitionServerOptions) {
    this.#opts = opts;
    this.#core = opts.kubeConfig.makeApiClient(k8s.CoreV1Api);
  }

  async fetch(req: PayloadRequest): Promise<Buffer> {
    const token = await this.#token(req);
    const url = new URL('/ignition', this.#opts.url);
    const headers = {
      Authorization: `Bearer ${token}`,
      [IGNITION_HEADERS.nodePool]: `${req.namespace}/${req.pool}`,
      [IGNITION_HEADERS.targetConfigVersionHash]: req.hash,
      // The node joined at first boot: its in-place payload carries no bootstrap token.
      [IGNITION_HEADERS.joinMaterial]: 'omit',
      Accept: IGNITION_ACCEPT,
    };
    const res = await get(url, headers, { caPem: this.#opts.caPem, timeoutMs: this.#opts.timeoutMs ?? 30_000 }).catch(
      (err: unknown) => {
        throw new NotReadyError(`ignition server unreachable: ${(err as Error).message}`, 5_000, { cause: err });
      },
    );
    if (res.status === 200) return res.body;
    // 511: the token is known but its payload is not generated yet; any 5xx: retry, as Ignition does.
    if (res.status >= 500)
      throw new NotReadyError(`ignition server answered ${res.status} for ${req.pool}@${req.hash}`, 5_000);
    // The token was just read from its Secret: a server that does not know it has not seen that Secret yet
    // (its cache lags the apiserver by a watch event). Ask again, reading the Secret anew.
    if (res.status === 401 && res.code === TOKEN_UNKNOWN)
      throw new NotReadyError(
        `ignition server does not know the token of ${req.namespace}/${req.pool}@${req.hash} yet (${TOKEN_UNKNOWN})`,
        1_000,
      );
    throw new Error(
      `ignition server refused the payload of ${req.namespace}/${req.pool}@${req.hash}: HTTP ${res.status}${res.code ? ` ${res.code}` : ''}`,
    );
  }

  async #token(req: PayloadRequest): Promise<string> {
    const name = tokenSecretName(req.pool, req.hash);
    try {
      const secret = await this.#core.readNamespacedSecret({ name, namespace: req.namespace });
      const token = secret.data?.[SECRET_KEYS.token];
      if (!token) throw new NotReadyError(`token Secret ${req.namespace}/${name} has no token yet`);
      return Buffer.from(token, 'base64').toString('utf8');
    } catch (err) {
      if (isNotFound(err))
        throw new NotReadyError(`token Secret ${req.namespace}/${name} does not exist yet`, 5_000, { cause: err });
      throw err;
    }
  }
}

/** How long a node's hand-out waits for the config it booted with while the source answers "not yet". */
const BOOTED_PATIENCE_MS = 2 * 60_000;
/** Nodes whose wait is remembered at most (the oldest are forgotten first: they wait once more, no longer). */
const MAX_BOOTED_WAITS = 4096;

/**
 * Since when each node has waited for the payload it booted with. A NotReadyError (511 pending, the server
 * unreachable) passes once the server catches up, and a node handed out without it never gets it (its payload
 * Secret exists at the target), so the hand-out waits for it, but only so long: a token Secret that expired
 * long after the pool moved on answers the same "not yet" forever.
 */
export class BootedWaits {
  #since = new Map<string, number>();
  #patienceMs: number;
  #now: () => number;

  constructor(patienceMs = BOOTED_PATIENCE_MS, now: () => number = Date.now) {
    this.#patienceMs = patienceMs;
    this.#now = now;
  }

  /** Whether `key`, which just failed for a passing reason, should still wait (its first failure counts). */
  keepWaiting(key: string): boolean {
    let first = this.#since.get(key);
    if (first === undefined) {
      first = this.#now();
      this.#since.set(key, first);
      if (this.#since.size > MAX_BOOTED_WAITS) this.#since.delete(this.#since.keys().next().value as string);
    }
    return this.#now() - first < this.#patienceMs;
  }

  /** `key` got its payload: a later wait starts afresh. */
  forget(key: string): void {
    this.#since.delete(key);
  }
}

/** The hash whose payload a node needs beside the target: none once the agent updated it, or at the target. */
function bootedHashOf(at: { target: string; node: k8s.V1Node; booted: string | undefined }): string | undefined {
  if (at.node.metadata?.annotations?.[ANNOTATIONS.currentConfig] !== undefined) return undefined;
  return at.booted === at.target ? undefined : at.booted;
}

/**
 * The config a node booted with, for its payload Secret (api/src/node-agent.ts PAYLOAD_KEYS.bootedConfig): only
 * for a node the agent never updated in place (no currentConfig: after its first update the agent keeps its own
 * record), at `booted`, the hash its engine says its host booted with. Nothing when that is the target or
 * unknown. While the source answers "not yet" (NotReadyError), that is rethrown (the reconcile asks again) until
 * the node has waited `waits`' patience; then, or at once on a refusal, nothing: the agent plans against the host
 * alone and says so. The agent checks the host holds that config before it goes by it (node-agent/src/record.ts).
 */
export async function bootedPayload(
  payloads: PayloadSource,
  at: { namespace: string; pool: string; target: string; node: k8s.V1Node; booted: string | undefined },
  waits: BootedWaits,
  log: Logger,
): Promise<BootedPayload | undefined> {
  const hash = bootedHashOf(at);
  if (hash === undefined) return undefined;
  const node = at.node.metadata?.name ?? '';
  const key = `${at.namespace}/${node}@${hash}`;
  try {
    const config = await payloads.fetch({ namespace: at.namespace, pool: at.pool, hash });
    waits.forget(key);
    return { hash, config };
  } catch (err) {
    if (err instanceof NotReadyError && waits.keepWaiting(key)) throw err;
    log.warn(
      { node, bootedHash: hash, reason: (err as Error).message },
      'No payload the node booted with: its first update is planned against the host alone',
    );
    return undefined;
  }
}

/** Keeps the last few payloads: every node of a rollout gets the same one. */
export class CachedPayloadSource implements PayloadSource {
  #inner: PayloadSource;
  #cache = new Map<string, Promise<Buffer>>();
  #max: number;

  constructor(inner: PayloadSource, max = 8) {
    this.#inner = inner;
    this.#max = max;
  }

  fetch(req: PayloadRequest): Promise<Buffer> {
    const key = `${req.namespace}/${req.pool}/${req.hash}`;
    const hit = this.#cache.get(key);
    if (hit) return hit;
    const pending = this.#inner.fetch(req);
    this.#cache.set(key, pending);
    // A failure is not cached: the next reconcile asks again.
    pending.catch(() => this.#cache.delete(key));
    while (this.#cache.size > this.#max) this.#cache.delete(this.#cache.keys().next().value as string);
    return pending;
  }
}
