/**
 * The CSRs of one guest cluster as the approver holds them. Only Kindling's two kubelet signers are listed and
 * watched (a field selector on `spec.signerName`, one informer each): a guest's other CSRs never reach this
 * process. Each CSR is kept slim (csr-request.ts slimCsr), and the list reads in small pages, slimming each page
 * before the next, so a guest's hundreds of 1 MiB requests never sit in memory at once.
 *
 * It also counts the guest's pending requests (undecided ones), for the approver's per-guest cap: beyond it, as
 * machine-approver's maxPending, nothing more of that guest is approved until the backlog shrinks.
 */
import * as k8s from '#k8s';
import { pagedList, ResilientInformer, type InformerEvent } from '../../support/src/informer.js';
import type { Logger } from '../../support/src/logger.js';
import type { Clock } from '../../support/src/timers.js';
import { KUBELET_CLIENT_SIGNER, KUBELET_SERVING_SIGNER } from './csr-decision.js';
import { slimCsr } from './csr-request.js';
import { isDecided } from './csr-rules.js';
import { clusterScoped } from '../../support/src/object-key.js';

type Csr = k8s.V1CertificateSigningRequest;

/** CSRs of 1 MiB each: a page holds at most this many before it is slimmed. */
const LIST_PAGE = 16;

export interface GuestCsrsOptions {
  kubeConfig: k8s.KubeConfig;
  certificates: k8s.CertificatesV1Api;
  log: Logger;
  clock?: Clock;
  onEvent: (csr: Csr, event: InformerEvent) => void;
}

export class GuestCsrs {
  readonly #informers: ResilientInformer<Csr>[];
  /** Names of the CSRs no one has approved or denied yet. */
  readonly #pending = new Set<string>();

  constructor(opts: GuestCsrsOptions) {
    this.#informers = [KUBELET_CLIENT_SIGNER, KUBELET_SERVING_SIGNER].map((signer) => {
      const fieldSelector = `spec.signerName=${signer}`;
      return new ResilientInformer<Csr>({
        kubeConfig: opts.kubeConfig,
        path: '/apis/certificates.k8s.io/v1/certificatesigningrequests',
        fieldSelector,
        list: pagedList(async (page) => {
          const list = await opts.certificates.listCertificateSigningRequest({ fieldSelector, ...page });
          return { ...list, items: list.items.map(slimCsr) };
        }, LIST_PAGE),
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

  /** Requests of Kindling's signers that wait for a decision. */
  get pending(): number {
    return this.#pending.size;
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

  #count(csr: Csr, event: InformerEvent): void {
    const name = csr.metadata?.name ?? '';
    if (event !== 'delete' && !isDecided(csr)) this.#pending.add(name);
    else this.#pending.delete(name);
  }
}
