/**
 * Every replica's picture of the live token Secrets, fed by the Secret informer: which tokens are valid (the
 * current and the rotated one of each Secret), for which pool and hash, and where the payload stands. A
 * token whose Secret is deleted or past its expiry annotation is unknown at once, whatever its JWT says.
 */
import type * as k8s from '#k8s';
import { ANNOTATIONS, LABELS, SECRET_KEYS } from '../../api/src/keys.js';
import type { FailureReason } from './payload/store.js';
import { configDigest } from './payload/digest.js';
import { configHash } from '../../api/src/config-hash.js';
import { nodePoolOwner } from './token-secret-decision.js';
import { joinFileBytes } from './join-files.js';

export type PayloadState =
  { state: 'pending' } | { state: 'ready'; key: string } | { state: 'failed'; reason: FailureReason; message: string };

export interface TokenSecret {
  /** `namespace/name` of the Secret. */
  key: string;
  namespace: string;
  name: string;
  uid: string;
  /** `namespace/name` of the pool. */
  pool: string;
  hash: string;
  release: string;
  /** configDigest of the Secret's `config`: the config itself is read from the apiserver only to generate. */
  configSha256: string;
  /** configHash of the Secret's release and config: equal to `hash` unless they were edited. */
  inputsHash: string;
  /** The NodePool owner reference, if any: the pool the Secret must belong to. */
  owner?: { name: string; uid: string };
  /** The pool's Cluster API cluster (LABELS.capiClusterName): where its bootstrap tokens go. */
  cluster?: string;
  token?: string;
  rotatedToken?: string;
  /** Guest bootstrap tokens paired with `token` and `rotatedToken`. */
  bootstrapToken?: string;
  rotatedBootstrapToken?: string;
  /** The guest apiserver URL and CA (PEM) of the join material, recorded when the token was minted. */
  joinServer?: string;
  joinCa?: string;
  issuedAtMs?: number;
  expiresAtMs?: number;
  reachedAt?: string;
  payloadReason?: string;
  payloadMessage?: string;
  resourceVersion: string;
}

export interface TokenSecretEntry {
  secret: TokenSecret;
  payload: PayloadState;
  /** Set when this replica served the Secret's payload once, so it records ReachedIgnition only once. */
  served: boolean;
  /** Join files by bearer token, rendered on first use (the Secret's data does not change under an entry). */
  join: Map<string, Buffer | undefined>;
}

/** The join files a host presenting `token` gets: undefined when the Secret has no join material for it. */
export function joinFor(entry: TokenSecretEntry, token: string): Buffer | undefined {
  if (entry.join.has(token)) return entry.join.get(token);
  const s = entry.secret;
  const bootstrapToken =
    token === s.token ? s.bootstrapToken : token === s.rotatedToken ? s.rotatedBootstrapToken : undefined;
  const bytes =
    bootstrapToken && s.joinServer && s.joinCa
      ? joinFileBytes({ server: s.joinServer, caPem: s.joinCa, bootstrapToken })
      : undefined;
  entry.join.set(token, bytes);
  return bytes;
}

/**
 * A token Secret as the informer keeps it: without its `config` (up to megabytes per Secret, and thousands of
 * Secrets), which only a generation needs, nor managedFields. `configSha256` stands in for the config.
 */
export type CachedTokenSecret = k8s.V1Secret & { configSha256?: string; inputsHash?: string };

/** A Secret of a metadata-only list (PartialObjectMetadata): labels and annotations, no data. */
export const isMetadataOnly = (secret: CachedTokenSecret): boolean => secret.kind === 'PartialObjectMetadata';

/** The informer's transform: everything serving needs, nothing it does not. */
export function slimTokenSecret(secret: CachedTokenSecret): CachedTokenSecret {
  if (secret.configSha256 !== undefined) return secret;
  if (isMetadataOnly(secret)) {
    const { managedFields: _, ...metadata } = secret.metadata ?? {};
    return { ...secret, metadata };
  }
  const { [SECRET_KEYS.config]: config, ...data } = secret.data ?? {};
  const { managedFields: _, ...metadata } = secret.metadata ?? {};
  return {
    ...secret,
    metadata,
    data,
    configSha256: configDigest(configText(config)),
    inputsHash: inputsHashOf(secret),
  };
}

/** The config documents of a Secret's base64 `config` value ('[]' when it has none). */
export function configText(base64: string | undefined): string {
  return base64 === undefined ? '[]' : Buffer.from(base64, 'base64').toString('utf8');
}

const decode = (data: Record<string, string> | undefined, key: string): string | undefined => {
  const v = data?.[key];
  return v === undefined ? undefined : Buffer.from(v, 'base64').toString('utf8');
};

function timeOf(value: string | undefined): number | undefined {
  if (!value) return undefined;
  const t = Date.parse(value);
  return Number.isNaN(t) ? undefined : t;
}

