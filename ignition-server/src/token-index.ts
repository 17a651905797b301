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
import { COMPACT_JWS, MAX_TOKEN_LENGTH, type TokenClaims } from './tokens.js';

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
}

/**
 * One live token of an entry: what a request needs of its bearer, found with one look-up of the (~400-char)
 * token. Its claims and join files depend on the token alone (and the join material the Secret pairs with it),
 * so they outlive the entry's updates.
 */
export interface TokenRef {
  token: string;
  entry: TokenSecretEntry;
  /** The token's claims once its signature was verified (on the main thread as it was indexed, or here). */
  claims?: TokenClaims;
  /** The join files of this token, kept once its Secret was served before (joinFor); null when it has none. */
  join?: Buffer | null;
}

/** The guest bootstrap token a Secret pairs with one of its tokens. */
const pairedBootstrapToken = (s: TokenSecret, token: string): string | undefined =>
  token === s.token ? s.bootstrapToken : token === s.rotatedToken ? s.rotatedBootstrapToken : undefined;

/** The join material a Secret pairs with one of its tokens. */
function joinInputs(s: TokenSecret, token: string): string | undefined {
  const bootstrapToken = pairedBootstrapToken(s, token);
  return bootstrapToken && s.joinServer && s.joinCa ? `${bootstrapToken}\0${s.joinServer}\0${s.joinCa}` : undefined;
}

/**
 * The join files a host presenting the token gets: undefined when the Secret has no join material for it.
 * They are kept on the token once its Secret was served before (a host fetching again, a keep-alive client),
 * not on a first fetch: a booting host fetches once, and in a boot storm the join files kept for every host
 * (about 4.5 KB each, in memory of their own) were most of what grew a serving thread's heap, so that it ran
 * a full collection every 2 to 6 s in the middle of the storm (docs/benchmarks.md, the storm row).
 */
export function joinFor(ref: TokenRef): Buffer | undefined {
  if (ref.join !== undefined) return ref.join ?? undefined;
  const s = ref.entry.secret;
  const bootstrapToken = pairedBootstrapToken(s, ref.token);
  const bytes =
    bootstrapToken && s.joinServer && s.joinCa
      ? joinFileBytes({ server: s.joinServer, caPem: s.joinCa, bootstrapToken })
      : undefined;
  if (ref.entry.served) ref.join = bytes ?? null;
  return bytes;
}

/** What only the leader's bookkeeping reads: the first-fetch stamp, the generation outcome, the resourceVersion. */
const BOOKKEEPING = new Set<string>(['resourceVersion', 'reachedAt', 'payloadReason', 'payloadMessage']);

const sameOwner = (a: TokenSecret['owner'], b: TokenSecret['owner']): boolean =>
  a?.name === b?.name && a?.uid === b?.uid;

/**
 * Whether two states of a Secret serve the same: they differ at most in its bookkeeping. A copy kept for
 * serving is not told of such a change: each first fetch of a boot storm comes back as one.
 */
function servesSame(a: TokenSecret, b: TokenSecret): boolean {
  if (!sameOwner(a.owner, b.owner)) return false;
  for (const k of new Set([...Object.keys(a), ...Object.keys(b)]) as Set<keyof TokenSecret>)
    if (k !== 'owner' && !BOOKKEEPING.has(k) && a[k] !== b[k]) return false;
  return true;
}

/**
 * A token Secret as the informer keeps it: without its `config` (up to megabytes per Secret, and thousands of
 * Secrets), which only a generation needs, and with nothing else but what the index reads (slimTokenSecret).
 * `configSha256` stands in for the config.
 */
export type CachedTokenSecret = k8s.V1Secret & { configSha256?: string; inputsHash?: string };

/** A Secret of a metadata-only list (PartialObjectMetadata): labels and annotations, no data. */
export const isMetadataOnly = (secret: CachedTokenSecret): boolean => secret.kind === 'PartialObjectMetadata';

/** What the guest apiserver's bootstrap authenticator takes, and what join.ts mints. */
const BOOTSTRAP_TOKEN = /^[a-z0-9]{6}\.[a-z0-9]{16}$/;

