/**
 * Evictions through the Eviction API (policy/v1), many at once. A 429 (a PodDisruptionBudget allows no
 * disruption now, or the apiserver throttles) is not an error: the pod is retried after a per-pod backoff,
 * and the last refusal is remembered so a drain that gives up can say why. A refusal by a budget is kept as
 * the pod's block (which budget, since when) until the pod is evicted or gone, so the drain can show it.
 */
import type * as k8s from '#k8s';
import { Counter, type Registry } from 'prom-client';
import { statusCode } from '../../support/src/errors.js';
import { forEachLimited } from '../../support/src/limited.js';
import type { Logger } from '../../support/src/logger.js';
import type { Clock } from '../../support/src/timers.js';
import { keyString, parseKey } from '../../support/src/object-key.js';

export interface EvictorOptions {
  log: Logger;
  clock: Clock;
  concurrency: number;
  registry: Registry;
  baseBackoffMs?: number;
  maxBackoffMs?: number;
}

/** A PodDisruptionBudget's refusal of an eviction, as the apiserver's 429 states it. */
export interface PdbRefusal {
  /** `<namespace>/<name>`: a budget only covers pods of its own namespace. */
  pdb: string;
  /** The budget's disruptionsAllowed, when the refusal implies it (undefined: not computed yet). */
  disruptionsAllowed?: number;
  /** The apiserver's words after the budget's name, e.g. "needs 3 healthy pods and has 3 currently". */
  detail: string;
}

/** A pod the drain cannot evict because a budget refuses it, since the first refusal. */
export interface Block extends PdbRefusal {
  /** `<namespace>/<name>` of the pod. */
  pod: string;
  since: number;
}

interface Backoff {
  failures: number;
  nextAt: number;
  lastRefusal: string;
  block: Block | undefined;
}

/** How often to look again at a drain whose evictions all went through (waiting for pods to go). */
const POLL_MS = 250;
/** How often at most to look again at a drain that waits only on backoffs. */
const IDLE_POLL_MS = 1000;
/** StatusCause reason the apiserver puts on a refusal by a budget (policy/v1 DisruptionBudgetCause). */
const DISRUPTION_BUDGET_CAUSE = 'DisruptionBudget';
/** "The disruption budget <name> <detail>", the cause message of every such refusal. */
const CAUSE_MESSAGE = /^The disruption budget (\S+) (.+?)\.?$/;
/** The one refusal that does not mean disruptionsAllowed is 0: the disruption controller has not caught up. */
const NOT_PROCESSED = /^is still being processed/;

export type EvictionResult = 'evicted' | 'gone' | 'refused_pdb' | 'throttled' | 'error' | 'backing_off';

interface StatusBody {
  message?: string;
  details?: { causes?: { reason?: string; message?: string }[] };
}

/** The Status body of a client-node error, when it kept one. */
function statusBody(err: unknown): StatusBody | undefined {
  const body = (err as { body?: unknown }).body;
  try {
    const parsed: unknown = typeof body === 'string' ? JSON.parse(body) : body;
    return typeof parsed === 'object' && parsed !== null ? parsed : undefined;
  } catch {
    return undefined;
  }
}

/** Message of a Status body, when client-node kept one. */
function statusMessage(err: unknown): string {
  return statusBody(err)?.message ?? String(err);
}

/**
 * The budget that refused an eviction, from the apiserver's 429: its Status carries a DisruptionBudget cause
 * naming the budget (in the pod's namespace). Any other error, or a 429 without such a cause (throttling),
 * is no refusal by a budget.
 */
export function parsePdbRefusal(err: unknown, podNamespace: string): PdbRefusal | undefined {
  if (statusCode(err) !== 429) return undefined;
  for (const cause of statusBody(err)?.details?.causes ?? []) {
    const m = cause.reason === DISRUPTION_BUDGET_CAUSE ? CAUSE_MESSAGE.exec(cause.message ?? '') : null;
    if (!m) continue;
    const detail = m[2] as string;
    // The apiserver refuses with any other message only once the budget's disruptionsAllowed is 0.
    return {
      pdb: `${podNamespace}/${m[1] as string}`,
      detail,
      ...(NOT_PROCESSED.test(detail) ? {} : { disruptionsAllowed: 0 }),
    };
  }
  return undefined;
}

/** A pod's block after a failed eviction: the same budget refusing again keeps its start; any other failure leaves it as it was. */
function blockAfter(
  previous: Block | undefined,
  refusal: PdbRefusal | undefined,
  at: { pod: string; now: number },
): Block | undefined {
  if (!refusal) return previous;
  return { ...refusal, pod: at.pod, since: previous?.pdb === refusal.pdb ? previous.since : at.now };
}