/** Reads a token Secret; undefined when it lacks what a token needs (pool, hash, release). */
export function readTokenSecret(secret: CachedTokenSecret): TokenSecret | undefined {
  const meta = secret.metadata ?? {};
  const namespace = meta.namespace ?? '';
  const pool = poolOf(secret, namespace);
  const hash = meta.labels?.[LABELS.configHash];
  const release = decode(secret.data, SECRET_KEYS.release);
  if (!pool || !hash || !release || !meta.name) return undefined;
  const identity = {
    key: `${namespace}/${meta.name}`,
    namespace,
    name: meta.name,
    uid: String(meta.uid),
    resourceVersion: String(meta.resourceVersion),
  };
  const cluster = meta.labels?.[LABELS.capiClusterName];
  return {
    ...identity,
    pool,
    hash,
    release,
    cluster,
    configSha256: configSha256Of(secret),
    inputsHash: inputsHashOf(secret),
    owner: nodePoolOwner(meta.ownerReferences),
    ...fromData(secret.data),
    ...fromAnnotations(meta.annotations ?? {}),
  };
}

/** A cached Secret has its digest; one straight from the apiserver still has its config. */
function configSha256Of(secret: CachedTokenSecret): string {
  return secret.configSha256 ?? configDigest(configText(secret.data?.[SECRET_KEYS.config]));
}

/** The config hash the Secret's release and config stand for (computed while the config is at hand). */
function inputsHashOf(secret: CachedTokenSecret): string {
  return (
    secret.inputsHash ??
    configHash({
      release: decode(secret.data, SECRET_KEYS.release) ?? '',
      config: configText(secret.data?.[SECRET_KEYS.config]),
    })
  );
}

/**
 * `namespace/name` of the pool: the Secret's `pool` key, else its namespace and pool label. A pool is always
 * in its token Secret's namespace: a Secret naming a pool elsewhere would mint tokens (and bootstrap groups)
 * for a pool its writer does not own, so it is not a token Secret.
 */
function poolOf(secret: k8s.V1Secret, namespace: string): string | undefined {
  const poolName = secret.metadata?.labels?.[LABELS.nodePool];
  const pool = decode(secret.data, SECRET_KEYS.pool) ?? (poolName ? `${namespace}/${poolName}` : undefined);
  return pool?.startsWith(`${namespace}/`) && !pool.slice(namespace.length + 1).includes('/') ? pool : undefined;
}

function fromData(
  data: Record<string, string> | undefined,
): Pick<TokenSecret, 'token' | 'rotatedToken' | 'bootstrapToken' | 'rotatedBootstrapToken' | 'joinServer' | 'joinCa'> {
  return {
    token: decode(data, SECRET_KEYS.token),
    rotatedToken: decode(data, SECRET_KEYS.rotatedToken),
    bootstrapToken: decode(data, SECRET_KEYS.bootstrapToken),
    rotatedBootstrapToken: decode(data, SECRET_KEYS.rotatedBootstrapToken),
    joinServer: decode(data, SECRET_KEYS.joinServer),
    joinCa: decode(data, SECRET_KEYS.joinCa),
  };
}

function fromAnnotations(
  a: Record<string, string>,
): Pick<TokenSecret, 'issuedAtMs' | 'expiresAtMs' | 'reachedAt' | 'payloadReason' | 'payloadMessage'> {
  return {
    issuedAtMs: timeOf(a[ANNOTATIONS.tokenIssuedAt]),
    expiresAtMs: timeOf(a[ANNOTATIONS.tokenExpiresAt]),
    reachedAt: a[ANNOTATIONS.ignitionReachedAt],
    payloadReason: a[ANNOTATIONS.payloadReason],
    payloadMessage: a[ANNOTATIONS.payloadMessage],
  };
}

/** What changed in an index, for a copy kept elsewhere (a serving thread's, see serving/pool.ts). */
export type IndexChange =
  | { type: 'upsert'; secret: TokenSecret; payload: PayloadState }
  | { type: 'payload'; key: string; payload: PayloadState }
  | { type: 'remove'; key: string }
  | { type: 'unloaded'; key: string; pool: string; hash: string };

/** A token Secret known by its metadata only (a metadata list after a restart): its tokens are not known yet. */
export interface UnloadedSecret {
  key: string;
  /** `namespace/name` of the pool, from the Secret's labels. */
  pool: string;
  hash: string;
}

const poolHash = (pool: string, hash: string): string => `${pool}\0${hash}`;

export class TokenIndex {
  readonly #bySecret = new Map<string, TokenSecretEntry>();
  readonly #byToken = new Map<string, string>();
  /** Secrets known by metadata only, by pool and hash (what a verified token names). */
  readonly #unloaded = new Map<string, UnloadedSecret>();
  readonly #unloadedByPoolHash = new Map<string, Set<string>>();
  #observer: ((change: IndexChange) => void) | undefined;

