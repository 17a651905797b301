/**
 * Where a boot storm's tail comes from: the hosts by the second of the storm they arrived in (how many, their
 * client handshake and last byte), the slowest hosts with their arrival, and for Kindling, second by second, what
 * held each thread's event loop (the serving threads' delay and GC pauses, the main thread's), read from the
 * ops port's metrics once a second (each read covers the second since the previous one).
 */
import { LOOP_RESOLUTION_MS, opsMetrics } from '../../ignition-server/testing/index.js';
import { EVENT_LOOP_PRECISION_MS } from '../../support/src/metrics.js';
import { labelValues, metricSum } from './metric-text.js';

/** Per host, in the storm client's order (-1 when lost). */
export interface HostTimes {
  arrivedMs: number[];
  handshakeMs: number[];
  ttlbMs: number[];
}

/**
 * One read of the ops port: what each thread's loop went through since the previous read, in ms; its delays are
 * how late the loop's samples ran (the interval the histogram holds, less the sampling period: 10 ms for the serving
 * threads, 100 for the main thread), so an idle loop reads 0 whatever its period.
 */
export interface PauseSample {
  /** Since the storm started. */
  atMs: number;
  threads: {
    delayP99: number;
    delayMax: number;
    gcMs: number;
    gcMaxMs: number;
    gcCount: number;
    majorMs: number;
    majorCount: number;
  }[];
  main: { delayP99: number; delayMax: number; gcMs: number; gcCount: number; majorMs: number };
}

const fmt = (n: number, digits = 1): string => (Number.isFinite(n) ? n.toFixed(digits) : '-');

function pctOf(xs: number[], p: number): number {
  const s = xs.filter((x) => x >= 0).sort((a, b) => a - b);
  return s.length === 0 ? Number.NaN : (s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)] as number);
}

/** How late a loop's samples ran: the interval between them less the period they were due at. */
const late = (intervalSeconds: number, periodMs: number): number => Math.max(0, intervalSeconds * 1000 - periodMs);

/** The serving threads' indexes, in order. */
const threadsOf = (text: string): string[] =>
  labelValues(text, 'kindling_ignition_serving_event_loop_delay_seconds', 'thread').sort(
    (a, b) => Number(a) - Number(b),
  );

function sample(text: string, atMs: number, mainGc: { ms: number; count: number; majorMs: number }): PauseSample {
  const gcMs = metricSum(text, 'nodejs_gc_duration_seconds_sum') * 1000;
  const gcCount = metricSum(text, 'nodejs_gc_duration_seconds_count');
  const majorMs = metricSum(text, 'nodejs_gc_duration_seconds_sum', { kind: 'major' }) * 1000;
  const serving = (name: string, thread: string, stat: string): number => metricSum(text, name, { thread, stat });
  const s: PauseSample = {
    atMs,
    threads: threadsOf(text).map((t) => ({
      delayP99: late(serving('kindling_ignition_serving_event_loop_delay_seconds', t, 'p99'), LOOP_RESOLUTION_MS),
      delayMax: late(serving('kindling_ignition_serving_event_loop_delay_seconds', t, 'max'), LOOP_RESOLUTION_MS),
      gcMs: serving('kindling_ignition_serving_gc_pause_seconds', t, 'total') * 1000,
      gcMaxMs: serving('kindling_ignition_serving_gc_pause_seconds', t, 'max') * 1000,
      gcCount: serving('kindling_ignition_serving_gc_pauses', t, 'count'),
      majorMs: serving('kindling_ignition_serving_gc_pause_seconds', t, 'major') * 1000,
      majorCount: serving('kindling_ignition_serving_gc_pauses', t, 'major'),
    })),
    main: {
      delayP99: late(metricSum(text, 'nodejs_eventloop_lag_p99_seconds'), EVENT_LOOP_PRECISION_MS),
      delayMax: late(metricSum(text, 'nodejs_eventloop_lag_max_seconds'), EVENT_LOOP_PRECISION_MS),
      gcMs: gcMs - mainGc.ms,
      gcCount: gcCount - mainGc.count,
      majorMs: majorMs - mainGc.majorMs,
    },
  };
  Object.assign(mainGc, { ms: gcMs, count: gcCount, majorMs });
  return s;
}

