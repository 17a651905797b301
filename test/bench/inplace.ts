/**
 * Benchmark of an in-place rollout: N KWOK nodes in one MachineSet, maxUnavailable k, and a simulated agent
 * whose update step takes t seconds. Reports the total rollout time against the ideal ⌈N/k⌉·t, and the most
 * nodes an independent watcher saw unavailable at once (must be ≤ k).
 *
 * Real: both test-bed clusters, the Cluster API CRDs, the upgrader and the drainer (in this process), the
 * ignition server (its own process; the payload is generated before the clock starts) and the HTTPS payload
 * fetch with the pool's token. Simulated: the agent —
 * one in-process state machine per node that follows the same annotation protocol (Working, drain-<hash>,
 * a t-second step, uncordon-<hash>, Done) without touching a filesystem; 100 agent processes would measure
 * process start-up on a 2-core machine, not the rollout.
 *
 *   node dist/test/bench/inplace.js [--nodes 100] [--max-unavailable 10] [--step 5]
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import * as k8s from '@kubernetes/client-node';
import { Registry } from 'prom-client';
import { ANNOTATIONS, DRAIN_PREFIX, LABELS, NODE_STATES, UNCORDON_PREFIX } from '../../api/src/keys.js';
import { CAPI_GROUP } from '../../api/src/capi.js';
import { createLogger } from '../../support/src/logger.js';
import { Drainer } from '../../drainer/src/drainer.js';
import { createTestMachine, createTestNode, eventually, testMachineSet } from '../../drainer/src/testing.js';
import { CachedPayloadSource, IgnitionServerPayloadSource } from '../../inplace-upgrader/src/payload.js';
import { AvailabilityWatcher, tokenSecret } from '../../inplace-upgrader/src/testing.js';
import { runIgnitionServer } from '../../ignition-server/src/testing.js';
import { InPlaceUpgrader } from '../../inplace-upgrader/src/upgrader.js';
import { installCapiCrds, startCluster } from '../bed/src/index.js';
import { reportRows } from './table.js';

const NS = 'default';
const POOL = 'bench';
const merge = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch);

/** The agent protocol with a fixed step instead of a filesystem: one state machine per node, one watch for all. */
class SimulatedAgents {
  #core: k8s.CoreV1Api;
  #informer: k8s.Informer<k8s.V1Node> & k8s.ObjectCache<k8s.V1Node>;
  #busy = new Set<string>();
  #stepping = new Set<string>();
  #stepMs: number;
  /** When each node's agent took up its update (performance.now()). */
  readonly #began = new Map<string, number>();
  /** Each node's agent time: from taking up the update to writing Done, ms. */
  readonly durations: number[] = [];

  constructor(kc: k8s.KubeConfig, stepMs: number) {
    this.#core = kc.makeApiClient(k8s.CoreV1Api);
    this.#stepMs = stepMs;
    this.#informer = k8s.makeInformer(kc, '/api/v1/nodes', () => this.#core.listNode());
    this.#informer.on(k8s.UPDATE, (n) => void this.#react(n));
    // The watch ends when the clusters stop; during the run a lost watch would show as a stalled rollout.
    this.#informer.on(k8s.ERROR, () => undefined);
  }

  start(): Promise<void> {
    return this.#informer.start();
  }

  stop(): Promise<void> {
    return this.#informer.stop();
  }

  async #react(node: k8s.V1Node): Promise<void> {
    const name = node.metadata?.name ?? '';
    const ann = node.metadata?.annotations ?? {};
    const hash = ann[ANNOTATIONS.desiredConfig];
    if (!hash || hash === ann[ANNOTATIONS.currentConfig] || this.#busy.has(name)) return;
    this.#busy.add(name);
    try {
      await this.#advance(name, ann, hash);
    } finally {
      this.#busy.delete(name);
    }
  }

