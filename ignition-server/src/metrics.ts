/** The ignition server's metrics, on the component's registry (served on the ops port). */
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { StoreMetrics } from './payload/store.js';
import type { SharedMetrics } from './payload/shared.js';
import type { TokenSecretRefusal } from './token-secret-decision.js';
import { LOOP_RESOLUTION_MS, type ThreadPauses } from './serving/pauses.js';

export interface IgnitionMetrics extends StoreMetrics, SharedMetrics {
  request(code: number): void;
  /** Requests counted elsewhere (the serving threads): totals by status, read at scrape time. */
  watchRequests(read: () => Promise<Record<string, number>>): void;
  rotation(): void;
  /** A token Secret refused (token-secret-decision.ts), once per change of its verdict. */
  refusal(reason: TokenSecretRefusal): void;
  /** Sampled at scrape time. */
  watchLiveTokens(read: () => number): void;
  /** The serving threads' pauses since the previous read, read once per scrape (serving/pauses.ts). */
  watchThreadPauses(read: () => Promise<(ThreadPauses | undefined)[]>): void;
}

/**
 * The serving threads' event-loop delay and GC pauses since the previous scrape, as prom-client gives the main
 * thread's loop delay (nodejs_eventloop_lag_*): the three gauges share one read of the threads per scrape.
 */
function threadPauseGauges(registry: Registry): (read: () => Promise<(ThreadPauses | undefined)[]>) => void {
  let read: () => Promise<(ThreadPauses | undefined)[]> = () => Promise.resolve([]);
  let pending: Promise<(ThreadPauses | undefined)[]> | undefined;
  const once = (): Promise<(ThreadPauses | undefined)[]> => (pending ??= read().finally(() => (pending = undefined)));
  /** One gauge per thread and stat, each stat a value read from the thread's pauses. */
  const gauge = (name: string, help: string, stats: Record<string, (p: ThreadPauses) => number>): void =>
    void new Gauge({
      name,
      help,
      labelNames: ['thread', 'stat'],
      registers: [registry],
      async collect() {
        this.reset();
        (await once()).forEach((p, i) => {
          if (!p) return;
          for (const [stat, value] of Object.entries(stats)) this.set({ thread: String(i), stat }, value(p));
        });
      },
    });
  gauge(
    'kindling_ignition_serving_event_loop_delay_seconds',
    `Event-loop delay of each serving thread since the previous scrape (the interval between samples due every ${LOOP_RESOLUTION_MS} ms, taken while the thread has a connection open: a loop never late shows ${LOOP_RESOLUTION_MS / 1000}, a thread with no connection open since the previous scrape 0, or one sample just after its last close), by stat: p50, p99, max.`,
    { p50: (p) => p.delayP50Ms / 1000, p99: (p) => p.delayP99Ms / 1000, max: (p) => p.delayMaxMs / 1000 },
  );
  gauge(
    'kindling_ignition_serving_gc_pause_seconds',
    'Garbage-collector pauses of each serving thread since the previous scrape, by stat: total, max, major (the total of the full collections).',
    { total: (p) => p.gcTotalMs / 1000, max: (p) => p.gcMaxMs / 1000, major: (p) => p.gcMajorMs / 1000 },
  );
  gauge(
    'kindling_ignition_serving_gc_pauses',
    'Garbage-collector pauses of each serving thread since the previous scrape, by stat: count, major (the full collections).',
    { count: (p) => p.gcCount, major: (p) => p.gcMajorCount },
  );
  return (r) => void (read = r);
}

export function createIgnitionMetrics(registry: Registry): IgnitionMetrics {
  let counted: (() => Promise<Record<string, number>>) | undefined;
  const seen = new Map<string, number>();
  const counter = (name: string, help: string, labelNames: string[] = []): Counter =>
    new Counter({ name, help, labelNames, registers: [registry] });
  const requests = new Counter({
    name: 'kindling_ignition_requests_total',
    help: 'Requests to the serving port by HTTP status code.',
    labelNames: ['code'],
    registers: [registry],
    async collect() {
      for (const [code, total] of Object.entries((await counted?.()) ?? {})) {
        if (total > (seen.get(code) ?? 0)) this.inc({ code }, total - (seen.get(code) ?? 0));
        seen.set(code, total);
      }
    },
  });
  const generation = new Histogram({
    name: 'kindling_ignition_payload_generation_seconds',
    help: 'Time to generate one payload (release read, merge, validation), by outcome.',
    labelNames: ['outcome'],
    buckets: [0.01, 0.05, 0.1, 0.5, 1, 5, 15, 30, 60],
    registers: [registry],
  });
  const shared = counter(
    'kindling_ignition_payload_shared_total',
    'Pins and payloads read from the shared payload store (read), pushed to it (pushed), or not pushed (push_failed).',
    ['event'],
  );
  const rejected = counter(
    'kindling_ignition_shared_payload_rejected_total',
    "Pins and payloads of the shared payload store refused, neither served nor cached, by reason: unsigned, bad_signature (not by this server's signing key), other_entry (signed for another tag), other_bytes (signed for other bytes).",
    ['reason'],
  );
  const hits = counter('kindling_ignition_payload_cache_hits_total', 'Payload look-ups served from memory.');
  const misses = counter(
    'kindling_ignition_payload_cache_misses_total',
    'Payload look-ups that went to disk or generation.',
  );
  const bytes = new Gauge({
    name: 'kindling_ignition_payload_cache_bytes',
    help: 'Bytes of payloads held in memory.',
    registers: [registry],
  });
  const rotations = counter('kindling_ignition_token_rotations_total', 'Tokens rotated at TTL/2.');
  const refusals = counter(
    'kindling_ignition_token_secrets_refused_total',
    'Token Secrets refused (no mint, no generation, never served) by reason.',
    ['reason'],
  );
  let live: () => number = () => 0;
  new Gauge({
    name: 'kindling_ignition_tokens_live',
    help: 'Tokens (current and rotated) of live token Secrets.',
    registers: [registry],
    collect() {
      this.set(live());
    },
  });
  const watchThreadPauses = threadPauseGauges(registry);
  return {
    watchThreadPauses,
    request: (code) => requests.inc({ code: String(code) }),
    watchRequests: (read) => void (counted = read),
    rotation: () => rotations.inc(),
    refusal: (reason) => refusals.inc({ reason }),
    watchLiveTokens: (read) => void (live = read),
    generationSeconds: (s, outcome) => generation.observe({ outcome }, s),
    shared: (event) => shared.inc({ event }),
    sharedRejected: (reason) => rejected.inc({ reason }),
    cacheHit: () => hits.inc(),
    cacheMiss: () => misses.inc(),
    cacheBytes: (b) => bytes.set(b),
  };
}
