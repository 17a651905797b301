/**
 * Cost per tenant on the management cluster: resident memory and idle CPU of every Kindling
 * component (nodepool-controller, ignition-server, inplace-upgrader, drainer, each its own process as the image
 * runs it) serving 1, 4 and 8 guest clusters (real guest apiservers as the test bed starts them, each in its own
 * tenant namespace, 50 KWOK Nodes and 2 NodePools each), then the same guests with twice the Nodes (the growth
 * per 100 Nodes), then 1,000 more NodePools in one tenant (the cost of pools alone).
 *
 * At each step the components start afresh on the tenants there are, every pool converges (status at its
 * generation, the payload verdict True), the components go quiet and settle, and then RSS and CPU are read from
 * /proc (and the V8 heap from each one's /metrics) over an idle window; with --rounds, each step is measured that many times and the medians are kept.
 * The window is a minute, after 20 s of settling: the apiserver sends each quiet watch a bookmark about once a
 * minute and the upgrader looks at a rollout in progress every 30 s, so a shorter window caught some of them or
 * none; and a major GC after the start's burst (larger with more guests) fell in a window of 20 s or did not.
 * Targets: ≤ 10 MiB per guest across all components; idle CPU flat (8 guests ≤ 1.5 × 1 guest).
 *
 *   npm run build && node dist/test/bench/tenants.js [--guests 1,4,8] [--nodes 50] [--pools 2] [--more-nodes 100]
 *     [--many-pools 1000] [--settle 20] [--idle 60] [--rounds 1]
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import * as k8s from '#k8s';
import type { NodePool } from '../../api/src/nodepool.js';
import { writeIgnitionServerFiles, type IgnitionServerFiles } from '../../ignition-server/testing/index.js';
import { eventually, installCapiCrds, installKindlingCrds, startCluster, type Cluster } from '../bed/src/index.js';
import { loadAverage, reportRows, type Row } from './table.js';
import { metric, saverSwitches } from './metric-text.js';
import { QUIET_CORES, QUIET_WINDOW_MS } from '../../support/src/memory-saver.js';
import {
  addGuest,
  addPools,
  COMPONENTS,
  growGuest,
  startComponents,
  type Component,
  type FleetSpec,
  type Guest,
  type RunningComponent,
} from './tenant-fleet.js';

const MiB = 1024 * 1024;
const RELEASE_TAG = '1.36.3';
const out = (line: string): void => void process.stdout.write(`${line}\n`);
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? Number.NaN;

const { values: OPTS } = parseArgs({
  options: {
    guests: { type: 'string', default: '1,4,8' },
    nodes: { type: 'string', default: '50' },
    pools: { type: 'string', default: '2' },
    'more-nodes': { type: 'string', default: '100' },
    'many-pools': { type: 'string', default: '1000' },
    settle: { type: 'string', default: '20' },
    idle: { type: 'string', default: '60' },
    rounds: { type: 'string', default: '1' },
  },
});
const LEVELS = OPTS.guests.split(',').map(Number);
const NODES = Number(OPTS.nodes);

/** One step measured: what was served, and per component its RSS (bytes) and idle CPU (share of one core). */
interface Step {
  label: string;
  guests: number;
  nodes: number;
  pools: number;
  rss: Record<Component, number>;
  /** V8 heap in use, at the end of the idle window. */
  heap: Record<Component, number>;
  /** 1 when the memory saver was on at the end of the idle window (in every round), else 0. */
  saver: Record<Component, number>;
  /** How many times a burst turned the memory saver off since the start (the most of any round). */
  bursts: Record<Component, number>;
  /** How many of those came during the idle window (the most of any round). */
  idleBursts: Record<Component, number>;
  /** Share of the idle window's half seconds not quiet enough for the saver (QUIET_CORES or more; median). */
  loud: Record<Component, number>;
  cpu: Record<Component, number>;
}

