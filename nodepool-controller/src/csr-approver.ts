/**
 * The CSR approver: Kindling's answer to a kubelet's TLS bootstrap in each guest cluster, as HyperShift runs a
 * machine approver beside its ignition server. It lives in the nodepool-controller because everything a decision
 * needs is already there: this deployable creates the pools' Machines and keeps them in an informer cache by
 * pool label (Caches.machines), it already reaches the guest clusters through their `<cluster>-kubeconfig`
 * Secrets, and it already records Events on the management cluster. Another deployable would have to watch
 * every pool Machine a second time and be granted the Machine patch it needs to record an approval.
 *
 * Per guest cluster (one GuestClusters session each, opened and closed with the kubeconfig Secret): informers
 * on the CertificateSigningRequests of Kindling's signers only, kept slim (csr-guest.ts); the Node a decision
 * asks about is read when it is made (csr-nodes.ts), not watched.
 * Pending kubelet CSRs are queued by key (`<namespace>/<cluster>/<csr>`), one reconcile per key at a time, the
 * guest clusters served in turn (one guest's flood waits behind itself, not in front of another guest's kubelet),
 * decided from the caches by decideCsr, and approved or denied through the `/approval` subresource. A guest with
 * more undecided requests of the last hour than one per live Machine and maxPendingPerGuest more (machine-approver's
 * `len(machines) + maxPending`) is decided in batches of its oldest until it is under again (csr-guest.ts
 * weighBacklog), and a rate-limited Warning Event on its NodePools says so. A client CSR's approval is first
 * recorded on its Machine (ANNOTATIONS.approvedClientCsr, written with the Machine's resourceVersion so two CSRs
 * racing for one Machine cannot both win): a Machine joins once, and of rival CSRs for it the decision picks the
 * oldest, whatever order they are queued in. A denied bootstrap client CSR about a Machine of the requester's own pool and cluster
 * leaves its reason on that Machine (ANNOTATIONS.joinFailure, for the pool's AllNodesJoined condition; the
 * decision's `ofJoin`); an approval clears it. A denial about another pool's or cluster's Machine writes nothing
 * on it: its Event goes on the requester's NodePool.
 *
 * It also applies the guest side of the bootstrap (guest-setup.ts) into every guest cluster a NodePool names.
 */
import * as k8s from '#k8s';
import { Counter, type Registry } from 'prom-client';
import { CAPI_API_VERSION, type Machine } from '../../api/src/capi.js';
import { ANNOTATIONS, FIELD_MANAGERS } from '../../api/src/keys.js';
import type { NodePool } from '../../api/src/nodepool.js';
import { createApplier, toModel, type Applier } from '../../support/src/apply.js';
import { API_REQUEST_TIMEOUT_MS, makeApiClient } from '../../support/src/kubeconfig.js';
import { isConflict, isNotFound, NotReadyError } from '../../support/src/errors.js';
import { clusterKey, GuestClusters, type GuestCluster } from '../../support/src/guest-clusters.js';
import { EventRateLimiter } from '../../support/src/events.js';
import type { Namespaces } from '../../support/src/config.js';
import type { Logger } from '../../support/src/logger.js';
import type { QueueMetrics } from '../../support/src/metrics.js';
import type { ReconcileResult, WorkQueue } from '../../support/src/queue.js';
import { createKeyQueue, type KeyQueueOptions } from '../../support/src/controller.js';
import { realClock, type Clock } from '../../support/src/timers.js';
import type { Caches } from './caches.js';
import { isDecided, KUBELET_CLIENT_SIGNER, KUBELET_SERVING_SIGNER, type Decision } from './csr-decision.js';
import type { EventRecorder, EventSubject, Transition } from './events.js';
import { GuestCsrs, PendingCap, type Backlog } from './csr-guest.js';
import { isDeleting } from './csr-rules.js';
import { decideWithNodes } from './csr-nodes.js';
import { desiredGuestSetup } from './guest-setup.js';
import { RESOURCES } from '../../api/src/resources.js';

const CSR_QUEUE = 'csr-approver';
const GUEST_SETUP_QUEUE = 'guest-setup';

