/**
 * The NodePool reconciler, Cluster API style: get the pool (gone: done) → deletion path (children, then Secrets,
 * then the finalizer) → ensure the finalizer → ordered phases → status, always, at the end. Every write is
 * server-side apply under FIELD_MANAGERS.nodepoolController, and only when the live object differs.
 */
import type * as k8s from '#k8s';
import { ANNOTATIONS, NODEPOOL_FINALIZER } from '../../api/src/keys.js';
import type { NodePool } from '../../api/src/nodepool.js';
import { findRefusal, isNotFound, NotReadyError, TerminalError } from '../../support/src/errors.js';
import type { ReconcileResult } from '../../support/src/queue.js';
import type { Logger } from '../../support/src/logger.js';
import { canonicalJson } from './hash.js';
import { computeStatus } from './status.js';
import { conditionTransitions, type EventRecorder } from './events.js';
import { withKind } from './apply.js';
import type { ChildCache } from './caches.js';
import type { Writer } from './store.js';
import { newScope, runPhases, type Outcome, type PhaseDeps, type Scope } from './phases.js';
import { parseKey } from '../../support/src/object-key.js';

export type ReconcilerDeps = PhaseDeps & { log: Logger; events?: EventRecorder };

/** A phase threw: a refusal goes into the status; a bad spec waits for the next change; anything else backs off. */
function failed(scope: Scope, err: unknown): ReconcileResult {
  const refusal = findRefusal(err);
  if (refusal) scope.obs.refusal = refusal.refusal;
  if (!(err instanceof TerminalError)) throw err instanceof Error ? err : new Error('reconcile failed', { cause: err });
  scope.log.info({ reason: err.reason, err: err.message }, 'The pool needs a spec change');
  return {};
}

/** A new pool's first status may wait while the pool only waits for the token just asked for: the ignition
 * server's answer comes within moments and the status then says everything at once; if it does not come, the
 * retry (after the same moments) writes the wait. Any error, verdict or later status is written at once. */
function firstStatusCanWait(scope: Scope, outcome: Outcome | undefined): boolean {
  return outcome?.allAwaiting === true && scope.pool.status?.conditions === undefined;
}

/** The rollout record is the one part of the status a reconcile decided from and the next one reads back (the
 * gate, the rollout's strategy): the echo of a status with a new record wakes the pool; any other's does not. */
function newRolloutRecord(pool: NodePool, status: NonNullable<NodePool['status']>): boolean {
  return canonicalJson(status.rollout ?? null) !== canonicalJson(pool.status?.rollout ?? null);
}

/** Deletes a child of a deleted pool, unpaused first: a deleted pool goes even when paused, and Cluster API returns
 * early for a paused object, before its deletion. Also a child already being deleted (of a pool deleted paused). */
async function deleteChild(writer: Writer, c: ChildCache, live: k8s.KubernetesObject): Promise<void> {
  const obj = withKind(live, c.apiVersion, c.kind);
  // Gone meanwhile (Cluster API finished it): nothing left to unpark.
  if (obj.metadata?.annotations?.[ANNOTATIONS.capiPaused] !== undefined)
    await writer
      .mergePatch(obj, { metadata: { annotations: { [ANNOTATIONS.capiPaused]: null } } }, c.cache)
      .catch((err: unknown) => {
        if (!isNotFound(err)) throw err;
      });
  if (!obj.metadata?.deletionTimestamp) await writer.remove(obj, c.cache);
}

export class NodePoolReconciler {
  readonly #deps: ReconcilerDeps;

  constructor(deps: ReconcilerDeps) {
    this.#deps = deps;
  }

  async reconcile(key: string): Promise<ReconcileResult> {
    const pool = this.#deps.caches.nodePools.get(parseKey(key));
    if (!pool) return {};
    const log = this.#deps.log.child({ nodePool: key });
    if (pool.metadata.deletionTimestamp) return this.#reconcileDelete(pool, log);
    const live = await this.#ensureFinalizer(pool);
    const scope = newScope(live, log, this.#deps.clock.now());
    let outcome: Outcome | undefined;
    let notReady = false;
    try {
      outcome = await runPhases(scope, this.#deps);
    } catch (err) {
      notReady = err instanceof NotReadyError;
      return failed(scope, err);
    } finally {
      // Whatever happened, the status says what this reconcile saw (a refusal, a verdict, a pending change);
      // a cache not read yet (a quiet requeue) saw nothing, and its status would undo what the last one said.
      if (!notReady && !firstStatusCanWait(scope, outcome)) await this.#writeStatus(scope);
    }
    if (outcome.notReady !== undefined) throw outcome.notReady;
    return outcome.requeueAfterMs === undefined ? {} : { requeueAfterMs: outcome.requeueAfterMs };
  }

  async #ensureFinalizer(pool: NodePool): Promise<NodePool> {
    if (pool.metadata.finalizers?.includes(NODEPOOL_FINALIZER)) return pool;
    const meta = { name: pool.metadata.name, namespace: pool.metadata.namespace, finalizers: [NODEPOOL_FINALIZER] };
    return this.#deps.writer.apply(
      { apiVersion: pool.apiVersion, kind: pool.kind, metadata: meta } as NodePool,
      this.#deps.caches.nodePools,
    );
  }

  /** Status is written only when it differs: a converged pool costs no write. Events follow a written status,
   * so a transition is reported once it is what the API says. */
  async #writeStatus(scope: Scope): Promise<void> {
    const { pool } = scope;
    const status = computeStatus({ observations: scope.obs, now: new Date(scope.now).toISOString() });
    if (canonicalJson(status) === canonicalJson(pool.status ?? {})) return;
    const body = {
      apiVersion: pool.apiVersion,
      kind: pool.kind,
      metadata: { name: pool.metadata.name, namespace: pool.metadata.namespace },
      status,
    } as NodePool;
    try {
      await this.#deps.writer.applyStatus(body, this.#deps.caches.nodePools, newRolloutRecord(pool, status));
    } catch (err) {
      throw new Error('failed to write the NodePool status', { cause: err });
    }
    const transitions = conditionTransitions(pool.status?.conditions ?? [], status.conditions ?? []);
    if (transitions.length > 0) await this.#deps.events?.record(pool, transitions, scope.log);
  }

  /** Children first (CAPI drains and deletes the machines), then the Secrets (tokens stop working), then the finalizer. */
  async #reconcileDelete(pool: NodePool, log: Logger): Promise<ReconcileResult> {
    if (!pool.metadata.finalizers?.includes(NODEPOOL_FINALIZER)) return {};
    const { caches, writer } = this.#deps;
    const ns = pool.metadata.namespace ?? '';
    const children = caches
      .children()
      .map((c) => ({ ...c, obj: c.cache.get({ namespace: ns, name: pool.metadata.name }) }));
    const present = children.filter((c) => c.obj !== undefined);
    for (const c of present) await deleteChild(writer, c, c.obj as k8s.KubernetesObject);
    if (present.length > 0) {
      log.info({ children: present.map((c) => c.kind) }, "Waiting for the pool's children to go");
      return { requeueAfterMs: 2_000 };
    }
    for (const secret of caches.poolSecrets(ns, pool.metadata.name)) {
      await writer.remove(withKind(secret, 'v1', 'Secret'), caches.secrets);
    }
    const meta = { name: pool.metadata.name, namespace: ns, finalizers: [] };
    await writer.apply(
      { apiVersion: pool.apiVersion, kind: pool.kind, metadata: meta } as unknown as NodePool,
      caches.nodePools,
    );
    log.info("Deleted the pool's children and Secrets");
    return {};
  }
}