function isHttpsUrl(text: string): boolean {
  try {
    return new URL(text).protocol === 'https:';
  } catch {
    return false;
  }
}

/** The most bytes a data key may hold, and the form its text must have. */
interface FieldRule {
  maxBytes: number;
  valid?: (text: string) => boolean;
}

const TOKEN_RULE: FieldRule = { maxBytes: MAX_TOKEN_LENGTH, valid: (t) => COMPACT_JWS.test(t) };
const BOOTSTRAP_RULE: FieldRule = { maxBytes: 23, valid: (t) => BOOTSTRAP_TOKEN.test(t) };

/**
 * Every data key the index reads, with its bound: a tenant can write anything into its own token Secrets, and
 * what is kept is held by the informer, the index and each serving thread (an upsert is copied to every one).
 * A value past its bound or of another form is absent, as if never written, so the leader mends what it owns:
 * it mints a token where there is none, and writes the join material afresh with the next token (a Secret
 * refused whole would keep its tokens from working until someone deleted it). Each bound holds what its writer
 * writes: the nodepool-controller's `release` (a NodePool's spec.release, at most 1024 characters by the CRD)
 * and `pool` (namespace and name), the leader's tokens and join material (the guest's https URL and its CA, a
 * PEM bundle of a few certificates).
 */
const DATA_RULES: Readonly<Record<string, FieldRule>> = {
  [SECRET_KEYS.token]: TOKEN_RULE,
  [SECRET_KEYS.rotatedToken]: TOKEN_RULE,
  [SECRET_KEYS.bootstrapToken]: BOOTSTRAP_RULE,
  [SECRET_KEYS.rotatedBootstrapToken]: BOOTSTRAP_RULE,
  [SECRET_KEYS.joinServer]: { maxBytes: 2048, valid: isHttpsUrl },
  [SECRET_KEYS.joinCa]: { maxBytes: 64 * 1024 },
  [SECRET_KEYS.release]: { maxBytes: 4 * 1024 },
  [SECRET_KEYS.pool]: { maxBytes: 63 + 1 + 253 },
};

/**
 * The longest value of each annotation the index reads, in characters: timestamps, a generation outcome's reason,
 * and its message (the leader's is at most 1000 characters, or names the release). A longer one is absent: the
 * leader writes its own again.
 */
const ANNOTATION_LIMITS: Readonly<Record<string, number>> = {
  [ANNOTATIONS.tokenIssuedAt]: 64,
  [ANNOTATIONS.tokenExpiresAt]: 64,
  [ANNOTATIONS.ignitionReachedAt]: 64,
  [ANNOTATIONS.payloadReason]: 128,
  [ANNOTATIONS.payloadMessage]: 8 * 1024,
};

/** The labels the index and the controller read (the token-secret label is the informer's selector). */
const KEPT_LABELS: ReadonlySet<string> = new Set([
  LABELS.tokenSecret,
  LABELS.nodePool,
  LABELS.configHash,
  LABELS.capiClusterName,
]);

/** The text of a data key the index reads, if it is within its bound and of its form (undefined otherwise). */
function dataField(data: Record<string, string> | undefined, key: string): string | undefined {
  const rule = DATA_RULES[key];
  const base64 = data?.[key];
  // Measured before decoding: an oversized value costs no copy of its own.
  if (!rule || base64 === undefined || base64.length > Math.ceil(rule.maxBytes / 3) * 4) return undefined;
  const bytes = Buffer.from(base64, 'base64');
  if (bytes.length > rule.maxBytes) return undefined;
  const text = bytes.toString('utf8');
  return (rule.valid?.(text) ?? true) ? text : undefined;
}

/** The value of an annotation the index reads, if it is within its bound (undefined otherwise). */
function annotationField(annotations: Record<string, string> | undefined, key: string): string | undefined {
  const value = annotations?.[key];
  return value !== undefined && value.length <= (ANNOTATION_LIMITS[key] ?? -1) ? value : undefined;
}