  /** Follows every change; told of every entry held now first. */
  observe(observer: (change: IndexChange) => void): void {
    this.#observer = observer;
    for (const u of this.#unloaded.values()) observer({ type: 'unloaded', ...u });
    for (const e of this.#bySecret.values()) observer({ type: 'upsert', secret: e.secret, payload: e.payload });
  }

  /** Records the Secret's current state; returns its entry (payload state kept if the inputs did not change). */
  upsert(secret: TokenSecret, payload?: PayloadState): TokenSecretEntry {
    const previous = this.#bySecret.get(secret.key);
    this.#dropTokens(previous);
    this.#dropUnloaded(secret.key);
    const sameInputs =
      previous && previous.secret.release === secret.release && previous.secret.configSha256 === secret.configSha256;
    const state = payload ?? (sameInputs ? previous.payload : { state: 'pending' });
    const entry: TokenSecretEntry = { secret, payload: state, served: previous?.served ?? false, join: new Map() };
    this.#bySecret.set(secret.key, entry);
    this.#takeTokens(secret);
    this.#observer?.({ type: 'upsert', secret, payload: entry.payload });
    return entry;
  }

  /** The entry's payload moved on (generated, failed, gone and pending again). */
  setPayload(entry: TokenSecretEntry, payload: PayloadState): void {
    entry.payload = payload;
    if (this.#bySecret.get(entry.secret.key) === entry)
      this.#observer?.({ type: 'payload', key: entry.secret.key, payload });
  }

  /** A Secret known by metadata only, until upsert: what it holds is read on demand (unloadedFor). */
  markUnloaded(secret: UnloadedSecret): void {
    if (this.#bySecret.has(secret.key)) return;
    this.#dropUnloaded(secret.key);
    this.#unloaded.set(secret.key, secret);
    const ph = poolHash(secret.pool, secret.hash);
    this.#unloadedByPoolHash.set(ph, (this.#unloadedByPoolHash.get(ph) ?? new Set()).add(secret.key));
    this.#observer?.({ type: 'unloaded', ...secret });
  }

  /** Keys of the Secrets of this pool and hash known by metadata only: one of them may hold the token. */
  unloadedFor(pool: string, hash: string): string[] {
    return [...(this.#unloadedByPoolHash.get(poolHash(pool, hash)) ?? [])];
  }

  isUnloaded(key: string): boolean {
    return this.#unloaded.has(key);
  }

  remove(key: string): void {
    this.#dropTokens(this.#bySecret.get(key));
    const known = this.#bySecret.delete(key) || this.#unloaded.has(key);
    this.#dropUnloaded(key);
    if (known) this.#observer?.({ type: 'remove', key });
  }

  get(key: string): TokenSecretEntry | undefined {
    return this.#bySecret.get(key);
  }

  /** The entry the token belongs to, if its Secret is live and not past its expiry annotation. */
  find(token: string, nowMs: number): TokenSecretEntry | undefined {
    const key = this.#byToken.get(token);
    const entry = key === undefined ? undefined : this.#bySecret.get(key);
    if (!entry) return undefined;
    if (entry.secret.expiresAtMs !== undefined && entry.secret.expiresAtMs <= nowMs) return undefined;
    return entry;
  }

  /** Every entry whose Secret is known with its data. */
  entries(): TokenSecretEntry[] {
    return [...this.#bySecret.values()];
  }

  /** Keys of the Secrets known by metadata only. */
  unloadedKeys(): string[] {
    return [...this.#unloaded.keys()];
  }

  /** Tokens a host could present right now (current and rotated of every live Secret). */
  get liveTokens(): number {
    return this.#byToken.size;
  }

  /** The first Secret holding a token keeps it: a Secret that copies another's token cannot take it over. */
  #takeTokens(secret: TokenSecret): void {
    for (const t of [secret.token, secret.rotatedToken])
      if (t && !this.#byToken.has(t)) this.#byToken.set(t, secret.key);
  }

  #dropTokens(entry: TokenSecretEntry | undefined): void {
    if (!entry) return;
    for (const t of [entry.secret.token, entry.secret.rotatedToken]) {
      if (t && this.#byToken.get(t) === entry.secret.key) this.#byToken.delete(t);
    }
  }

  #dropUnloaded(key: string): void {
    const known = this.#unloaded.get(key);
    if (!known) return;
    this.#unloaded.delete(key);
    const ph = poolHash(known.pool, known.hash);
    const keys = this.#unloadedByPoolHash.get(ph);
    keys?.delete(key);
    if (keys?.size === 0) this.#unloadedByPoolHash.delete(ph);
  }
}