export class Evictor {
  #opts: Required<EvictorOptions>;
  #backoff = new Map<string, Backoff>();
  #total: Counter<'result'>;

  constructor(opts: EvictorOptions) {
    this.#opts = { baseBackoffMs: 250, maxBackoffMs: 5_000, ...opts };
    this.#total = new Counter({
      name: 'kindling_drainer_evictions_total',
      help: 'Eviction requests by result: evicted, gone, refused_pdb (429 from a PodDisruptionBudget), throttled (other 429), error.',
      labelNames: ['result'],
      registers: [opts.registry],
    });
  }

  /** Evicts every pod whose backoff has passed; resolves with how soon the drain should look again. */
  async evictAll(core: k8s.CoreV1Api, pods: readonly k8s.V1Pod[], log: Logger): Promise<number> {
    const now = this.#opts.clock.now();
    this.#prune(now);
    const due = pods.filter((p) => (this.#backoff.get(p.metadata?.uid ?? '')?.nextAt ?? 0) <= now);
    const results: EvictionResult[] = [];
    await forEachLimited(due, this.#opts.concurrency, async (pod) => results.push(await this.#evict(core, pod, log)));
    if (results.some((r) => r === 'evicted' || r === 'gone')) return POLL_MS;
    const waits = pods.map((p) => (this.#backoff.get(p.metadata?.uid ?? '')?.nextAt ?? now) - this.#opts.clock.now());
    return Math.max(50, Math.min(IDLE_POLL_MS, ...waits.filter((w) => w > 0)));
  }

  /** The budgets refusing these pods now, oldest block first (then by pod). */
  blocks(pods: readonly k8s.V1Pod[]): Block[] {
    return pods
      .flatMap((p) => {
        const block = this.#backoff.get(p.metadata?.uid ?? '')?.block;
        return block ? [block] : [];
      })
      .sort((a, b) => a.since - b.since || a.pod.localeCompare(b.pod));
  }

  /** The last refusals of these pods, for a failure message. */
  refusals(pods: readonly k8s.V1Pod[]): string {
    const seen = new Set(
      pods.flatMap((p) => {
        const refusal = this.#backoff.get(p.metadata?.uid ?? '')?.lastRefusal;
        return refusal ? [refusal] : [];
      }),
    );
    return [...seen].slice(0, 2).join('; ');
  }

  async #evict(core: k8s.CoreV1Api, pod: k8s.V1Pod, log: Logger): Promise<EvictionResult> {
    const { name = '', namespace = '', uid = '' } = pod.metadata ?? {};
    try {
      await core.createNamespacedPodEviction({
        name,
        namespace,
        body: {
          apiVersion: 'policy/v1',
          kind: 'Eviction',
          metadata: { name, namespace },
          deleteOptions: { preconditions: { uid } },
        },
      });
      this.#backoff.delete(uid);
      return this.#count('evicted');
    } catch (err) {
      return this.#count(this.#refused(err, { uid, pod: keyString({ namespace, name }), log }));
    }
  }

  #refused(err: unknown, ctx: { uid: string; pod: string; log: Logger }): EvictionResult {
    const code = statusCode(err);
    // Gone already, or replaced by a pod of the same name (the UID precondition failed): nothing to evict.
    if (code === 404 || code === 409) {
      this.#backoff.delete(ctx.uid);
      return 'gone';
    }
    const message = statusMessage(err);
    const previous = this.#backoff.get(ctx.uid);
    const failures = (previous?.failures ?? 0) + 1;
    const now = this.#opts.clock.now();
    const delay = Math.min(this.#opts.maxBackoffMs, this.#opts.baseBackoffMs * 2 ** (failures - 1));
    const refusal = parsePdbRefusal(err, parseKey(ctx.pod).namespace);
    const block = blockAfter(previous?.block, refusal, { pod: ctx.pod, now });
    this.#backoff.set(ctx.uid, { failures, nextAt: now + delay, lastRefusal: `${ctx.pod}: ${message}`, block });
    if (code === 429) return refusal || /disruption budget/i.test(message) ? 'refused_pdb' : 'throttled';
    ctx.log.warn({ err, pod: ctx.pod, retryInMs: delay }, 'Eviction failed: retrying');
    return 'error';
  }

  /** Pods that went away some other way leave their backoff behind: forget those idle for long. */
  #prune(now: number): void {
    for (const [uid, b] of this.#backoff) if (now - b.nextAt > 600_000) this.#backoff.delete(uid);
  }

  #count(result: EvictionResult): EvictionResult {
    this.#total.inc({ result });
    return result;
  }
}