/** The entries of a record (a Secret's data, labels or annotations) to keep. */
function pick<V>(record: Record<string, V> | undefined, keep: (key: string) => boolean): Record<string, V> | undefined {
  return record && Object.fromEntries(Object.entries(record).filter(([k]) => keep(k)));
}

/** The metadata the index and the controller read: what identifies the Secret, its pool, its stamps. */
function slimMetadata(meta: k8s.V1ObjectMeta = {}): k8s.V1ObjectMeta {
  const owner = meta.ownerReferences?.find((ref) => nodePoolOwner([ref]) !== undefined);
  return {
    name: meta.name,
    namespace: meta.namespace,
    uid: meta.uid,
    resourceVersion: meta.resourceVersion,
    labels: pick(meta.labels, (k) => KEPT_LABELS.has(k)),
    annotations: pick(meta.annotations, (k) => annotationField(meta.annotations, k) !== undefined),
    ownerReferences: owner && [owner],
  };
}

/**
 * The informer's transform: everything serving needs, nothing it does not. What is kept is what the index reads
 * (DATA_RULES, ANNOTATION_LIMITS), within its bounds: a refused Secret is held by the informer too.
 */
export function slimTokenSecret(secret: CachedTokenSecret): CachedTokenSecret {
  if (secret.configSha256 !== undefined) return secret;
  const metadata = slimMetadata(secret.metadata);
  if (isMetadataOnly(secret)) return { ...secret, metadata };
  const data = pick(secret.data, (k) => dataField(secret.data, k) !== undefined) ?? {};
  return {
    ...secret,
    metadata,
    data,
    configSha256: configDigest(configText(secret.data?.[SECRET_KEYS.config])),
    inputsHash: inputsHashOf(secret),
  };
}

/** The config documents of a Secret's base64 `config` value ('[]' when it has none). */
export function configText(base64: string | undefined): string {
  return base64 === undefined ? '[]' : Buffer.from(base64, 'base64').toString('utf8');
}

/** The text of a Secret's base64 `key` (undefined when absent). */
export const decode = (data: Record<string, string> | undefined, key: string): string | undefined => {
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
  const release = dataField(secret.data, SECRET_KEYS.release);
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
      release: dataField(secret.data, SECRET_KEYS.release) ?? '',
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
  const pool = dataField(secret.data, SECRET_KEYS.pool) ?? (poolName ? `${namespace}/${poolName}` : undefined);
  return pool?.startsWith(`${namespace}/`) && !pool.slice(namespace.length + 1).includes('/') ? pool : undefined;
}

function fromData(
  data: Record<string, string> | undefined,
): Pick<TokenSecret, 'token' | 'rotatedToken' | 'bootstrapToken' | 'rotatedBootstrapToken' | 'joinServer' | 'joinCa'> {
  return {
    token: dataField(data, SECRET_KEYS.token),
    rotatedToken: dataField(data, SECRET_KEYS.rotatedToken),
    bootstrapToken: dataField(data, SECRET_KEYS.bootstrapToken),
    rotatedBootstrapToken: dataField(data, SECRET_KEYS.rotatedBootstrapToken),
    joinServer: dataField(data, SECRET_KEYS.joinServer),
    joinCa: dataField(data, SECRET_KEYS.joinCa),
  };
}

function fromAnnotations(
  annotations: Record<string, string>,
): Pick<TokenSecret, 'issuedAtMs' | 'expiresAtMs' | 'reachedAt' | 'payloadReason' | 'payloadMessage'> {
  const a = (key: string): string | undefined => annotationField(annotations, key);
  return {
    issuedAtMs: timeOf(a(ANNOTATIONS.tokenIssuedAt)),
    expiresAtMs: timeOf(a(ANNOTATIONS.tokenExpiresAt)),
    reachedAt: a(ANNOTATIONS.ignitionReachedAt),
    payloadReason: a(ANNOTATIONS.payloadReason),
    payloadMessage: a(ANNOTATIONS.payloadMessage),
  };
}