/**
 * Reads the server's ops port now (which starts the windows: every read resets them) and every second until
 * stopped; stop() returns one sample per second.
 */
export async function tracePauses(opsPort: number): Promise<{ stop(): Promise<PauseSample[]> }> {
  const mainGc = { ms: 0, count: 0, majorMs: 0 };
  sample(await opsMetrics(opsPort), 0, mainGc);
  const started = performance.now();
  const samples: PauseSample[] = [];
  let reading = Promise.resolve();
  const timer = setInterval(() => {
    reading = reading.then(async () => {
      const text = await opsMetrics(opsPort).catch(() => '');
      if (text !== '') samples.push(sample(text, performance.now() - started, mainGc));
    });
  }, 1000);
  return {
    async stop() {
      clearInterval(timer);
      await reading;
      return samples;
    },
  };
}

function pausesLine(p: PauseSample | undefined): string {
  if (!p) return '';
  const threads = p.threads
    .map(
      (t, i) =>
        `t${i} loop ${fmt(t.delayP99, 0)}/${fmt(t.delayMax, 0)} gc ${fmt(t.gcMs)} (${t.gcCount}, max ${fmt(t.gcMaxMs)}${t.majorCount > 0 ? `, major ${t.majorCount} ${fmt(t.majorMs)}` : ''})`,
    )
    .join(', ');
  return ` | ${threads}; main loop ${fmt(p.main.delayP99, 0)}/${fmt(p.main.delayMax, 0)} gc ${fmt(p.main.gcMs)} (${p.main.gcCount}${p.main.majorMs > 0 ? `, major ${fmt(p.main.majorMs)}` : ''})`;
}

/** A line per second of the storm: hosts arrived, their handshake and last byte p99/max, and what the loops went through. */
export function bySecond(r: HostTimes, pauses: PauseSample[] = []): string[] {
  const seconds = Math.ceil(Math.max(...r.arrivedMs, 0) / 1000);
  const lines: string[] = [];
  for (let s = 0; s < Math.max(seconds, pauses.length); s++) {
    const idx = r.arrivedMs.flatMap((a, i) => (a >= s * 1000 && a < (s + 1) * 1000 ? [i] : []));
    const hs = idx.map((i) => r.handshakeMs[i] as number);
    const lb = idx.map((i) => r.ttlbMs[i] as number);
    const lost = lb.filter((t) => t < 0).length;
    lines.push(
      `    s${s} ${String(idx.length).padStart(4)} hosts${lost > 0 ? ` (${lost} lost)` : ''}, handshake p99/max ${fmt(pctOf(hs, 99))}/${fmt(pctOf(hs, 100))} ms, last byte ${fmt(pctOf(lb, 99))}/${fmt(pctOf(lb, 100))} ms${pausesLine(pauses[s])}`,
    );
  }
  return lines;
}

/** The n slowest hosts to their last byte (lost first), each with its arrival and handshake. */
export function slowest(r: HostTimes, n: number): string {
  const order = r.ttlbMs
    .map((t, i) => ({ i, t: t < 0 ? Number.POSITIVE_INFINITY : t }))
    .sort((a, b) => b.t - a.t)
    .slice(0, n);
  return order
    .map(
      ({ i, t }) =>
        `${fmt((r.arrivedMs[i] ?? Number.NaN) / 1000, 2)}s: hs ${fmt(r.handshakeMs[i] ?? Number.NaN)} last ${Number.isFinite(t) ? fmt(t) : 'lost'}`,
    )
    .join('; ');
}
