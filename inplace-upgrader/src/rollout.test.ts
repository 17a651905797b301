/**
 * In-place rollouts on the real test bed: a management cluster with the real Cluster API CRDs (MachineSet,
 * Machines with nodeRef; no CAPI controller runs), a guest cluster with KWOK (10 nodes), the upgrader and
 * the drainer, a real `kindling agent` process per node against its own scratch root (AgentFleet), and the
 * ignition server's contract served by IgnitionServerStandIn over HTTPS. An independent watcher sees every
 * Node event and checks that never more than maxUnavailable nodes are unavailable.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { randomUUID } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import * as k8s from '@kubernetes/client-node';
import { Registry } from 'prom-client';
import { startCluster, installCapiCrds, type Cluster } from '../../test/bed/src/index.js';
import { ANNOTATIONS, LABELS, tokenSecretName } from '../../api/src/keys.js';
import { CAPI_GROUP } from '../../api/src/capi.js';
import { createLogger, type Logger } from '../../support/src/logger.js';
import { Drainer } from '../../drainer/src/drainer.js';
import { createTestMachine, createTestNode, eventually, testMachineSet } from '../../drainer/src/testing.js';
import { GUEST_NAMESPACE } from './desired.js';
import { CachedPayloadSource, IgnitionServerPayloadSource } from './payload.js';
import { AgentFleet, AvailabilityWatcher, IgnitionServerStandIn, KINDLING_BIN } from './testing.js';
import { InPlaceUpgrader } from './upgrader.js';

const NS = 'default';
const POOL = 'pool';
const NODES = Array.from({ length: 10 }, (_, i) => `n${String(i + 1).padStart(2, '0')}`);
const merge = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch);

/** A payload: a gzip-compressed file, a unit with a drop-in, enabled, and an SSH key. */
function payload(version: string, extraFiles: object[] = []): object {
  return {
    ignition: { version: '3.4.0' },
    storage: {
      files: [
        { path: '/etc/kindling/version', overwrite: true, mode: 0o644, contents: { source: `data:;base64,${gzipSync(version).toString('base64')}`, compression: 'gzip' } },
        ...extraFiles,
      ],
    },
    systemd: { units: [{ name: 'kindling-demo.service', enabled: true, contents: `[Service]\nExecStart=/bin/echo ${version}\n[Install]\nWantedBy=multi-user.target\n` }] },
    passwd: { users: [{ name: 'core', sshAuthorizedKeys: [`ssh-ed25519 AAAA ${version}`] }] },
  };
}

