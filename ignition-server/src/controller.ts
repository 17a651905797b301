/**
 * The token-Secret controller. Every replica watches the token Secrets (label LABELS.tokenSecret) and the
 * NodePools of the namespaces it is told, acts only on a Secret its NodePool owns and resolved
 * (token-secret-decision.ts: anything else is refused, with a Warning Event, and costs no mint and no
 * generation), keeps the TokenIndex the HTTP app authenticates against, and generates the payloads it serves. Only the leader
 * writes (leader-writes.ts: mint, rotate, expire, the generation outcome). The first successful fetch is recorded by the replica that served it, off the request path (a
 * set-if-absent annotation only that replica can know about), once the burst of boots it came in is over
 * (reached.ts).
 */
import * as k8s from '#k8s';
import { ANNOTATIONS, FIELD_MANAGERS, LABELS, SECRET_KEYS } from '../../api/src/keys.js';
import { pagedList } from '../../support/src/informer.js';
import { createApplier, secretRef, type Applier } from '../../support/src/apply.js';
import { NamespacedInformer } from '../../support/src/namespaced-informer.js';
import type { ReconcileResult, WorkQueue } from '../../support/src/queue.js';
import { createKeyQueue } from '../../support/src/controller.js';
import type { Logger } from '../../support/src/logger.js';
import type { Namespaces } from '../../support/src/config.js';
import type { QueueMetrics } from '../../support/src/metrics.js';
import { isConflict, isNotFound } from '../../support/src/errors.js';
import { realClock, type Clock } from '../../support/src/timers.js';
import type { TokenAuthority } from './tokens.js';
import {
  configText,
  isMetadataOnly,
  KeysByPool,
  readTokenSecret,
  slimTokenSecret,
  type CachedTokenSecret,
  type TokenIndex,
  type TokenSecret,
  type TokenSecretEntry,
} from './token-index.js';
import { GenerationError, NotGeneratedYetError, type ConfigSource, type PayloadStore } from './payload/store.js';
import type { IgnitionMetrics } from './metrics.js';
import { TokenSecretEvents } from './events.js';
import { iso, LeaderWrites, retiredSecret, type Refused } from './leader-writes.js';
import type { GuestJoin } from './join.js';
import { PoolInformers } from './pools.js';
import { decideTokenSecret, type TokenSecretRefusal } from './token-secret-decision.js';
import { keyOf, keyString, parseKey } from '../../support/src/object-key.js';
import { ReachedRecords } from './reached.js';
import { BootstrapRevocations, revocationEndMs } from './revocations.js';

export interface ControllerOptions {
  kubeConfig: k8s.KubeConfig;
  log: Logger;
  authority: TokenAuthority;
  index: TokenIndex;
  store: PayloadStore;
  ttlMs: number;
  /** The namespaces whose token Secrets are watched (one informer each), or 'all' (one cluster-wide informer). */
  namespaces: Namespaces;
  metrics?: IgnitionMetrics;
  queueMetrics?: QueueMetrics;
  /** Mints and revokes the guest bootstrap tokens of Secrets that name their cluster. */
  join?: GuestJoin;
  clock?: Clock;
  /** Retry delay after a release could not be read. */
  retryMs?: number;
  /** At most one Event per (token Secret, reason) in this window. */
  eventWindowMs?: number;
  /** Payload generations of one namespace in flight at once (of GENERATE_WORKERS; default 2). */
  generationsPerNamespace?: number;
}

/** A list of Secrets' metadata only: labels, annotations, resourceVersion; no data. */
const METADATA_LIST = 'application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1';
/**
 * The leader's passes over token Secrets in flight at once. A pass is a few round trips to two apiservers (the
 * guest's bootstrap token, then the Secret's patch) and next to no CPU here, and every new pool waits for its
 * first token: four at a time made a thousand new pools wait in line for over a minute.
 */
const LEADER_WORKERS = 32;
/**
 * Of those, the passes of one namespace at once: a pass waits on the tenant's guest apiserver (up to its request
 * deadline when that hangs), so one tenant's hung guest must leave the others workers to mint with.
 */
