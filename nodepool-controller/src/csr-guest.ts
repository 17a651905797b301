/**
 * The CSRs of one guest cluster as the approver holds them. Only Kindling's two kubelet signers are listed and
 * watched (a field selector on `spec.signerName`, one informer each): a guest's other CSRs never reach this
 * process. Each CSR is kept slim (csr-request.ts slimCsr), and the list reads in small pages, slimming each page
 * before the next, so a guest's hundreds of 1 MiB requests never sit in memory at once.
 *
 * It also keeps the guest's pending requests (undecided ones) for the approver's per-guest cap (weighBacklog).
 */
import * as k8s from '#k8s';
import { pagedList, ResilientInformer, type InformerEvent } from '../../support/src/informer.js';
import type { Logger } from '../../support/src/logger.js';
import type { Clock } from '../../support/src/timers.js';
import { KUBELET_CLIENT_SIGNER, KUBELET_SERVING_SIGNER } from './csr-decision.js';
import { slimCsr } from './csr-request.js';
import { isDecided, timeOf } from './csr-rules.js';
import { clusterScoped } from '../../support/src/object-key.js';

type Csr = k8s.V1CertificateSigningRequest;

/** CSRs of 1 MiB each: a page holds at most this many before it is slimmed. */
const LIST_PAGE = 16;
/**
 * CSRs of one signer a list keeps at most: a guest of 15,000 nodes joining at once has about 15,000 of each. Past
 * it the list fails and is tried again later: a guest apiserver that pages without end (a tenant's own server)
 * fills this shared process no further.
 */
const LIST_MAX_ITEMS = 50_000;

/**
 * How long an undecided CSR counts against its guest's cap, as machine-approver's maxPendingDelta: a kubelet
 * asks again (a new CSR) well within it, and a backlog left from an outage stops counting once it is stale.
 */
export const PENDING_WINDOW_MS = 3600_000;

/** An undecided CSR of a guest, as its cap weighs it. */
export interface PendingCsr {
  name: string;
  /** Its creation time (ms since the epoch; NaN when it has none). */
  createdMs: number;
  /** The approver left it for others when it last looked: it costs no more decisions, so it does not count. */
  ignored: boolean;
}

export interface BacklogInput {
  pending: readonly PendingCsr[];
  /** The guest cluster's Machines that are not being deleted: each may have a kubelet asking at any time. */
  liveMachines: number;
  /** Undecided CSRs allowed beyond one per live Machine (--max-pending-csrs-per-guest). */
  allowance: number;
  /** The CSRs the approver decides while the guest is over its cap (the last batch; empty when under). */
  admitted: ReadonlySet<string>;
  now: number;
  windowMs?: number;
}

/**
 * `counted`: the undecided CSRs created within the window that Kindling has not left for others.
 * `admit`, over the cap only: the next batch to decide, the `cap` oldest undecided CSRs not left for others;
 * absent while more than half of the last batch is still undecided.
 */
export type Backlog =
  { over: false; counted: number; cap: number } | { over: true; counted: number; cap: number; admit?: string[] };

/**
 * Whether a guest has more pending kubelet CSRs than it can have made honestly: one per live Machine (a join, a
 * renewal) and `allowance` more, machine-approver's `len(machines) + maxPending`. A guest over it is decided in
 * batches of its oldest CSRs, as many as the cap, so that its flood holds no more of the shared queue and of
 * the approver's decisions (each scans the guest's CSRs for rivals) than an honest guest of its size. It never
 * stops deciding: decisions are how the pending count shrinks (a kubelet whose CSR is deleted asks again under
 * the same name), so a cap that stopped them would hold a guest over it for good.
 */
