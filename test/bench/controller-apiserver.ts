/**
 * Where an apiserver's work goes over a window of the NodePool controller benchmark: its own /metrics read
 * before and after, and the difference by verb and resource (requests and the seconds they took) and by kind
 * of watch event sent (events and bytes). Read the same way over the replays, it tells which work the
 * controller's window has that a replay does not.
 */
import { request } from 'node:https';
import type * as k8s from '#k8s';

/** Counters by series name and label set, as one flat map. */
export type Scrape = Map<string, number>;

async function metricsText(kc: k8s.KubeConfig): Promise<string> {
  const server = kc.getCurrentCluster()?.server ?? '';
  const opts: Parameters<typeof request>[1] = { method: 'GET' };
  await kc.applyToHTTPSOptions(opts);
  return new Promise((resolve, reject) => {
    const req = request(new URL('/metrics', server), opts, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('end', () =>
        res.statusCode === 200 ? resolve(body) : reject(new Error(`GET /metrics answered ${res.statusCode}`)),
      );
    });
    req.on('error', reject);
    req.end();
  });
}

const label = (labels: string, name: string): string => new RegExp(`[{,]${name}="([^"]*)"`).exec(labels)?.[1] ?? '';

/** The key a sample is summed under, or undefined for series not read here. */
function keyOf(series: string, labels: string): string | undefined {
  const resource = (): string => {
    const sub = label(labels, 'subresource');
    return `${label(labels, 'resource')}${sub ? `/${sub}` : ''}`;
  };
  // The watch events' series name their kind by `kind` or, in later releases, by `resource`.
  const kind = (): string => label(labels, 'kind') || label(labels, 'resource');
  switch (series) {
    case 'apiserver_request_total': {
      // Refused requests (a stale resourceVersion's 409 above all) apart: they are work with nothing to show.
      const code = label(labels, 'code');
      return `requests ${label(labels, 'verb')} ${resource()}${code.startsWith('2') ? '' : ` ${code}`}`;
    }
    case 'apiserver_request_duration_seconds_sum':
      return `seconds ${label(labels, 'verb')} ${resource()}`;
    case 'apiserver_watch_events_total':
      return `watch events ${kind()}`;
    case 'apiserver_watch_events_sizes_sum':
      return `watch bytes ${kind()}`;
    default:
      return undefined;
  }
}

/** The apiserver's request and watch counters now. */
export async function scrapeApiserver(kc: k8s.KubeConfig): Promise<Scrape> {
  const sums: Scrape = new Map();
  for (const line of (await metricsText(kc)).split('\n')) {
    const match = /^(\w+)(\{[^}]*\})? (\S+)$/.exec(line);
    if (!match) continue;
    const key = keyOf(match[1] ?? '', match[2] ?? '');
    if (key !== undefined) sums.set(key, (sums.get(key) ?? 0) + Number(match[3]));
  }
  return sums;
}

/** What the apiserver did between two scrapes. */
export function scrapeDelta(before: Scrape, after: Scrape): Scrape {
  const delta: Scrape = new Map();
  for (const [key, value] of after) {
    const d = value - (before.get(key) ?? 0);
    if (d > 0) delta.set(key, d);
  }
  return delta;
}

/** Reads the counters around `fn`. */
export async function measured<T>(kc: k8s.KubeConfig, fn: () => Promise<T>): Promise<{ value: T; work: Scrape }> {
  const before = await scrapeApiserver(kc);
  const value = await fn();
  return { value, work: scrapeDelta(before, await scrapeApiserver(kc)) };
}

const shown = (value: number | undefined, key: string): string => {
  if (value === undefined) return '-';
  if (key.startsWith('seconds')) return value.toFixed(1);
  if (key.startsWith('watch bytes')) return `${(value / 2 ** 20).toFixed(1)} MiB`;
  return value.toFixed(0);
};

/** The least a key shows: a bookmark's few watch bytes, a lease's milliseconds are no work worth a line. */
const threshold = (key: string, minimum: number): number => {
  if (key.startsWith('seconds')) return 0.5;
  if (key.startsWith('watch bytes')) return 2 ** 16;
  return minimum;
};

/**
 * Lines comparing windows (by column, named), every key one of them holds, requests first, biggest in the first
 * column first; keys below `minimum` in every column are left out.
 */
export function workTable(columns: Array<{ name: string; work: Scrape }>, minimum = 10): string[] {
  const keys = [...new Set(columns.flatMap((c) => [...c.work.keys()]))].filter((k) =>
    columns.some((c) => (c.work.get(k) ?? 0) >= threshold(k, minimum)),
  );
  const first = columns[0]?.work ?? new Map<string, number>();
  const order = ['requests', 'seconds', 'watch events', 'watch bytes'];
  const group = (k: string): number => order.findIndex((o) => k.startsWith(o));
  keys.sort((a, b) => group(a) - group(b) || (first.get(b) ?? 0) - (first.get(a) ?? 0));
  const width = Math.max(...keys.map((k) => k.length), 10);
  const header = `  ${''.padEnd(width)}  ${columns.map((c) => c.name.padStart(14)).join('  ')}`;
  const rows = keys.map(
    (k) => `  ${k.padEnd(width)}  ${columns.map((c) => shown(c.work.get(k), k).padStart(14)).join('  ')}`,
  );
  return [header, ...rows];
}
