/**
 * Local-environment figures: `npm start` time to "all pools Ready" cold (empty state folder, test bed already
 * built) and warm (a restart on that state), the resident memory of the whole environment (every process it
 * started), and the in-place upgrade of the sample InPlace pool to the next release against the ideal
 * ⌈N/k⌉·t, where t is the median time one node took (desiredConfig set → Done, from Node watch events).
 *
 *   npm run build && node dist/test/bench/local.js
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as k8s from '#k8s';
import { ANNOTATIONS, NODE_STATES } from '../../api/src/keys.js';
import { eventually, treeRssBytes } from '../bed/src/index.js';
import { LocalEnvironment } from '../e2e/environment.js';

const MiB = 1024 * 1024;
const out = (s: string): void => void process.stdout.write(`${s}\n`);
const seconds = (ms: number): string => `${(ms / 1000).toFixed(1)} s`;

async function timedStart(env: LocalEnvironment): Promise<number> {
  const t0 = performance.now();
  await env.start();
  return performance.now() - t0;
}

function observeStep(steps: Map<string, { from: number; to?: number }>, node: k8s.V1Node): void {
  // A node absent from the map was never handed the new config: nothing to time.
  const a = node.metadata?.annotations ?? {};
  const name = String(node.metadata?.name);
  const desired = a[ANNOTATIONS.desiredConfig];
  const at = desired === a[ANNOTATIONS.currentConfig];
  if (!at && !steps.has(name)) steps.set(name, { from: performance.now() });
  const step: { to?: number } = steps.get(name) ?? {};
  if (at && a[ANNOTATIONS.state] === NODE_STATES.done) step.to ??= performance.now();
}

/** Per node: when the upgrader set a new desiredConfig, and when the agent reported Done at it. */
function watchNodeSteps(guest: k8s.KubeConfig): { steps: Map<string, { from: number; to?: number }>; stop(): void } {
  const steps = new Map<string, { from: number; to?: number }>();
  let request: { abort(): void } | undefined;
  void new k8s.Watch(guest)
    .watch(
      '/api/v1/nodes',
      { labelSelector: 'kindling.dev/pool=inplace' },
      (_type: string, node: k8s.V1Node) => observeStep(steps, node),
      () => undefined,
    )
    .then((r) => (request = r));
  return { steps, stop: () => request?.abort() };
}

async function inPlaceUpgrade(env: LocalEnvironment): Promise<void> {
  const pool = await env.pool('inplace');
  const n = (await env.nodes('inplace')).length;
  const k =
    typeof pool.spec.management.inPlace?.maxUnavailable === 'number' ? pool.spec.management.inPlace.maxUnavailable : 1;
  const watch = watchNodeSteps(env.guest);
  const t0 = performance.now();
  await env.patchPool('inplace', {
    spec: { release: { image: pool.spec.release.image.replace(/:[^:]+$/, ':1.36.3') } },
  });
  await eventually(
    'every inplace node updated',
    async () => [...watch.steps.values()].filter((s) => s.to !== undefined).length === n,
    15 * 60_000,
    500,
  );
  const total = performance.now() - t0;
  watch.stop();
  const durations = [...watch.steps.values()].map((s) => (s.to ?? 0) - s.from).sort((a, b) => a - b);
  const t = durations[Math.floor(durations.length / 2)] ?? 0;
  const ideal = Math.ceil(n / k) * t;
  out(
    `in-place upgrade of the sample pool (N=${n}, k=${k}): ${seconds(total)}; per node t: median ${seconds(t)} (min ${seconds(durations[0] ?? 0)}, max ${seconds(durations.at(-1) ?? 0)}); ideal ⌈N/k⌉·t = ${seconds(ideal)}; ratio ${(total / ideal).toFixed(2)}`,
  );
}

const stateDir = await mkdtemp(join(tmpdir(), 'kindling-bench-local-'));
try {
  const cold = new LocalEnvironment(stateDir);
  out(`cold start (empty state folder) to all pools Ready: ${seconds(await timedStart(cold))}`);
  await new Promise((r) => setTimeout(r, 10_000));
  out(
    `memory of the whole environment (every process, settled 10 s): ${(treeRssBytes(cold.pid ?? 0) / MiB).toFixed(0)} MiB RSS`,
  );
  await inPlaceUpgrade(cold);
  await cold.stop();
  const warm = new LocalEnvironment(stateDir);
  out(`warm start (same state folder) to all pools Ready: ${seconds(await timedStart(warm))}`);
  await warm.stop();
} finally {
  await rm(stateDir, { recursive: true, force: true });
}