export function weighBacklog(input: BacklogInput): Backlog {
  const { pending, admitted, now, windowMs = PENDING_WINDOW_MS } = input;
  const cap = input.liveMachines + input.allowance;
  const candidates = pending.filter((p) => !p.ignored);
  const counted = candidates.filter((p) => p.createdMs >= now - windowMs).length;
  if (counted <= cap) return { over: false, counted, cap };
  const stillAdmitted = candidates.filter((p) => admitted.has(p.name)).length;
  if (stillAdmitted > Math.floor(cap / 2)) return { over: true, counted, cap };
  const admit = candidates
    .map((p) => ({ name: p.name, at: Number.isFinite(p.createdMs) ? p.createdMs : -Infinity }))
    .sort((a, b) => a.at - b.at || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
    .slice(0, cap)
    .map((p) => p.name);
  return { over: true, counted, cap, admit };
}

/** What weighing a guest's backlog changed: `queue`, the CSRs to queue (again). */
export interface CapStep {
  backlog: Backlog;
  /** The guest just went over its cap, or back under it. */
  change?: 'parked' | 'unparked';
  queue: readonly string[] | 'all';
}

/**
 * A guest's standing against its cap, from one weighing to the next: parked while over it, with the batch it
 * may decide meanwhile.
 */
export class PendingCap {
  #parked = false;
  #admitted: ReadonlySet<string> = new Set();
  /** The guest's CSRs changed since the last weighing. */
  unweighed = false;
  /** When it was last weighed (the clock's ms). */
  weighedAtMs = Number.NEGATIVE_INFINITY;

  get parked(): boolean {
    return this.#parked;
  }

  /** Whether a CSR of the guest may be decided now: any while under the cap, those of the batch while over. */
  mayDecide(name: string): boolean {
    return !this.#parked || this.#admitted.has(name);
  }

  /** The backlog changed at `now`: how long until it may be weighed (0: now), or undefined if one is pending. */
  changed(now: number, everyMs: number): number | undefined {
    if (this.unweighed) return undefined;
    this.unweighed = true;
    return Math.max(0, this.weighedAtMs + everyMs - now);
  }

  /** Whether a decision should weigh the backlog first: it changed, and the last weighing is `everyMs` old. */
  due(now: number, everyMs: number): boolean {
    return this.unweighed && now >= this.weighedAtMs + everyMs;
  }

  weigh(input: Omit<BacklogInput, 'admitted'>): CapStep {
    this.unweighed = false;
    this.weighedAtMs = input.now;
    const backlog = weighBacklog({ ...input, admitted: this.#admitted });
    if (!backlog.over) {
      if (!this.#parked) return { backlog, queue: [] };
      this.#parked = false;
      this.#admitted = new Set();
      return { backlog, change: 'unparked', queue: 'all' };
    }
    const change = this.#parked ? undefined : 'parked';
    this.#parked = true;
    if (backlog.admit) this.#admitted = new Set(backlog.admit);
    return { backlog, ...(change ? { change } : {}), queue: backlog.admit ?? [] };
  }
}

export interface GuestCsrsOptions {
  kubeConfig: k8s.KubeConfig;
  certificates: k8s.CertificatesV1Api;
  log: Logger;
  clock?: Clock;
  onEvent: (csr: Csr, event: InformerEvent) => void;
}

interface Undecided {
  uid: string;
  createdMs: number;
}

export class GuestCsrs {
  readonly #informers: ResilientInformer<Csr>[];
  /** The CSRs no one has approved or denied yet, by name. */
  readonly #pending = new Map<string, Undecided>();
  /** Of those, the uids of the ones the approver left for others, by name (see setIgnored). */
  readonly #ignored = new Map<string, string>();

  constructor(opts: GuestCsrsOptions) {
    this.#informers = [KUBELET_CLIENT_SIGNER, KUBELET_SERVING_SIGNER].map((signer) => {
      const fieldSelector = `spec.signerName=${signer}`;
      return new ResilientInformer<Csr>({
        kubeConfig: opts.kubeConfig,
        path: '/apis/certificates.k8s.io/v1/certificatesigningrequests',
        fieldSelector,
        list: pagedList(
          async (page) => {
            const list = await opts.certificates.listCertificateSigningRequest({ fieldSelector, ...page });
            return { ...list, items: list.items.map(slimCsr) };
          },
          LIST_PAGE,
          { maxItems: LIST_MAX_ITEMS },
        ),
        transform: slimCsr,
        log: opts.log.child({ signer }),
        clock: opts.clock,
        onEvent: (csr, event) => {
          this.#count(csr, event);
          opts.onEvent(csr, event);
        },
      });
    });
  }

  get synced(): boolean {
    return this.#informers.every((i) => i.synced);
  }

  /**
   * Records whether the approver's last look at this undecided CSR left it for others; true when that changed.
   * It holds for that CSR (its uid) until it is decided or gone, or the approver looks at it again.
   */
  setIgnored(csr: Csr, ignored: boolean): boolean {
    const { name = '', uid = '' } = csr.metadata ?? {};
    const was = this.#isIgnored(name);
    if (ignored && this.#pending.get(name)?.uid === uid) this.#ignored.set(name, uid);
    else this.#ignored.delete(name);
    return this.#isIgnored(name) !== was;
  }

  /** Requests of Kindling's signers that wait for a decision, as the cap weighs them (PendingCap). */
  pending(): PendingCsr[] {
    return [...this.#pending].map(([name, { createdMs }]) => ({ name, createdMs, ignored: this.#isIgnored(name) }));
  }

  async start(): Promise<void> {
    await Promise.all(this.#informers.map((i) => i.start()));
  }

  async stop(): Promise<void> {
    await Promise.all(this.#informers.map((i) => i.stop()));
  }

  get(name: string): Csr | undefined {
    for (const informer of this.#informers) {
      const csr = informer.get(clusterScoped(name));
      if (csr) return csr;
    }
    return undefined;
  }

  list(): Csr[] {
    return this.#informers.flatMap((i) => i.list());
  }

  #isIgnored(name: string): boolean {
    const uid = this.#ignored.get(name);
    return uid !== undefined && this.#pending.get(name)?.uid === uid;
  }

  #count(csr: Csr, event: InformerEvent): void {
    const { name = '', uid = '', creationTimestamp } = csr.metadata ?? {};
    if (event !== 'delete' && !isDecided(csr)) {
      this.#pending.set(name, { uid, createdMs: timeOf(creationTimestamp) });
      return;
    }
    this.#pending.delete(name);
    this.#ignored.delete(name);
  }
}