  async #advance(name: string, ann: Record<string, string>, hash: string): Promise<void> {
    const applied = ann[ANNOTATIONS.lastAppliedDrain];
    if (ann[ANNOTATIONS.desiredDrain] !== `${DRAIN_PREFIX}${hash}` && ann[ANNOTATIONS.desiredDrain] !== `${UNCORDON_PREFIX}${hash}`) {
      if (!this.#began.has(name)) this.#began.set(name, performance.now());
      return this.#annotate(name, { [ANNOTATIONS.state]: NODE_STATES.working, [ANNOTATIONS.desiredDrain]: `${DRAIN_PREFIX}${hash}` });
    }
    if (applied === `${DRAIN_PREFIX}${hash}` && !this.#stepping.has(name)) {
      this.#stepping.add(name);
      setTimeout(() => {
        this.#stepping.delete(name);
        void this.#annotate(name, { [ANNOTATIONS.desiredDrain]: `${UNCORDON_PREFIX}${hash}` });
      }, this.#stepMs);
      return;
    }
    if (applied !== `${UNCORDON_PREFIX}${hash}`) return;
    await this.#annotate(name, { [ANNOTATIONS.currentConfig]: hash, [ANNOTATIONS.state]: NODE_STATES.done });
    const began = this.#began.get(name);
    if (began !== undefined) this.durations.push(performance.now() - began);
    this.#began.delete(name);
  }

  async #annotate(name: string, annotations: Record<string, string>): Promise<void> {
    // A failed write is retried by the next event (level-based, like the real agent).
    await this.#core.patchNode({ name, body: { metadata: { annotations } } }, merge).catch(() => undefined);
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { nodes: { type: 'string', default: '100' }, 'max-unavailable': { type: 'string', default: '10' }, step: { type: 'string', default: '5' } } });
  const n = Number(values.nodes);
  const k = Number(values['max-unavailable']);
  const t = Number(values.step);
  const out = (line: string): boolean => process.stdout.write(`${line}\n`);
  const log = createLogger({ name: 'bench', level: 'error' });

  const mgmt = await startCluster({ name: 'mgmt', controllerManager: false });
  const guest = await startCluster({ name: 'tenant', kwok: true, controllerManager: false, management: { cluster: mgmt, namespace: NS } });
  const dir = await mkdtemp(join(tmpdir(), 'kindling-bench-'));
  const parts: { stop(): Promise<void> | void }[] = [];
  try {
    await installCapiCrds(mgmt);
    const ignition = await runIgnitionServer({ kubeconfigPath: mgmt.kubeconfigPath, dir, namespace: NS });
    parts.push(ignition);
    const names = Array.from({ length: n }, (_, i) => `node-${String(i).padStart(3, '0')}`);
    const core = guest.kubeConfig.makeApiClient(k8s.CoreV1Api);
    await k8s.KubernetesObjectApi.makeApiClient(mgmt.kubeConfig).create(
      testMachineSet({ name: POOL, namespace: NS, cluster: 'tenant', replicas: n, annotations: { [ANNOTATIONS.currentConfigHash]: 'old', [ANNOTATIONS.targetConfigHash]: 'old', [ANNOTATIONS.maxUnavailable]: String(k) } }),
    );
    for (let i = 0; i < n; i += 10) {
      await Promise.all(
        names.slice(i, i + 10).map(async (name, j) => {
          await createTestNode(guest.kubeConfig, name, { [LABELS.zone]: `zone-${(i + j) % 3}` });
          await core.patchNode({ name, body: { metadata: { annotations: { [ANNOTATIONS.currentConfig]: 'old', [ANNOTATIONS.state]: 'Done' } } } }, merge);
          await createTestMachine(mgmt.kubeConfig, { name: `${POOL}-${name}`, namespace: NS, cluster: 'tenant', machineSet: POOL, node: name });
        }),
      );
    }
    await eventually('every node to be Ready', async () => (await core.listNode()).items.filter((x) => x.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True')).length === n, 120_000, 500);

    const registry = new Registry();
    const payloads = new CachedPayloadSource(new IgnitionServerPayloadSource({ kubeConfig: mgmt.kubeConfig, url: ignition.url, caPem: ignition.caPem }));
    const upgrader = new InPlaceUpgrader({ kubeConfig: mgmt.kubeConfig, log, payloads, agentImage: 'kindling:bench', registry, resyncMs: 2_000 });
    const drainer = new Drainer({ kubeConfig: mgmt.kubeConfig, log, registry, defaultDrainTimeoutMs: 0 });
    const agents = new SimulatedAgents(guest.kubeConfig, t * 1000);
    const watcher = new AvailabilityWatcher(guest.kubeConfig, names);
    parts.push(upgrader, drainer, agents, watcher);
    await Promise.all([upgrader.start(), drainer.start(), agents.start(), watcher.start()]);

    const mgmtCore = mgmt.kubeConfig.makeApiClient(k8s.CoreV1Api);
    const secret = await mgmtCore.createNamespacedSecret({ namespace: NS, body: tokenSecret({ namespace: NS, pool: POOL, hash: 'new', release: ignition.release, config: [] }) });
    await eventually('the payload to be generated', async () => {
      const s = await mgmtCore.readNamespacedSecret({ name: secret.metadata?.name ?? '', namespace: NS });
      return s.metadata?.annotations?.[ANNOTATIONS.payloadReason] === 'AsExpected' || undefined;
    }, 120_000, 200);
    const custom = mgmt.kubeConfig.makeApiClient(k8s.CustomObjectsApi);
    const started = Date.now();
    await custom.patchNamespacedCustomObject({ group: CAPI_GROUP, version: 'v1beta2', namespace: NS, plural: 'machinesets', name: POOL, body: { metadata: { annotations: { [ANNOTATIONS.targetConfigHash]: 'new' } } } }, merge);
    await eventually('the rollout to complete', async () => {
      const ms = (await custom.getNamespacedCustomObject({ group: CAPI_GROUP, version: 'v1beta2', namespace: NS, plural: 'machinesets', name: POOL })) as { metadata: { annotations?: Record<string, string> } };
      return ms.metadata.annotations?.[ANNOTATIONS.currentConfigHash] === 'new';
    }, 3_600_000, 100);
    const total = (Date.now() - started) / 1000;
    // t as the agents took it: from taking up a node's update (Working, drain asked) to Done, averaged; it
    // holds the drain and uncordon round trips besides the step itself.
    const measured = agents.durations.reduce((a, b) => a + b, 0) / Math.max(1, agents.durations.length) / 1000;
    const batches = Math.ceil(n / k);
    const ideal = batches * measured;
    out(`N=${n} k=${k}, agent step ${t}s; agent time t measured over ${agents.durations.length} nodes: mean ${measured.toFixed(2)} s, max ${(Math.max(...agents.durations) / 1000).toFixed(2)} s`);
    out(`total rollout time: ${total.toFixed(1)} s; ⌈N/k⌉·t = ${batches} × ${measured.toFixed(2)} = ${ideal.toFixed(1)} s; ratio ${(total / ideal).toFixed(2)} (against the step alone, ${batches * t} s: ${(total / (batches * t)).toFixed(2)})`);
    out(`max unavailable at once: ${watcher.max} (limit ${k}) over ${watcher.events} node events${watcher.max <= k ? '' : ' — INVARIANT BROKEN'}`);
    reportRows([
      { figure: `rollout: ${n} nodes, k=${k}, total time`, value: `${total.toFixed(1)} s`, reference: `⌈N/k⌉·t = ${batches} × ${measured.toFixed(2)} s (t measured)`, ratio: total / ideal, target: '≤ 1.1', pass: total / ideal <= 1.1 },
      { figure: 'rollout: most nodes unavailable at once', value: String(watcher.max), reference: `k = ${k}`, ratio: Number.NaN, target: `≤ ${k}`, pass: watcher.max <= k },
    ]);
    if (watcher.max > k) process.exitCode = 1;
  } finally {
    for (const p of parts.reverse()) await p.stop();
    await Promise.all([guest.stop(), mgmt.stop()]);
    await rm(dir, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`bench failed: ${String((err as Error).stack ?? err)}\n`);
  process.exitCode = 1;
});