export interface CsrApproverOptions {
  /** The management cluster. */
  kubeConfig: k8s.KubeConfig;
  /** The tenant namespaces whose guest kubeconfig Secrets are watched (--namespaces). */
  namespaces: Namespaces;
  log: Logger;
  caches: Caches;
  events: EventRecorder;
  registry?: Registry;
  queueMetrics?: QueueMetrics;
  clock?: Clock;
  /** How long a kubelet's CSR may wait for its Machine's addresses (or its Node) before it is denied. */
  graceMs?: number;
  /** How often the guest set-up is applied again, healing a binding someone removed. */
  setupResyncMs?: number;
  requestTimeoutMs?: number;
  workers?: number;
  /**
   * Undecided CSRs a guest may have beyond one per live Machine before it is decided in batches of its oldest
   * (--max-pending-csrs-per-guest).
   */
  maxPendingPerGuest?: number;
  /** At most one Event per subject and reason in this window. */
  eventWindowMs?: number;
}

/** The least time between two weighings of a guest's backlog (#weighSoon). */
const WEIGH_EVERY_MS = 1_000;

interface Session {
  cluster: GuestCluster;
  csrs: GuestCsrs;
  /**
   * Its standing against its pending cap. Over it, the CSRs the cap may not decide yet are dropped from the queue,
   * to be queued again with a later batch or once the guest is under.
   */
  cap: PendingCap;
  core: k8s.CoreV1Api;
  certificates: k8s.CertificatesV1Api;
  applier: Applier;
}

type Approved = Extract<Decision, { action: 'approve' }>;
type Denied = Extract<Decision, { action: 'deny' }>;

const KINDLING_SIGNERS = new Set([KUBELET_CLIENT_SIGNER, KUBELET_SERVING_SIGNER]);
const DEFAULT_MAX_PENDING_PER_GUEST = 100;
/** Of the CSR queue's workers, what one guest cluster may hold at once. */
const WORKERS_PER_GUEST = 2;
const MERGE_PATCH = 'application/merge-patch+json';

const isCandidate = (csr: k8s.V1CertificateSigningRequest): boolean =>
  KINDLING_SIGNERS.has(csr.spec.signerName) && !isDecided(csr);

/** Whether the guest has a Node of this name: one GET, a 404 is no; any other failure retries the CSR. */
async function nodeExists(core: k8s.CoreV1Api, name: string): Promise<boolean> {
  try {
    await core.readNode({ name });
    return true;
  } catch (err) {
    if (isNotFound(err)) return false;
    throw new Error(`failed to read guest Node ${name}`, { cause: err });
  }
}

function splitKey(key: string): { cluster: string; name: string } {
  const i = key.lastIndexOf('/');
  return { cluster: key.slice(0, i), name: key.slice(i + 1) };
}

export class CsrApprover {
  readonly queue: WorkQueue;
  readonly setupQueue: WorkQueue;
  readonly decisions: Counter<'decision' | 'reason'>;
  #opts: CsrApproverOptions;
  #clock: Clock;
  #timeoutMs: number;
  #clusters: GuestClusters<Session>;
  #machines: k8s.CustomObjectsApi;
  #eventLimiter: EventRateLimiter;