/** What changed in an index, for a copy kept elsewhere (a serving thread's, see serving/pool.ts). */
export type IndexChange =
  | { type: 'upsert'; secret: TokenSecret; payload: PayloadState }
  | { type: 'payload'; key: string; payload: PayloadState }
  | { type: 'remove'; key: string }
  | { type: 'unloaded'; key: string; pool: string; hash: string }
  | { type: 'verified'; token: string; claims: TokenClaims };

/** Applies a change of another index to this copy of it. */
export function applyChange(index: TokenIndex, change: IndexChange): void {
  if (change.type === 'upsert') index.upsert(change.secret, change.payload);
  else if (change.type === 'remove') index.remove(change.key);
  else if (change.type === 'unloaded') index.markUnloaded(change);
  else if (change.type === 'verified') index.verified(change.token, change.claims);
  else {
    const entry = index.get(change.key);
    if (entry) index.setPayload(entry, change.payload);
  }
}

/** A token Secret known by its metadata only (a metadata list after a restart): its tokens are not known yet. */
export interface UnloadedSecret {
  key: string;
  /** `namespace/name` of the pool, from the Secret's labels. */
  pool: string;
  hash: string;
}

/** The payload state an update keeps: the same while the Secret's release and config are. */
function keptPayload(previous: TokenSecretEntry | undefined, secret: TokenSecret): PayloadState {
  const same = previous?.secret.release === secret.release && previous.secret.configSha256 === secret.configSha256;
  return same ? previous.payload : { state: 'pending' };
}

const poolHash = (pool: string, hash: string): string => `${pool}\0${hash}`;

/**
 * Keys of token Secrets by the pools they may belong to (`namespace/name`): their owner's and their pool
 * label's. A pool's change then looks at its own Secrets, not at every Secret of every tenant.
 */
export class KeysByPool {
  readonly #keys = new Map<string, Set<string>>();
  readonly #pools = new Map<string, string[]>();

  /** Files the Secret under its pools, and under those only (a Secret relabelled leaves its old pool). */
  set(secret: TokenSecret): void {
    const pools = [...new Set([secret.pool, ...(secret.owner ? [`${secret.namespace}/${secret.owner.name}`] : [])])];
    const before = this.#pools.get(secret.key);
    // Most upserts (a first fetch's stamp, a mint) keep the pools: nothing to move.
    if (before?.length === pools.length && before.every((p, i) => p === pools[i])) return;
    this.delete(secret.key);
    this.#pools.set(secret.key, pools);
    for (const pool of pools) this.#keys.set(pool, (this.#keys.get(pool) ?? new Set()).add(secret.key));
  }

  delete(key: string): void {
    for (const pool of this.#pools.get(key) ?? []) {
      const keys = this.#keys.get(pool);
      keys?.delete(key);
      if (keys?.size === 0) this.#keys.delete(pool);
    }
    this.#pools.delete(key);
  }