describe('in-place rollout', () => {
  let mgmt: Cluster;
  let guest: Cluster;
  let standIn: IgnitionServerStandIn;
  let fleet: AgentFleet;
  let watcher: AvailabilityWatcher;
  let rootsDir: string;
  let upgrader: InPlaceUpgrader | undefined;
  let drainer: Drainer | undefined;
  let core: k8s.CoreV1Api;
  let custom: k8s.CustomObjectsApi;
  const log = createLogger({ name: 'rollout-test', level: 'warn' });

  const machineSet = async (): Promise<MachineSetLike> =>
    (await custom.getNamespacedCustomObject({ group: CAPI_GROUP, version: 'v1beta2', namespace: NS, plural: 'machinesets', name: POOL })) as MachineSetLike;
  const annotateSet = (annotations: Record<string, string | null>): Promise<unknown> =>
    custom.patchNamespacedCustomObject({ group: CAPI_GROUP, version: 'v1beta2', namespace: NS, plural: 'machinesets', name: POOL, body: { metadata: { annotations } } }, merge);
  const nodes = async (): Promise<k8s.V1Node[]> => (await core.listNode()).items.filter((n) => NODES.includes(n.metadata?.name ?? ''));
  const fileOn = (node: string, path: string): Promise<string> => readFile(join(fleet.rootOf(node), path), 'utf8');

  /** What the nodepool-controller and the ignition server do for a new hash: token Secret, payload, target. */
  async function target(hash: string, config: object, maxUnavailable?: string): Promise<void> {
    const token = randomUUID();
    await mgmt.kubeConfig.makeApiClient(k8s.CoreV1Api).createNamespacedSecret({ namespace: NS, body: { metadata: { name: tokenSecretName(POOL, hash), labels: { [LABELS.nodePool]: POOL } }, stringData: { token } } });
    standIn.serve({ pool: `${NS}/${POOL}`, hash, token, config });
    await annotateSet({ [ANNOTATIONS.targetConfigHash]: hash, ...(maxUnavailable ? { [ANNOTATIONS.maxUnavailable]: maxUnavailable } : {}) });
  }

  const completed = (hash: string, timeoutMs = 120_000): Promise<MachineSetLike> =>
    eventually(`the rollout to ${hash} to complete`, async () => {
      const ms = await machineSet();
      return ms.metadata.annotations?.[ANNOTATIONS.currentConfigHash] === hash ? ms : undefined;
    }, timeoutMs, 250);

  async function assertAllAt(hash: string, version: string): Promise<void> {
    for (const n of await nodes()) {
      const ann = n.metadata?.annotations ?? {};
      assert.equal(ann[ANNOTATIONS.currentConfig], hash, `${n.metadata?.name} is not at ${hash}`);
      assert.equal(ann[ANNOTATIONS.state], 'Done');
      assert.notEqual(n.spec?.unschedulable, true, `${n.metadata?.name} was left cordoned`);
      assert.equal(await fileOn(n.metadata?.name ?? '', '/etc/kindling/version'), version);
    }
  }

  /** The failed node is Degraded with the reason, its files are restored, and no new node was started. */
  async function assertHalted(failed: string): Promise<void> {
    const ann = (await core.readNode({ name: failed })).metadata?.annotations ?? {};
    assert.equal(ann[ANNOTATIONS.state], 'Degraded');
    assert.match(ann[ANNOTATIONS.reason] ?? '', /\/etc\/blocker\/x\.conf/);
    assert.equal(await fileOn(failed, '/etc/kindling/version'), 'v3', 'the file written before the failure was not restored');
    await new Promise((r) => setTimeout(r, 3_000));
    const handed = (await nodes()).filter((n) => n.metadata?.annotations?.[ANNOTATIONS.desiredConfig] === 'h4').length;
    assert.ok(handed <= 3, `${handed} nodes were handed h4 although the rollout was halted`);
    assert.notEqual((await machineSet()).metadata.annotations?.[ANNOTATIONS.currentConfigHash], 'h4');
  }

  function startInProcess(): void {
    const registry = new Registry();
    const payloads = new CachedPayloadSource(new IgnitionServerPayloadSource({ kubeConfig: mgmt.kubeConfig, url: standIn.url, caPem: standIn.caPem }));
    upgrader = new InPlaceUpgrader({ kubeConfig: mgmt.kubeConfig, log, payloads, agentImage: 'kindling:test', registry, resyncMs: 2_000 });
    drainer = new Drainer({ kubeConfig: mgmt.kubeConfig, log, registry, defaultDrainTimeoutMs: 0 });
  }

  before(async () => {
    mgmt = await startCluster({ name: 'mgmt', controllerManager: false });
    [guest] = await Promise.all([startCluster({ name: 'tenant', kwok: true, controllerManager: false, management: { cluster: mgmt, namespace: NS } }), installCapiCrds(mgmt)]);
    core = guest.kubeConfig.makeApiClient(k8s.CoreV1Api);
    custom = mgmt.kubeConfig.makeApiClient(k8s.CustomObjectsApi);
    standIn = new IgnitionServerStandIn();
    await standIn.start();
    const objects = k8s.KubernetesObjectApi.makeApiClient(mgmt.kubeConfig);
    await objects.create(testMachineSet({ name: POOL, namespace: NS, cluster: 'tenant', replicas: NODES.length, annotations: { [ANNOTATIONS.targetConfigHash]: 'h0', [ANNOTATIONS.currentConfigHash]: 'h0', [ANNOTATIONS.maxUnavailable]: '3' } }));
    await Promise.all(
      NODES.map(async (name, i) => {
        await createTestNode(guest.kubeConfig, name, { [LABELS.zone]: `zone-${i % 3}` });
        await core.patchNode({ name, body: { metadata: { annotations: { [ANNOTATIONS.currentConfig]: 'h0', [ANNOTATIONS.state]: 'Done' } } } }, merge);
        await core.createNamespacedPod({ namespace: NS, body: { metadata: { name: `work-${name}` }, spec: { nodeName: name, containers: [{ name: 'c', image: 'x' }] } } });
        await createTestMachine(mgmt.kubeConfig, { name: `${POOL}-${name}`, namespace: NS, cluster: 'tenant', machineSet: POOL, node: name });
      }),
    );
    rootsDir = await mkdtemp(join(tmpdir(), 'kindling-roots-'));
    fleet = new AgentFleet({ guest: guest.kubeConfig, kubeconfigPath: guest.kubeconfigPath, rootsDir });
    await fleet.start();
    watcher = new AvailabilityWatcher(guest.kubeConfig, NODES);
    await watcher.start();
    await eventually('every node to be Ready', async () => (await nodes()).every((n) => n.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True')) && (await nodes()).length === NODES.length);
    startInProcess();
    await Promise.all([upgrader?.start(), drainer?.start()]);
  });

  after(async () => {
    watcher?.stop();
    await Promise.all([upgrader?.stop(), drainer?.stop(), fleet?.stop(), standIn?.stop()]);
    await Promise.all([guest?.stop(), mgmt?.stop()]);
    if (rootsDir) await rm(rootsDir, { recursive: true, force: true });
  });

  it('when a 10-node MachineSet with maxUnavailable 3 gets a new target, it should update every node, never more than 3 unavailable, and clean up', async () => {
    const started = Date.now();
    await target('h1', payload('v1'));
    const ms = await completed('h1');
    const seconds = (Date.now() - started) / 1000;
    assert.ok(watcher.max <= 3, `${watcher.max} nodes were unavailable at once`);
    assert.ok(watcher.max >= 1, 'the watcher never saw a node unavailable: nothing was measured');
    await assertAllAt('h1', 'v1');
    for (const node of NODES) {
      assert.match(await fileOn(node, '/etc/systemd/system/kindling-demo.service'), /echo v1/);
      assert.equal(await fileOn(node, '/home/core/.ssh/authorized_keys'), 'ssh-ed25519 AAAA v1\n');
      // Every node went through a simulated reboot: its agent process was started at least twice.
      assert.ok((fleet.starts.get(node) ?? 0) >= 2, `${node}'s agent never rebooted`);
    }
    assert.equal(ms.metadata.annotations?.[ANNOTATIONS.inPlaceProgress], undefined);
    assert.equal(ms.metadata.annotations?.[ANNOTATIONS.inPlaceFailure], undefined);
    await eventually('agent Pods and payload Secrets to be removed', async () => {
      const pods = await core.listNamespacedPod({ namespace: GUEST_NAMESPACE });
      const secrets = await core.listNamespacedSecret({ namespace: GUEST_NAMESPACE, labelSelector: LABELS.payloadSecret });
      return pods.items.length === 0 && secrets.items.length === 0;
    });
    const work = await core.listNamespacedPod({ namespace: NS });
    assert.equal(work.items.length, 0, 'the drains should have evicted the workload pods');
    log.warn({ seconds, maxUnavailable: watcher.max, events: watcher.events }, '10-node rollout figures');
  });

  it('when maxUnavailable is a percentage and the target changes mid-rollout, it should retarget the nodes not done and end at the new target', async () => {
    watcher.reset();
    await target('h2', payload('v2'), '20%');
    await eventually('some nodes to be at h2 and others still updating', async () => {
      const ns = await nodes();
      return ns.some((n) => n.metadata?.annotations?.[ANNOTATIONS.currentConfig] === 'h2') && ns.some((n) => n.metadata?.annotations?.[ANNOTATIONS.currentConfig] !== 'h2');
    }, 60_000, 100);
    await target('h3', payload('v3'));
    await completed('h3');
    assert.ok(watcher.max <= 2, `${watcher.max} nodes were unavailable at once with maxUnavailable 20% of 10`);
    await assertAllAt('h3', 'v3');
  });

  it('when the agent cannot write a path, it should restore the files, mark the node Degraded and halt the rollout with the reason; once fixed, it should go on', async () => {
    for (const node of NODES) await writeFile(join(fleet.rootOf(node), 'etc', 'blocker'), 'a file where the payload wants a folder');
    await target('h4', payload('v4', [{ path: '/etc/blocker/x.conf', contents: { source: 'data:,x' } }]));
    const halted = await eventually('the rollout to halt', async () => {
      const ms = await machineSet();
      return ms.metadata.annotations?.[ANNOTATIONS.inPlaceFailure];
    }, 60_000, 200);
    assert.match(halted, /^n\d\d: failed to write \/etc\/blocker\/x\.conf: .*\(all changes rolled back\)$/);
    await assertHalted(halted.split(':')[0] ?? '');

    for (const n of NODES) await rm(join(fleet.rootOf(n), 'etc', 'blocker'), { force: true });
    watcher.reset();
    await target('h5', payload('v5', [{ path: '/etc/blocker/x.conf', contents: { source: 'data:,x' } }]));
    const ms = await completed('h5');
    assert.equal(ms.metadata.annotations?.[ANNOTATIONS.inPlaceFailure], undefined);
    await assertAllAt('h5', 'v5');
    assert.ok(watcher.max <= 3, `${watcher.max} nodes were unavailable at once`);
  });

  it('when the upgrader, the drainer and agents are SIGKILLed at random moments mid-rollout, it should still complete with the invariants held', async () => {
    await Promise.all([upgrader?.stop(), drainer?.stop()]);
    upgrader = undefined;
    drainer = undefined;
    const caFile = join(rootsDir, 'ignition-ca.pem');
    await writeFile(caFile, standIn.caPem);
    const common = ['--kubeconfig', mgmt.kubeconfigPath, '--leader-elect=false', '--log-level', 'error'];
    const commands: Record<'upgrader' | 'drainer', string[]> = {
      upgrader: ['inplace-upgrader', ...common, '--ignition-url', standIn.url, '--ignition-ca-file', caFile, '--resync', '2s'],
      drainer: ['drainer', ...common],
    };
    const procs = new Map<string, ChildProcess>();
    const launch = (which: 'upgrader' | 'drainer'): void => void procs.set(which, spawn(process.execPath, [KINDLING_BIN, ...commands[which]], { stdio: ['ignore', 'ignore', 'inherit'] }));
    launch('upgrader');
    launch('drainer');
    const kills: string[] = [];
    try {
      watcher.reset();
      await target('h6', payload('v6'), '3');
      const done = completed('h6', 180_000);
      let finished = false;
      void done.then(() => (finished = true), () => undefined);
      await killAtRandom({ kills, isFinished: () => finished, fleet, log, kill: (kind) => {
        procs.get(kind)?.kill('SIGKILL');
        launch(kind);
      } });
      await done;
    } finally {
      for (const p of procs.values()) p.kill('SIGKILL');
    }
    log.warn({ kills }, 'SIGKILLs during the rollout');
    const real = kills.filter((k) => !k.includes('skipped'));
    assert.ok(real.length >= 5, `only ${real.length} kills happened before the rollout completed: ${kills.join(', ')}`);
    assert.ok(real.some((k) => k.startsWith('agent ')) && real.includes('upgrader') && real.includes('drainer'), `not every kind was killed: ${kills.join(', ')}`);
    assert.ok(watcher.max <= 3, `${watcher.max} nodes were unavailable at once`);
    await assertAllAt('h6', 'v6');
  });
});

/**
 * SIGKILLs in turn the upgrader, an agent, the drainer, an agent, … at random moments (seeded, the seed is
 * logged) until the rollout finishes or 8 kills were made.
 */
async function killAtRandom(opts: { kills: string[]; isFinished: () => boolean; kill: (kind: 'upgrader' | 'drainer') => void; fleet: AgentFleet; log: Logger }): Promise<void> {
  let seed = Date.now() % 2_147_483_647;
  const random = (): number => (seed = (seed * 48_271) % 2_147_483_647) / 2_147_483_647;
  opts.log.warn({ seed }, 'SIGKILL schedule seed');
  const turns = ['upgrader', 'agent', 'drainer', 'agent'] as const;
  while (!opts.isFinished() && opts.kills.length < 8) {
    await new Promise((r) => setTimeout(r, 800 + random() * 1500));
    if (opts.isFinished()) return;
    const kind = turns[opts.kills.length % turns.length] ?? 'agent';
    if (kind !== 'agent') {
      opts.kill(kind);
      opts.kills.push(kind);
      continue;
    }
    const agents = opts.fleet.running();
    const victim = agents[Math.floor(random() * agents.length)];
    opts.kills.push(victim && opts.fleet.kill(victim) ? `agent ${victim}` : 'agent (none running: skipped)');
  }
}

interface MachineSetLike {
  metadata: { annotations?: Record<string, string> };
}