const LEADER_WORKERS_PER_NAMESPACE = 24;
/** Payloads generated at once. Every queue serves the namespaces in turn; generation also caps one namespace's share. */
const GENERATE_WORKERS = 4;
/** How long a request for a Secret read on demand waits for its payload (from the cache directory after a restart). */
const LOAD_PAYLOAD_WAIT_MS = 2_000;
/**
 * First fetches are written once none came for this long, or once the oldest waited REACHED_MAX_HOLD_MS: a
 * SIGKILL loses at most that long of them (a stop writes them, waiting at most REACHED_STOP_MS).
 */
const REACHED_QUIET_MS = 2_000;
const REACHED_MAX_HOLD_MS = 30_000;
const REACHED_STOP_MS = 5_000;

export class TokenSecretController {
  readonly #opts: ControllerOptions;
  readonly #clock: Clock;
  readonly #core: k8s.CoreV1Api;
  /** The token Secrets' patches (support/src/apply.ts: no model on either side). */
  readonly #applier: Applier;
  readonly #informer: NamespacedInformer<CachedTokenSecret>;
  readonly #generate: WorkQueue;
  readonly #reached: WorkQueue;
  readonly #firstFetches: ReachedRecords;
  readonly #revocations: BootstrapRevocations;
  readonly #events: TokenSecretEvents;
  readonly #reads: WorkQueue;
  /** Reads of one Secret's data in flight, shared by the background queue and requests waiting on them. */
  readonly #reading = new Map<string, Promise<void>>();
  readonly #pools: PoolInformers;
  /** Token Secrets read and refused, by key: looked at again when their pool changes. */
  readonly #refused = new Map<string, Refused>();
  readonly #refusedByPool = new KeysByPool();
  #writer: WorkQueue | undefined;