  get(namespace: string, name: string): string[] {
    return [...(this.#keys.get(`${namespace}/${name}`) ?? [])];
  }
}

export class TokenIndex {
  readonly #bySecret = new Map<string, TokenSecretEntry>();
  /** Absent in a copy that is only served from (a serving thread's): nothing there asks by pool. */
  readonly #byPool: KeysByPool | undefined;
  readonly #byToken = new Map<string, TokenRef>();
  /** Secrets known by metadata only, by pool and hash (what a verified token names). */
  readonly #unloaded = new Map<string, UnloadedSecret>();
  readonly #unloadedByPoolHash = new Map<string, Set<string>>();
  #observer: ((change: IndexChange) => void) | undefined;

  constructor(opts: { byPool?: boolean } = {}) {
    this.#byPool = opts.byPool === false ? undefined : new KeysByPool();
  }

  /** Follows every change; told of every entry held now first. */
  observe(observer: (change: IndexChange) => void): void {
    this.#observer = observer;
    for (const u of this.#unloaded.values()) observer({ type: 'unloaded', ...u });
    for (const e of this.#bySecret.values()) observer({ type: 'upsert', secret: e.secret, payload: e.payload });
    for (const { token, claims } of this.#byToken.values()) if (claims) observer({ type: 'verified', token, claims });
  }

  /** Records the Secret's current state; returns its entry (payload state kept if the inputs did not change). */
  upsert(secret: TokenSecret, payload?: PayloadState): TokenSecretEntry {
    const previous = this.#bySecret.get(secret.key);
    const dropped = this.#dropTokens(previous);
    this.#dropUnloaded(secret.key);
    const state = payload ?? keptPayload(previous, secret);
    const entry: TokenSecretEntry = { secret, payload: state, served: previous?.served ?? false };
    this.#bySecret.set(secret.key, entry);
    this.#byPool?.set(secret);
    this.#takeTokens(entry, dropped);
    const sameForServing = previous?.payload === state && servesSame(previous.secret, secret);
    if (!sameForServing) this.#observer?.({ type: 'upsert', secret, payload: entry.payload });
    return entry;
  }

  /** The token's signature and claims were verified: a request presenting it need not verify it again. */
  verified(token: string, claims: TokenClaims): void {
    const ref = this.#byToken.get(token);
    if (!ref || ref.claims) return;
    ref.claims = claims;
    this.#observer?.({ type: 'verified', token, claims });
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
    this.#byPool?.delete(key);
    const known = this.#bySecret.delete(key) || this.#unloaded.has(key);
    this.#dropUnloaded(key);
    if (known) this.#observer?.({ type: 'remove', key });
  }

  get(key: string): TokenSecretEntry | undefined {
    return this.#bySecret.get(key);
  }

  /** The token and its entry, if its Secret is live and not past its expiry annotation. */
  lookup(token: string, nowMs: number): TokenRef | undefined {
    const ref = this.#byToken.get(token);
    const expiresAtMs = ref?.entry.secret.expiresAtMs;
    return expiresAtMs !== undefined && expiresAtMs <= nowMs ? undefined : ref;
  }

  /** The entry the token belongs to, if its Secret is live and not past its expiry annotation. */
  find(token: string, nowMs: number): TokenSecretEntry | undefined {
    return this.lookup(token, nowMs)?.entry;
  }

  /** Every entry whose Secret is known with its data. */
  entries(): TokenSecretEntry[] {
    return [...this.#bySecret.values()];
  }

  /**
   * The entries filed under the pool, by owner or by pool label. A label may name a pool of another namespace:
   * whether such a Secret belongs to the pool is the caller's to decide.
   */
  ofPool(namespace: string, name: string): TokenSecretEntry[] {
    if (!this.#byPool) throw new Error('this index keeps no entries by pool');
    return this.#byPool.get(namespace, name).flatMap((key) => this.#bySecret.get(key) ?? []);
  }

  /** Keys of the Secrets known by metadata only. */
  unloadedKeys(): string[] {
    return [...this.#unloaded.keys()];
  }

  /** Tokens a host could present right now (current and rotated of every live Secret). */
  get liveTokens(): number {
    return this.#byToken.size;
  }

  /**
   * The first Secret holding a token keeps it: a Secret that copies another's token cannot take it over. A
   * token it held before keeps its claims, and its join files while the Secret pairs the same material with it.
   */
  #takeTokens(entry: TokenSecretEntry, before: Map<string, TokenRef>): void {
    for (const token of [entry.secret.token, entry.secret.rotatedToken]) {
      if (!token || this.#byToken.has(token)) continue;
      const old = before.get(token);
      const sameJoin = old && joinInputs(old.entry.secret, token) === joinInputs(entry.secret, token);
      this.#byToken.set(token, { token, entry, claims: old?.claims, join: sameJoin ? old.join : undefined });
    }
  }

  /** Drops the entry's tokens; returns what they were. */
  #dropTokens(entry: TokenSecretEntry | undefined): Map<string, TokenRef> {
    const dropped = new Map<string, TokenRef>();
    if (!entry) return dropped;
    for (const t of [entry.secret.token, entry.secret.rotatedToken]) {
      const ref = t === undefined ? undefined : this.#byToken.get(t);
      if (t && ref?.entry.secret.key === entry.secret.key) {
        this.#byToken.delete(t);
        dropped.set(t, ref);
      }
    }
    return dropped;
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