const total = (r: Record<Component, number>): number => COMPONENTS.reduce((sum, c) => sum + r[c], 0);

/** Every pool of the tenants at its generation with the ignition server's payload verdict True. */
async function converged(custom: k8s.CustomObjectsApi, pools: number): Promise<void> {
  const done = (p: NodePool): boolean =>
    p.status?.observedGeneration === p.metadata.generation &&
    p.status?.conditions?.some((c) => c.type === 'ValidGeneratedPayload' && c.status === 'True') === true;
  await eventually(
    `all ${pools} pools converged`,
    async () => {
      const list = (await custom.listClusterCustomObject({
        group: 'kindling.dev',
        version: 'v1beta1',
        plural: 'nodepools',
      })) as k8s.KubernetesListObject<NodePool>;
      return list.items.filter(done).length >= pools;
    },
    10 * 60_000,
    2_000,
  );
}

/** Quiet: the components together used under 5 % of a core over 5 s (the Machines' and Nodes' writes that follow
 * the pools' status are done); at most a minute, so that a component that never goes quiet is measured as it is. */
async function quiet(components: readonly RunningComponent[]): Promise<void> {
  const cpu = (): number => components.reduce((sum, c) => sum + c.cpuSeconds(), 0);
  for (let waited = 0; waited < 60; waited += 5) {
    const before = cpu();
    await sleep(5_000);
    if ((cpu() - before) / 5 < 0.05) return;
  }
}

interface Env {
  mgmt: Cluster;
  files: IgnitionServerFiles;
  dir: string;
}

/** One round: the components start on the tenants there are, converge, settle, then are read while idle. */
async function round(env: Env, guests: readonly Guest[], pools: number): Promise<Omit<Step, 'label'>> {
  const namespaces = guests.map((g) => g.namespace).join(',');
  const components = await startComponents({ ...env, namespaces });
  try {
    await converged(env.mgmt.kubeConfig.makeApiClient(k8s.CustomObjectsApi), pools);
    await quiet(components);
    await sleep(Number(OPTS.settle) * 1000);
    const idleMs = Number(OPTS.idle) * 1000;
    // Scraped before the idle CPU is read: a scrape is work, not idling.
    const offBefore = (await Promise.all(components.map((c) => c.metrics()))).map((text) => saverSwitches(text, 'off'));
    const before = components.map((c) => c.cpuSeconds());
    const startedMs = performance.now();
    const samples: number[][] = [];
    // The CPU every half second, as the memory saver judges quiet: a window at QUIET_CORES or more restarts its count.
    const loud = components.map(() => 0);
    let windows = 0;
    for (let i = 0; i < 3; i++) {
      for (const end = performance.now() + idleMs / 3; performance.now() < end; windows++) {
        const from = components.map((c) => c.cpuSeconds());
        await sleep(QUIET_WINDOW_MS);
        components.forEach((c, k) => {
          if ((c.cpuSeconds() - (from[k] ?? 0)) / (QUIET_WINDOW_MS / 1000) >= QUIET_CORES) loud[k] = (loud[k] ?? 0) + 1;
        });
      }
      samples.push(components.map((c) => c.rssBytes()));
    }
    const after = components.map((c) => c.cpuSeconds());
    const idleSeconds = (performance.now() - startedMs) / 1000;
    // One scrape each: the V8 heap in use (what of the RSS is JavaScript objects, the rest being code, native
    // buffers and the allocator's pages), and whether the memory saver is back on (an idle heap is only as
    // small as the saver makes it once back on after the start's burst).
    const scraped = await Promise.all(components.map((c) => c.metrics()));
    const of = (i: number, name: string): number => metric(scraped[i] ?? '', name);
    const by = (f: (i: number) => number): Record<Component, number> =>
      Object.fromEntries(COMPONENTS.map((c, i) => [c, f(i)])) as Record<Component, number>;
    return {
      guests: guests.length,
      nodes: guests.reduce((sum, g) => sum + g.nodes, 0),
      pools,
      rss: by((i) => median(samples.map((s) => s[i] ?? 0))),
      heap: by((i) => of(i, 'nodejs_heap_size_used_bytes')),
      saver: by((i) => (of(i, 'kindling_memory_saver_on') === 1 ? 1 : 0)),
      bursts: by((i) => saverSwitches(scraped[i] ?? '', 'off')),
      idleBursts: by((i) => saverSwitches(scraped[i] ?? '', 'off') - (offBefore[i] ?? 0)),
      loud: by((i) => (loud[i] ?? 0) / windows),
      cpu: by((i) => ((after[i] ?? 0) - (before[i] ?? 0)) / idleSeconds),
    };
  } finally {
    await Promise.all(components.map((c) => c.proc.stop()));
  }
}