  constructor(opts: ControllerOptions) {
    this.#opts = opts;
    this.#clock = opts.clock ?? realClock;
    this.#core = opts.kubeConfig.makeApiClient(k8s.CoreV1Api);
    this.#applier = createApplier(opts.kubeConfig, FIELD_MANAGERS.ignitionServer);
    this.#events = new TokenSecretEvents({
      kubeConfig: opts.kubeConfig,
      clock: this.#clock,
      log: opts.log,
      windowMs: opts.eventWindowMs,
    });
    this.#pools = new PoolInformers({
      kubeConfig: opts.kubeConfig,
      log: opts.log,
      namespaces: opts.namespaces,
      onChange: (namespace, name) => this.#onPool(namespace, name),
    });
    this.#informer = this.#tokenSecrets();
    const generate = (key: string): Promise<ReconcileResult | void> => this.#generatePayload(key);
    this.#generate = this.#queue('ignition-payloads', generate, GENERATE_WORKERS, opts.generationsPerNamespace ?? 2);
    this.#reached = this.#queue('ignition-reached', (key) => this.#recordReached(key));
    this.#firstFetches = new ReachedRecords({
      clock: this.#clock,
      quietMs: REACHED_QUIET_MS,
      maxHoldMs: REACHED_MAX_HOLD_MS,
      release: (keys) => keys.forEach((key) => this.#reached.add(key)),
    });
    this.#revocations = new BootstrapRevocations({
      core: this.#core,
      join: opts.join,
      ttlMs: opts.ttlMs,
      clock: this.#clock,
      log: opts.log,
      queue: (reconcile) => this.#queue('ignition-bootstrap-revoke', reconcile),
    });
    // In the background, two at a time: a request waiting on a Secret reads it at once (load), not in this line.
    this.#reads = this.#queue('ignition-token-secret-reads', (key) => this.#read(key), 2);
  }

  /** The token Secrets of the namespaces served, one informer each. */
  #tokenSecrets(): NamespacedInformer<CachedTokenSecret> {
    const labelSelector = LABELS.tokenSecret;
    const metadataOnly = k8s.setHeaderOptions('Accept', METADATA_LIST);
    return new NamespacedInformer<CachedTokenSecret>({
      kubeConfig: this.#opts.kubeConfig,
      namespaces: this.#opts.namespaces,
      path: '/api/v1/secrets',
      // Token Secrets carry their config (100 KiB or more each): a (re)list reads their metadata only, and a
      // Secret's data is read on its own, in the background or on demand (load). The watch that follows the
      // list carries whole objects: a change brings its data along.
      list: (namespace) =>
        pagedList(async (page) => {
          const list =
            namespace === undefined
              ? await this.#core.listSecretForAllNamespaces({ labelSelector, ...page }, metadataOnly)
              : await this.#core.listNamespacedSecret({ namespace, labelSelector, ...page }, metadataOnly);
          // An empty PartialObjectMetadataList has `items: null`.
          return { ...list, items: list.items ?? [] };
        }, 500)(),
      transform: slimTokenSecret,
      labelSelector,
      log: this.#opts.log,
      onEvent: (secret, event) => this.#onEvent(secret, event),
    });
  }

  /** A token Secret as its namespace's informer holds it. */
  #cached(namespace: string, name: string): CachedTokenSecret | undefined {
    return this.#informer.get({ namespace, name });
  }

  get synced(): boolean {
    return this.#pools.synced && this.#informer.synced;
  }

  /**
   * One of the controller's queues; its failure lines name it (`queue`) and the token Secret (`secret`). Its keys
   * are `namespace/name`, served a namespace at a time in turn: one tenant's thousand Secrets wait behind each
   * other, not in front of another tenant's one.
   */
  #queue(
    name: string,
    reconcile: (key: string) => Promise<ReconcileResult | void>,
    workers = 4,
    maxInFlightPerGroup?: number,
  ): WorkQueue {
    const { log, queueMetrics } = this.#opts;
    const failureMessage = 'Reconcile failed; retrying with backoff';
    return createKeyQueue({
      name,
      log: log.child({ queue: name }),
      clock: this.#clock,
      workers,
      queueMetrics,
      keyField: 'secret',
      failureMessage,
      reconcile,
      groupOf: (key) => parseKey(key).namespace,
      ...(maxInFlightPerGroup === undefined ? {} : { maxInFlightPerGroup }),
    });
  }

  async start(): Promise<void> {
    this.#opts.metrics?.watchLiveTokens(() => this.#opts.index.liveTokens);
    // The pools first: a token Secret is judged against its pool, which must be known by then.
    await this.#pools.start();
    await this.#informer.start();
  }

  async stop(): Promise<void> {
    this.#firstFetches.releaseNow();
    await Promise.race([
      this.#reached.drained(),
      new Promise<void>((r) => this.#clock.setTimeout(() => r(), REACHED_STOP_MS)),
    ]);
    await this.#informer.stop();
    await this.#pools.stop();
    // The writer first: a pass still running hands a failed mint to the revoke queue, which must still take it.
    await this.#writer?.stop();
    await Promise.all([this.#generate.stop(), this.#reached.stop(), this.#revocations.stop(), this.#reads.stop()]);
  }

  /** Starts the leader's writes; returns how to stop them. */
  lead(): () => Promise<void> {
    const writes = new LeaderWrites({
      ...this.#opts,
      core: this.#core,
      applier: this.#applier,
      events: this.#events,
      clock: this.#clock,
      current: (key) => this.#current(key),
      refused: (key) => this.#refused.get(key),
      forgetBootstrap: (key) => this.#forgetBootstrap(key),
      unmint: (mint) => this.#revocations.failedMint(mint),
    });
    const reconcile = (key: string): Promise<ReconcileResult | void> => writes.reconcile(key);
    const writer = this.#queue('ignition-token-secrets', reconcile, LEADER_WORKERS, LEADER_WORKERS_PER_NAMESPACE);
    this.#writer = writer;
    for (const entry of this.#opts.index.entries()) writer.add(entry.secret.key);
    for (const key of this.#refused.keys()) writer.add(key);
    return async () => {
      this.#writer = undefined;
      await writer.stop();
    };
  }

  /** A payload was served for the entry at `atMs`: record the first fetch, off the request path and after the burst. */
  served(entry: TokenSecretEntry, atMs: number): void {
    if (!entry.secret.reachedAt) this.#firstFetches.add(entry.secret.key, atMs);
  }

  /** The entry's payload vanished from memory and disk: generate it again. */
  regenerate(entry: TokenSecretEntry): void {
    this.#opts.index.setPayload(entry, { state: 'pending' });
    this.#generate.add(entry.secret.key);
  }

  /**
   * Reads the token Secrets of a pool and hash that are known by their metadata only, so a token of theirs is
   * known; then waits (a little) for their payloads, which after a restart come back from the cache directory.
   */
  async load(pool: string, hash: string): Promise<void> {
    const keys = this.#opts.index.unloadedFor(pool, hash);
    await Promise.all(keys.map((key) => this.#readOnce(key)));
    // A payload another replica generates is not waited for here: its requests answer 511 until it is shared.
    const ready = Promise.all(
      keys.map((key) =>
        this.#generatePayload(key).catch((err: unknown) => {
          if (!(err instanceof NotGeneratedYetError)) throw err;
        }),
      ),
    );
    await Promise.race([ready, new Promise<void>((r) => this.#clock.setTimeout(() => r(), LOAD_PAYLOAD_WAIT_MS))]);
  }

  #onEvent(secret: CachedTokenSecret, event: string): void {
    const key = keyString(keyOf(secret));
    if (event !== 'delete' && isMetadataOnly(secret)) return this.#onMetadata(key, secret);
    const parsed = event === 'delete' ? undefined : readTokenSecret(secret);
    if (!parsed) return event === 'delete' ? this.#onDeleted(key) : this.#onUnusable(key);
    this.#admit(parsed);
  }

  /** Indexes a token Secret its pool owns and resolved, with that pool's cluster; refuses any other. */
  #admit(secret: TokenSecret): void {
    const pool = secret.owner && this.#pools.get(secret.namespace, secret.owner.name);
    const decision = decideTokenSecret(secret, pool);
    if (!decision.accepted) return this.#refuse(secret, decision);
    this.#refused.delete(secret.key);
    this.#refusedByPool.delete(secret.key);
    const entry = this.#opts.index.upsert({ ...secret, pool: decision.pool, cluster: decision.cluster });
    if (entry.payload.state === 'pending') this.#generate.add(secret.key);
    this.#writer?.add(secret.key);
    this.#verifyTokens(secret);
  }

  /**
   * Verifies a Secret's tokens once, as they are indexed, and hands the serving threads their claims: a host's
   * first fetch then verifies nothing (in a boot storm every fetch is a host's first). A token that does not
   * verify is left to the request, which refuses it.
   */
  #verifyTokens(secret: TokenSecret): void {
    const { index, authority } = this.#opts;
    for (const token of [secret.token, secret.rotatedToken]) {
      if (!token || index.lookup(token, this.#clock.now())?.claims) continue;
      void authority.verify(token).then((claims) => claims && index.verified(token, claims));
    }
  }

  /** Its tokens stop working now; nothing is minted or generated for it; the leader says why in an Event. */
  #refuse(secret: TokenSecret, decision: { reason: TokenSecretRefusal; message: string }): void {
    const { key } = secret;
    const before = this.#refused.get(key);
    const same = before?.reason === decision.reason;
    const { reason, message } = decision;
    const refused = { secret, reason, message, sinceMs: same ? before.sinceMs : this.#clock.now() };
    this.#refused.set(key, refused);
    this.#refusedByPool.set(secret);
    this.#opts.index.remove(key);
    // A retired Secret's expiry may have moved: the leader looks again (it deletes at the expiry).
    if (same) return void (reason === 'Retired' && this.#writer?.add(key));
    this.#writer?.add(key);
    // Every release change of a pool retires a Secret: that is no sign of a hand-written one.
    if (reason === 'Retired')
      return this.#opts.log.info({ secret: key, message }, 'A retired token Secret: its tokens are refused');
    this.#opts.metrics?.refusal(reason);
    this.#opts.log.warn(
      { secret: key, reason, message },
      'Refused a token Secret: no token is minted or served for it and no payload generated',
    );
  }

  /** A pool changed: the verdicts on the token Secrets it owns (or that name it) may change. */
  #onPool(namespace: string, name: string): void {
    const ofPool = (s: TokenSecret): boolean =>
      s.namespace === namespace && (s.owner?.name === name || s.pool === `${namespace}/${name}`);
    for (const { secret } of this.#opts.index.ofPool(namespace, name)) {
      if (!ofPool(secret)) continue;
      const decision = decideTokenSecret(secret, this.#pools.get(namespace, name));
      if (!decision.accepted) this.#refuse(secret, decision);
    }
    for (const key of this.#refusedByPool.get(namespace, name)) {
      const secret = this.#refused.get(key)?.secret;
      if (secret && ofPool(secret)) this.#admit(secret);
    }
  }

  /** Deleted: its tokens stop working now, and so do its bootstrap tokens. */
  #onDeleted(key: string): void {
    this.#forgetBootstrap(key);
    this.#forget(key);
  }

  /** No longer a usable token Secret: its tokens stop working now. */
  #onUnusable(key: string): void {
    this.#forget(key);
    this.#opts.log.warn(
      { secret: key },
      'Token Secret lacks pool, hash or release, or names a pool of another namespace: ignored',
    );
  }

  #forget(key: string): void {
    this.#refused.delete(key);
    this.#refusedByPool.delete(key);
    this.#opts.index.remove(key);
    this.#writer?.forget(key);
    this.#reads.forget(key);
  }

  /** A listed Secret (metadata only): the same as the one read before, or one whose data is to be read. */
  #onMetadata(key: string, secret: CachedTokenSecret): void {
    const meta = secret.metadata ?? {};
    const known = this.#opts.index.get(key);
    if (known && known.secret.resourceVersion === meta.resourceVersion) {
      this.#writer?.add(key);
      return;
    }
    const poolName = meta.labels?.[LABELS.nodePool];
    const hash = meta.labels?.[LABELS.configHash];
    if (!poolName || !hash) {
      this.#opts.index.remove(key);
      return;
    }
    // A Secret read before and changed while the watch was down keeps serving what it held until it is read
    // again: its deletion is a delete event, and a rotation keeps the previous token valid.
    if (!known) this.#opts.index.markUnloaded({ key, pool: `${meta.namespace}/${poolName}`, hash });
    this.#reads.add(key);
  }

  async #read(key: string): Promise<void> {
    const { namespace, name } = parseKey(key);
    const cached = this.#cached(namespace, name);
    const known = this.#opts.index.get(key);
    if (!cached || (known && known.secret.resourceVersion === cached.metadata?.resourceVersion)) return;
    await this.#readOnce(key);
  }

  /** Reads one Secret's data (one read at a time per Secret) and indexes it as a watch event would. */
  #readOnce(key: string): Promise<void> {
    let reading = this.#reading.get(key);
    if (!reading) {
      reading = this.#readSecret(key).finally(() => this.#reading.delete(key));
      this.#reading.set(key, reading);
    }
    return reading;
  }

  async #readSecret(key: string): Promise<void> {
    const { namespace, name } = parseKey(key);
    const before = this.#opts.index.get(key)?.secret.resourceVersion;
    let secret: k8s.V1Secret;
    try {
      secret = await this.#core.readNamespacedSecret({ name, namespace });
    } catch (err) {
      if (isNotFound(err)) return;
      throw new Error(`failed to read token Secret ${key}`, { cause: err });
    }
    // Gone meanwhile (a delete event), or already newer from the watch: the read has nothing to add.
    if (!this.#cached(namespace, name) || this.#opts.index.get(key)?.secret.resourceVersion !== before) return;
    this.#onEvent(slimTokenSecret(secret), 'update');
  }

  /** The leader deletes a deleted Secret's bootstrap tokens from the guest (the guest's tokencleaner would at expiry). */
  #forgetBootstrap(key: string): void {
    const secret = this.#opts.index.get(key)?.secret ?? retiredSecret(this.#refused.get(key), this.#pools);
    const tokens = [secret?.bootstrapToken, secret?.rotatedBootstrapToken].filter((t): t is string => t !== undefined);
    if (!this.#writer || !secret?.cluster || tokens.length === 0) return;
    const expiresAtMs = revocationEndMs(secret.issuedAtMs, this.#opts.ttlMs, this.#clock.now());
    this.#revocations.secretDeleted(key, { namespace: secret.namespace, cluster: secret.cluster, tokens, expiresAtMs });
  }

  async #generatePayload(key: string): Promise<ReconcileResult | void> {
    const entry = this.#opts.index.get(key);
    if (!entry || entry.payload.state === 'ready') return;
    try {
      const payload = await this.#opts.store.ensure(entry.secret.release, this.#configOf(entry.secret));
      if (this.#opts.index.get(key) === entry) this.#opts.index.setPayload(entry, { state: 'ready', key: payload.key });
    } catch (err) {
      // Another replica generates it (shared store): pending until it is there; the queue asks again quietly.
      if (err instanceof NotGeneratedYetError) throw err;
      return this.#generationFailed(key, entry, err);
    }
    this.#writer?.add(key);
  }

  #generationFailed(key: string, entry: TokenSecretEntry, err: unknown): ReconcileResult | void {
    const failure =
      err instanceof GenerationError ? err : new GenerationError('ReleaseUnavailable', (err as Error).message);
    this.#opts.index.setPayload(entry, { state: 'failed', reason: failure.reason, message: failure.message });
    this.#opts.log.warn({ secret: key, reason: failure.reason, message: failure.message }, 'Payload generation failed');
    this.#writer?.add(key);
    if (failure.reason === 'ReleaseUnavailable') return { requeueAfterMs: this.#opts.retryMs ?? 15_000 };
  }

  /** The Secret's config documents, read from the apiserver when (and only when) a generation needs them. */
  #configOf(secret: TokenSecret): ConfigSource {
    const { namespace, name } = secret;
    return {
      sha256: secret.configSha256,
      read: async () => {
        this.#opts.log.debug({ secret: secret.key }, 'Reading the config of a token Secret to generate its payload');
        return configText((await this.#core.readNamespacedSecret({ name, namespace })).data?.[SECRET_KEYS.config]);
      },
    };
  }

  /** The Secret as the informer last saw it, its data read first when only its metadata is known. */
  async #current(key: string): Promise<TokenSecret | undefined> {
    const { namespace, name } = parseKey(key);
    const cached = this.#cached(namespace, name);
    if (!cached) return undefined;
    if (this.#opts.index.get(key)?.secret.resourceVersion !== cached.metadata?.resourceVersion)
      await this.#readOnce(key);
    const secret = this.#opts.index.get(key)?.secret;
    return secret?.resourceVersion === cached.metadata?.resourceVersion ? secret : undefined;
  }

  /**
   * Stamps the Secret with the time of its first fetch (kept until written: a failed write is retried). The write
   * is conditional on the Secret as indexed: another replica, or a late report of this one, may have stamped it
   * since, and the first stamp stands. A conflict reads the Secret again and tries once more on what it finds.
   */
  async #recordReached(key: string, again = true): Promise<void> {
    const at = this.#firstFetches.at(key);
    const entry = this.#opts.index.get(key);
    if (at === undefined || !entry || entry.secret.reachedAt) return this.#firstFetches.done(key);
    const { namespace, name, resourceVersion } = entry.secret;
    const body = { metadata: { resourceVersion, annotations: { [ANNOTATIONS.ignitionReachedAt]: iso(at) } } };
    try {
      await this.#applier.mergePatch(secretRef({ namespace, name }), body);
    } catch (err) {
      if (isConflict(err) && again) {
        await this.#readOnce(key);
        return this.#recordReached(key, false);
      }
      if (!isNotFound(err)) throw new Error('failed to record the first Ignition fetch', { cause: err });
    }
    this.#firstFetches.done(key);
  }
}