  constructor(opts: CsrApproverOptions) {
    this.#opts = opts;
    this.#clock = opts.clock ?? realClock;
    this.#timeoutMs = opts.requestTimeoutMs ?? API_REQUEST_TIMEOUT_MS;
    this.#machines = makeApiClient(opts.kubeConfig, k8s.CustomObjectsApi, this.#timeoutMs);
    this.decisions = new Counter({
      name: 'kindling_csr_decisions_total',
      help: 'Kubelet certificate signing requests approved or denied by Kindling, by decision and reason.',
      labelNames: ['decision', 'reason'] as const,
      registers: opts.registry ? [opts.registry] : [],
    });
    this.#eventLimiter = new EventRateLimiter(this.#clock, opts.eventWindowMs ?? 60_000);
    this.queue = createKeyQueue({
      ...this.#queueOptions(CSR_QUEUE, opts.workers ?? 4),
      reconcile: (key) => this.#reconcileCsr(key),
      groupOf: (key) => splitKey(key).cluster,
      maxInFlightPerGroup: WORKERS_PER_GUEST,
    });
    this.setupQueue = createKeyQueue({
      ...this.#queueOptions(GUEST_SETUP_QUEUE, 2),
      reconcile: (key) => this.#reconcileSetup(key),
    });
    this.#clusters = new GuestClusters<Session>({
      kubeConfig: opts.kubeConfig,
      namespaces: opts.namespaces,
      log: opts.log,
      create: (cluster) => this.#createSession(cluster),
      start: async (s) => {
        await s.csrs.start();
      },
      close: async (s) => {
        await s.csrs.stop();
      },
      onOpened: (cluster) => {
        this.setupQueue.add(cluster.key);
        const session = this.#clusters.get(cluster.key);
        if (!session) return;
        this.#weigh(session);
        for (const csr of session.csrs.list()) this.#enqueue(cluster.key, csr);
      },
    });
  }

  /** True once every open session's informers have synced (a session still opening is not counted). */
  get synced(): boolean {
    return this.#clusters.open().every(({ session }) => session.csrs.synced);
  }

  async start(): Promise<void> {
    await this.#clusters.start();
  }

  async stop(): Promise<void> {
    await Promise.all([this.queue.stop(), this.setupQueue.stop()]);
    await this.#clusters.stop();
  }

  /** A NodePool appeared or changed: its guest cluster needs the bootstrap set-up. */
  poolChanged(pool: NodePool): void {
    this.setupQueue.add(clusterKey(pool.metadata.namespace ?? '', pool.spec.clusterName));
  }

  /** What the approver's two queues share; their failure lines name them (`queue`). */
  #queueOptions(name: string, workers: number): Omit<KeyQueueOptions, 'reconcile'> {
    const { log, queueMetrics } = this.#opts;
    return { name, log: log.child({ queue: name }), clock: this.#clock, workers, queueMetrics };
  }

  #createSession(cluster: GuestCluster): Session {
    const certificates = makeApiClient(cluster.kubeConfig, k8s.CertificatesV1Api, this.#timeoutMs);
    const core = makeApiClient(cluster.kubeConfig, k8s.CoreV1Api, this.#timeoutMs);
    const csrs = new GuestCsrs({
      kubeConfig: cluster.kubeConfig,
      certificates,
      log: cluster.log,
      clock: this.#opts.clock,
      onEvent: (csr, event) => {
        if (event === 'delete') this.queue.forget(`${cluster.key}/${csr.metadata?.name ?? ''}`);
        else this.#enqueue(cluster.key, csr);
        this.#weighSoon(session);
      },
    });
    const applier = createApplier(cluster.kubeConfig, FIELD_MANAGERS.nodepoolController, this.#timeoutMs);
    const session: Session = { cluster, csrs, core, certificates, applier, cap: new PendingCap() };
    return session;
  }

  #enqueue(cluster: string, csr: k8s.V1CertificateSigningRequest): void {
    const session = this.#clusters.get(cluster);
    const name = csr.metadata?.name ?? '';
    if (isCandidate(csr) && (session?.cap.mayDecide(name) ?? true)) this.queue.add(`${cluster}/${name}`);
  }

  get #maxPending(): number {
    return this.#opts.maxPendingPerGuest ?? DEFAULT_MAX_PENDING_PER_GUEST;
  }

  /**
   * Weighs the guest's backlog once the events of this tick are in (a relist delivers every CSR at once), and at
   * most once every WEIGH_EVERY_MS: a weighing reads all the guest's pending CSRs, and a guest admin can make tens
   * of thousands, each an event. A reconcile that finds it due weighs first (#mayDecide).
   */
  #weighSoon(session: Session): void {
    const wait = session.cap.changed(this.#clock.now(), WEIGH_EVERY_MS);
    if (wait === undefined) return;
    const weigh = (): void => void (session.cap.unweighed && this.#weigh(session));
    if (wait > 0) this.#clock.setTimeout(weigh, wait);
    else queueMicrotask(weigh);
  }

  /**
   * Parks the guest when it goes over its cap, queues each new batch of its oldest CSRs while it is, and unparks
   * it (queueing every pending CSR again) once it is under.
   */
  #weigh(session: Session): void {
    // Not open yet (onOpened weighs it), or closed.
    if (this.#clusters.get(session.cluster.key) !== session) return;
    const step = session.cap.weigh({
      pending: session.csrs.pending(),
      liveMachines: this.#liveMachines(session),
      allowance: this.#maxPending,
      now: this.#clock.now(),
    });
    const { key, log } = session.cluster;
    if (step.change === 'parked')
      this.#warnOverCap(session, step.backlog).catch((err: unknown) =>
        log.warn({ err }, 'Failed to report too many pending kubelet CSRs'),
      );
    if (step.change === 'unparked')
      log.info({ pending: step.backlog.counted, max: step.backlog.cap }, 'Pending kubelet CSRs under the cap again');
    if (step.queue === 'all') for (const csr of session.csrs.list()) this.#enqueue(key, csr);
    else for (const name of step.queue) this.queue.add(`${key}/${name}`);
  }

  /** Whether the guest's cap lets this CSR be decided now, its backlog weighed first if it changed and is due. */
  #mayDecide(session: Session, name: string): boolean {
    if (session.cap.due(this.#clock.now(), WEIGH_EVERY_MS)) this.#weigh(session);
    return session.cap.mayDecide(name);
  }

  /** The guest cluster's Machines that are not being deleted: each may have a kubelet asking for a certificate. */
  #liveMachines(session: Session): number {
    const { namespace, name } = session.cluster;
    return this.#opts.caches.machines.list(namespace, (m) => m.spec.clusterName === name && !isDeleting(m)).length;
  }

  /** Over the cap: the guest is decided a batch of its oldest at a time, and its pools hear why (rate-limited). */
  async #warnOverCap(session: Session, backlog: Backlog): Promise<void> {
    const { namespace, name, log } = session.cluster;
    const { counted, cap } = backlog;
    log.warn(
      { pending: counted, max: cap },
      'Too many pending kubelet CSRs: deciding the oldest first, a batch at a time',
    );
    const t: Transition = {
      type: 'Warning',
      reason: 'TooManyPendingCSRs',
      message: `guest cluster ${name} has ${counted} kubelet certificate signing requests pending from the last hour, more than the ${cap} allowed (one per live Machine and ${this.#maxPending} more): they are decided ${cap} at a time, oldest first, until it has at most ${cap} (delete the ones no kubelet made)`,
    };
    for (const pool of this.#opts.caches.nodePools.list(namespace, (p) => p.spec.clusterName === name))
      await this.#recordLimited(
        {
          apiVersion: pool.apiVersion ?? 'kindling.dev/v1beta1',
          kind: pool.kind ?? 'NodePool',
          metadata: pool.metadata,
        },
        t,
        log,
      );
  }

  /** Events of one subject and reason at most once per window: a guest's flood of denials is one Event. */
  async #recordLimited(subject: EventSubject, t: Transition, log: Logger, why = ''): Promise<void> {
    const { namespace = '', name = '' } = subject.metadata;
    const key = `${subject.kind}/${namespace}/${name}/${t.reason}/${why}`;
    if (this.#eventLimiter.allow(key)) await this.#opts.events.record(subject, [t], log);
  }

  /** Applies the guest set-up when a NodePool names the cluster, and again every setupResyncMs. */
  async #reconcileSetup(key: string): Promise<ReconcileResult> {
    const session = this.#clusters.get(key);
    // Not open (yet): onOpened queues the cluster again.
    if (!session) return {};
    const { namespace, name } = session.cluster;
    const named = this.#opts.caches.nodePools.list(namespace, (p) => p.spec.clusterName === name);
    if (named.length === 0) return {};
    try {
      for (const obj of desiredGuestSetup()) await session.applier.apply(obj);
    } catch (err) {
      throw new Error(`failed to apply the bootstrap set-up to guest cluster ${key}`, { cause: err });
    }
    session.cluster.log.debug('Applied the guest bootstrap set-up');
    return { requeueAfterMs: this.#opts.setupResyncMs ?? 600_000 };
  }

  async #reconcileCsr(key: string): Promise<ReconcileResult> {
    const { cluster, name } = splitKey(key);
    const session = this.#clusters.get(cluster);
    if (!session) return {};
    const csr = session.csrs.get(name);
    if (!csr || !isCandidate(csr)) return {};
    // Not in the batch: queued again with a later one, or when the guest is under its cap.
    if (!this.#mayDecide(session, name)) return {};
    const log = session.cluster.log.child({ csr: name });
    const { namespace } = session.cluster;
    const decision = await decideWithNodes(
      {
        csr,
        cluster: { namespace, name: session.cluster.name },
        machines: this.#opts.caches.machines.list(namespace, () => true),
        csrNamed: (other) => session.csrs.get(other),
        guestCsrs: () => session.csrs.list(),
        now: this.#clock.now(),
        graceMs: this.#opts.graceMs ?? 120_000,
      },
      (node) => nodeExists(session.core, node),
    );
    // A CSR left for others stops counting against the cap; one looked at again may count again.
    if (session.csrs.setIgnored(csr, decision.action === 'ignore')) this.#weighSoon(session);
    switch (decision.action) {
      case 'ignore':
        log.debug({ why: decision.why }, 'Not a Kindling request: left for others');
        return {};
      case 'wait':
        log.info({ reason: decision.reason, detail: decision.message }, 'Kubelet CSR waits');
        return { requeueAfterMs: decision.retryAfterMs };
      case 'approve':
        await this.#approve(session, csr, decision, log);
        return {};
      default:
        await this.#deny(session, csr, decision, log);
        return {};
    }
  }

  async #approve(session: Session, csr: k8s.V1CertificateSigningRequest, d: Approved, log: Logger): Promise<void> {
    if (d.claim !== undefined) await this.#claim(d.machine, d.claim);
    log.info({ reason: d.reason, machine: d.machine.metadata.name }, 'Approving kubelet CSR');
    if (!(await this.#setCondition(session, csr, { type: 'Approved', reason: d.reason, message: d.message }))) {
      // The CSR went before it was approved: it issued nothing, so the Machine may still join with another.
      if (d.claim !== undefined) await this.#patchMachine(d.machine, { [ANNOTATIONS.approvedClientCsr]: null });
      return;
    }
    this.decisions.inc({ decision: 'approved', reason: d.reason });
    await this.#record(session, csr, d, log);
  }

  async #deny(session: Session, csr: k8s.V1CertificateSigningRequest, d: Denied, log: Logger): Promise<void> {
    log.info({ reason: d.reason, detail: d.message }, 'Denying kubelet CSR');
    const failure = `client certificate request ${csr.metadata?.name ?? ''} denied (${d.reason}): ${d.message}`;
    if (d.ofJoin && d.machine && d.machine.metadata.annotations?.[ANNOTATIONS.joinFailure] !== failure)
      await this.#patchMachine(d.machine, { [ANNOTATIONS.joinFailure]: failure });
    if (!(await this.#setCondition(session, csr, { type: 'Denied', reason: d.reason, message: d.message }))) return;
    this.decisions.inc({ decision: 'denied', reason: d.reason });
    await this.#record(session, csr, d, log);
  }

  /**
   * Records on the Machine which CSR it joins with, before approving. The write carries the resourceVersion the
   * decision was made on: a concurrent claim (another CSR for the same Machine) makes it fail with a conflict,
   * and the retry decides again from the claimed Machine.
   */
  async #claim(machine: Machine, claim: string): Promise<void> {
    try {
      await this.#patchMachine(
        machine,
        { [ANNOTATIONS.approvedClientCsr]: claim, [ANNOTATIONS.joinFailure]: null },
        machine.metadata.resourceVersion,
      );
    } catch (err) {
      // Cluster API writes a booting Machine's status often: a conflict is usually its write, not a rival claim.
      // Decide again as soon as the cache has the newer Machine, rather than after a growing backoff.
      if (isConflict(err))
        throw new NotReadyError(`Machine ${machine.metadata.name} changed since the decision; deciding again`, 250, {
          cause: err,
        });
      throw err;
    }
  }

  /** Merge-patches annotations (null removes one), with a resourceVersion precondition when given. */
  async #patchMachine(
    machine: Machine,
    annotations: Record<string, string | null>,
    resourceVersion?: string,
  ): Promise<void> {
    const body = { metadata: { ...(resourceVersion === undefined ? {} : { resourceVersion }), annotations } };
    const params = {
      ...RESOURCES.machines,
      namespace: machine.metadata.namespace ?? '',
      name: machine.metadata.name,
      body,
      fieldManager: FIELD_MANAGERS.nodepoolController,
    };
    try {
      const live = (await this.#machines.patchNamespacedCustomObject(
        params,
        k8s.setHeaderOptions('Content-Type', MERGE_PATCH),
      )) as Machine;
      this.#opts.caches.machines.remember(live);
    } catch (err) {
      throw new Error(`failed to annotate Machine ${machine.metadata.namespace ?? ''}/${machine.metadata.name}`, {
        cause: err,
      });
    }
  }

  /** Adds the condition through the `/approval` subresource; false when the CSR is gone. */
  async #setCondition(
    session: Session,
    csr: k8s.V1CertificateSigningRequest,
    c: { type: 'Approved' | 'Denied'; reason: string; message: string },
  ): Promise<boolean> {
    const name = csr.metadata?.name ?? '';
    const condition = {
      ...c,
      status: 'True',
      message: c.message.slice(0, 1024),
      lastUpdateTime: new Date(this.#clock.now()),
    };
    // The resourceVersion the decision was made on: a CSR changed meanwhile (decided by someone else) conflicts.
    const body = toModel<k8s.V1CertificateSigningRequest>({
      apiVersion: 'certificates.k8s.io/v1',
      kind: 'CertificateSigningRequest',
      metadata: { name, resourceVersion: csr.metadata?.resourceVersion },
      spec: csr.spec,
      status: { conditions: [...(csr.status?.conditions ?? []), condition] },
    });
    try {
      await session.certificates.replaceCertificateSigningRequestApproval({
        name,
        body,
        fieldManager: FIELD_MANAGERS.nodepoolController,
      });
      return true;
    } catch (err) {
      if (isNotFound(err)) return false;
      throw new Error(`failed to mark CSR ${name} ${c.type} in guest cluster ${session.cluster.key}`, { cause: err });
    }
  }

  /** An Event on the Machine when the decision names one, else on the requester's NodePool. Best effort. */
  async #record(
    session: Session,
    csr: k8s.V1CertificateSigningRequest,
    d: Approved | Denied,
    log: Logger,
  ): Promise<void> {
    const subject = this.#subjectOf(d);
    if (!subject) return;
    const verb = d.action === 'approve' ? 'approved' : 'denied';
    const t: Transition = {
      type: d.action === 'approve' ? 'Normal' : 'Warning',
      reason: d.action === 'approve' ? 'CSRApproved' : 'CSRDenied',
      message: `${csr.spec.signerName} CSR ${csr.metadata?.name ?? ''} of guest cluster ${session.cluster.name} ${verb} (${d.reason}): ${d.message}`,
    };
    await this.#recordLimited(subject, t, log, d.reason);
  }

  #subjectOf(d: Approved | Denied): EventSubject | undefined {
    if (d.machine) return { apiVersion: CAPI_API_VERSION, kind: 'Machine', metadata: d.machine.metadata };
    const ref = d.action === 'deny' ? d.pool : undefined;
    const pool = ref ? this.#opts.caches.nodePools.get(ref) : undefined;
    return pool
      ? {
          apiVersion: pool.apiVersion ?? 'kindling.dev/v1beta1',
          kind: pool.kind ?? 'NodePool',
          metadata: pool.metadata,
        }
      : undefined;
  }
}