/** A step: `--rounds` rounds, the median of each figure per component. */
async function measure(env: Env, label: string, guests: readonly Guest[], pools: number): Promise<Step> {
  const rounds: Omit<Step, 'label'>[] = [];
  for (let i = 0; i < Number(OPTS.rounds); i++) rounds.push(await round(env, guests, pools));
  // Each component's figure over the rounds: their median, or for the saver whether it was on in every one.
  const across = (
    f: (r: Omit<Step, 'label'>) => Record<Component, number>,
    over: (values: number[]) => number = median,
  ): Record<Component, number> =>
    Object.fromEntries(COMPONENTS.map((c) => [c, over(rounds.map((r) => f(r)[c]))])) as Record<Component, number>;
  const first = rounds[0] as Omit<Step, 'label'>;
  const step = {
    ...first,
    label,
    rss: across((r) => r.rss),
    heap: across((r) => r.heap),
    cpu: across((r) => r.cpu),
    loud: across((r) => r.loud),
    saver: across(
      (r) => r.saver,
      (values) => Math.min(...values),
    ),
    bursts: across(
      (r) => r.bursts,
      (values) => Math.max(...values),
    ),
    idleBursts: across(
      (r) => r.idleBursts,
      (values) => Math.max(...values),
    ),
  };
  const parts = COMPONENTS.map(
    (c) =>
      `${c} ${(step.rss[c] / MiB).toFixed(1)} MiB (heap ${(step.heap[c] / MiB).toFixed(1)}, memory saver ${step.saver[c] === 1 ? 'on' : 'OFF'}, turned off ${step.bursts[c]}× since the start, ${step.idleBursts[c]}× while idle, ${pct(step.loud[c])} of idle half seconds not quiet) ${(step.cpu[c] * 100).toFixed(2)} %`,
  ).join(', ');
  // Every round's totals beside the medians: how far the rounds were apart.
  const spread = rounds.map((r) => `${(total(r.rss) / MiB).toFixed(1)} MiB ${(total(r.cpu) * 100).toFixed(2)} %`);
  out(
    `${label}: RSS ${(total(step.rss) / MiB).toFixed(1)} MiB, idle CPU ${(total(step.cpu) * 100).toFixed(2)} % of a core (${parts}; rounds: ${spread.join(', ')})`,
  );
  return step;
}

const mib = (bytes: number): string => `${(bytes / MiB).toFixed(1)} MiB`;
const pct = (share: number): string => `${(share * 100).toFixed(2)} %`;

function rows(steps: Step[], byGuests: Step[], more: Step | undefined, many: Step | undefined): Row[] {
  const first = byGuests[0] as Step;
  const last = byGuests.at(-1) as Step;
  const perGuest = (total(last.rss) - total(first.rss)) / Math.max(1, last.guests - first.guests);
  const result: Row[] = steps.map((s) => ({
    figure: `tenants: ${s.label}, RSS of all components`,
    value: mib(total(s.rss)),
    reference: `idle CPU ${pct(total(s.cpu))} of a core`,
    ratio: Number.NaN,
    target: '(reported)',
    pass: undefined,
  }));
  result.push({
    figure: `tenants: RSS growth per guest (${first.guests} → ${last.guests} guests)`,
    value: mib(perGuest),
    reference: `${NODES} nodes, ${Number(OPTS.pools)} pools a guest`,
    ratio: perGuest / (10 * MiB),
    target: '≤ 10 MiB',
    pass: perGuest <= 10 * MiB,
  });
  const cpuRatio = total(last.cpu) / total(first.cpu);
  result.push({
    figure: `tenants: idle CPU at ${last.guests} guests`,
    value: pct(total(last.cpu)),
    reference: `${first.guests} guest(s): ${pct(total(first.cpu))}`,
    ratio: cpuRatio,
    target: '≤ 1.5 (flat)',
    pass: cpuRatio <= 1.5,
  });
  if (more) {
    const per100 = ((total(more.rss) - total(last.rss)) * 100) / Math.max(1, more.nodes - last.nodes);
    result.push(growthRow('tenants: RSS growth per 100 nodes', per100, `${last.nodes} → ${more.nodes} nodes`));
  }
  if (many) {
    const base = more ?? last;
    const perThousand = ((total(many.rss) - total(base.rss)) * 1000) / Math.max(1, many.pools - base.pools);
    result.push(growthRow('tenants: RSS growth per 1,000 pools', perThousand, `${base.pools} → ${many.pools} pools`));
  }
  return result;
}

const growthRow = (figure: string, bytes: number, reference: string): Row => ({
  figure,
  value: mib(bytes),
  reference,
  ratio: Number.NaN,
  target: '(reported)',
  pass: undefined,
});

async function main(): Promise<void> {
  out(`load average at the start: ${loadAverage()}`);
  const mgmt = await startCluster({ name: 'mgmt', controllerManager: false });
  const dir = await mkdtemp(join(tmpdir(), 'bench-tenants-'));
  const guests: Guest[] = [];
  try {
    await Promise.all([installKindlingCrds(mgmt), installCapiCrds(mgmt)]);
    await mgmt.kubeConfig
      .makeApiClient(k8s.CoreV1Api)
      .createNamespace({ body: { metadata: { name: 'kindling-system' } } });
    const files = await writeIgnitionServerFiles(join(dir, 'ignition'), [RELEASE_TAG]);
    const env: Env = { mgmt, files, dir };
    const fleet: FleetSpec = { mgmt, release: files.releases[RELEASE_TAG] ?? '', pools: Number(OPTS.pools) };
    const poolCount = (): number => guests.length * fleet.pools;
    const byGuests: Step[] = [];
    for (const level of LEVELS) {
      while (guests.length < level) {
        const guest = await addGuest(fleet, guests.length, NODES);
        guests.push(guest);
        await growGuest(fleet, guest, NODES);
      }
      const label = `${level} guest(s) × ${NODES} nodes`;
      byGuests.push(await measure(env, label, guests, poolCount()));
    }
    const moreNodes = Number(OPTS['more-nodes']);
    let more: Step | undefined;
    if (moreNodes > NODES) {
      await Promise.all(guests.map((g) => growGuest(fleet, g, moreNodes)));
      more = await measure(env, `${guests.length} guests × ${moreNodes} nodes`, guests, poolCount());
    }
    const manyPools = Number(OPTS['many-pools']);
    let many: Step | undefined;
    if (manyPools > 0 && guests[0]) {
      await addPools(fleet, guests[0].namespace, manyPools);
      many = await measure(env, `the same + ${manyPools} pools`, guests, poolCount() + manyPools);
    }
    const steps = [...byGuests, ...(more ? [more] : []), ...(many ? [many] : [])];
    reportRows(rows(steps, byGuests, more, many));
    out(`load average at the end: ${loadAverage()}`);
  } finally {
    await Promise.all(guests.map((g) => g.cluster.stop()));
    await mgmt.stop();
    await rm(dir, { recursive: true, force: true });
  }
}

await main();
