/**
 * In-place rollouts on the real test bed: a management cluster with the real Cluster API CRDs (MachineSet,
 * Machines with nodeRef; no CAPI controller runs), a guest cluster with KWOK (10 nodes), the upgrader and
 * the drainer, a real `kindling agent` process per node against its own scratch root with a token bound to its
 * agent Pod (AgentFleet: so the policy holding each agent to its own Node is in force), and the real ignition
 * server (its own process), which mints each pool token and renders each payload from a release image and the
 * pool's MachineConfig; the upgrader fetches it with that token. An independent watcher sees every Node event
 * and checks that never more than maxUnavailable nodes are unavailable.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { cp, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import * as k8s from '#k8s';
import type { Cluster } from '../../test/bed/src/index.js';
import { ANNOTATIONS, LABELS } from '../../api/src/keys.js';
import { CAPI_API_VERSION, CAPI_GROUP } from '../../api/src/capi.js';
import { createLogger, type Logger } from '../../support/src/logger.js';
import type { Drainer } from '../../drainer/src/drainer.js';
import { createTestMachine, createTestNode, eventually, setTestNodeRef } from '../../drainer/testing/index.js';
import { agentPodName, GUEST_NAMESPACE } from '../../api/src/node-agent.js';
import { isReady } from './rollout-decision.js';
import { STATE_DIR } from '../../node-agent/testing/agent.js';
import { KINDLING_BIN, machineConfig, type AgentFleet, type AvailabilityWatcher } from '../testing/index.js';
import { NS, POOL, RolloutBed, type MachineSetLike } from '../testing/rollout-bed.js';
import type { IgnitionServer } from '../../ignition-server/testing/index.js';
import type { InPlaceUpgrader } from './upgrader.js';

const NODES = Array.from({ length: 10 }, (_, i) => `n${String(i + 1).padStart(2, '0')}`);
const merge = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch);

/** A payload: a gzip-compressed file, a unit with a drop-in, enabled, and an SSH key. */
function payload(version: string, extraFiles: object[] = []): object {
  return {
    ignition: { version: '3.4.0' },
    storage: {
      files: [
        {
          path: '/etc/kindling/version',
          overwrite: true,
          mode: 0o644,
          contents: { source: `data:;base64,${gzipSync(version).toString('base64')}`, compression: 'gzip' },
        },
        ...extraFiles,
      ],
    },
    systemd: {
      units: [
        {
          name: 'kindling-demo.service',
          enabled: true,
          contents: `[Service]\nExecStart=/bin/echo ${version}\n[Install]\nWantedBy=multi-user.target\n`,
        },
      ],
    },
    passwd: { users: [{ name: 'core', sshAuthorizedKeys: [`ssh-ed25519 AAAA ${version}`] }] },
  };
}

describe('in-place rollout', () => {
  let bed: RolloutBed;
  let mgmt: Cluster;
  let guest: Cluster;
  let ignition: IgnitionServer;
  let fleet: AgentFleet;
  let watcher: AvailabilityWatcher;
  let upgrader: InPlaceUpgrader | undefined;
  let drainer: Drainer | undefined;
  let core: k8s.CoreV1Api;
  const log = createLogger({ name: 'rollout-test', level: 'warn' });

  const machineSet = (): Promise<MachineSetLike> => bed.machineSet();
  const nodes = (): Promise<k8s.V1Node[]> => bed.nodes();
  const fileOn = (node: string, path: string): Promise<string> => bed.fileOn(node, path);

  /** The config hash a target name stands for (h0: the nodes' first). */
  const h = (name: string): string => bed.hash(name);
  /** The pool's new config, `name` standing for its hash (h()): its one MachineConfig holds `config`. */
  const target = (name: string, config: object, maxUnavailable?: string): Promise<void> =>
    bed.target(
      name,
      [machineConfig('50-test', config)],
      maxUnavailable ? { [ANNOTATIONS.maxUnavailable]: maxUnavailable } : {},
    );
  const completed = (hash: string, timeoutMs = 120_000): Promise<MachineSetLike> => bed.completed(hash, timeoutMs);

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
    assert.equal(
      await fileOn(failed, '/etc/kindling/version'),
      'v3',
      'the file written before the failure was not restored',
    );
    await new Promise((r) => setTimeout(r, 3_000));
    const handed = (await nodes()).filter(
      (n) => n.metadata?.annotations?.[ANNOTATIONS.desiredConfig] === h('h4'),
    ).length;
    assert.ok(handed <= 3, `${handed} nodes were handed ${h('h4')} although the rollout was halted`);
    assert.notEqual((await machineSet()).metadata.annotations?.[ANNOTATIONS.currentConfigHash], h('h4'));
  }

  const patchSet = (body: object): Promise<unknown> => bed.patchSet(body);

  /**
   * A node joining the pool as Cluster API brings it: the Node registers (with `annotations`), and once it is
   * Ready the watcher counts it (a node never Ready was never available) and its Machine gets the nodeRef.
   */
  async function joinNode(
    node: string,
    annotations: Record<string, string> = {},
    opts = { machine: true },
  ): Promise<void> {
    await createTestNode(guest.kubeConfig, node, { [LABELS.zone]: `zone-${Number(node.slice(1)) % 3}` });
    if (Object.keys(annotations).length > 0)
      await core.patchNode({ name: node, body: { metadata: { annotations } } }, merge);
    await eventually(`${node} to be Ready`, async () => isReady(await core.readNode({ name: node })) || undefined);
    watcher.track([node]);
    if (opts.machine)
      await createTestMachine(mgmt.kubeConfig, {
        name: `${POOL}-${node}`,
        namespace: NS,
        cluster: 'tenant',
        machineSet: POOL,
        node,
      });
  }

  /** Scales the MachineSet as the NodePool controller would; scaling down, Cluster API's part: Machines and Nodes go. */
  async function scaleTo(replicas: number): Promise<void> {
    await patchSet({ spec: { replicas } });
    const objects = k8s.KubernetesObjectApi.makeApiClient(mgmt.kubeConfig);
    for (const n of (await nodes())
      .map((x) => x.metadata?.name ?? '')
      .filter((name) => Number(name.slice(1)) > replicas)) {
      await objects.delete({
        apiVersion: CAPI_API_VERSION,
        kind: 'Machine',
        metadata: { name: `${POOL}-${n}`, namespace: NS },
      });
      await core.deleteNode({ name: n });
    }
  }

  /** n11 (booted from the target) needed nothing; n12 (older payload) was drained and rebooted; n13 was never touched. */
  async function assertJoinedNodes(): Promise<void> {
    const ann = async (n: string): Promise<Record<string, string>> =>
      (await core.readNode({ name: n })).metadata?.annotations ?? {};
    const n11 = await ann('n11');
    assert.equal(n11[ANNOTATIONS.desiredConfig], h('h6'));
    assert.equal(n11[ANNOTATIONS.desiredDrain], undefined, 'n11 was drained although its host held the target');
    assert.equal(fleet.starts.get('n11'), 1, 'n11 was rebooted although its host held the target');
    assert.equal((await ann('n12'))[ANNOTATIONS.lastAppliedDrain], `uncordon-${h('h6')}`);
    assert.ok((fleet.starts.get('n12') ?? 0) >= 2, "n12's agent never rebooted");
    assert.equal((await ann('n13'))[ANNOTATIONS.desiredConfig], undefined, 'n13 was handed the target it was at');
    assert.equal(fleet.starts.get('n13'), undefined, 'n13 got an agent');
  }

  /** The drain failure is on the node (annotation and Event), the drain is not marked done, nothing was applied. */
  async function assertDrainGivenUp(node: string, hash: string): Promise<void> {
    const ann = (await core.readNode({ name: node })).metadata?.annotations ?? {};
    assert.equal(ann[ANNOTATIONS.desiredDrain], `drain-${hash}`);
    assert.notEqual(ann[ANNOTATIONS.lastAppliedDrain], `drain-${hash}`);
    assert.match(ann[ANNOTATIONS.drainFailure] ?? '', new RegExp(`^drain-${hash}: nodeDrainTimeout 5s reached`));
    assert.equal(ann[ANNOTATIONS.drainBlocked], undefined, 'the block outlived the drain given up');
    const events = await core.listNamespacedEvent({
      namespace: 'default',
      fieldSelector: `involvedObject.name=${node},reason=DrainFailed`,
    });
    assert.equal(events.items.length, 1, 'no DrainFailed Event on the node');
    const blocked = await core.listNamespacedEvent({
      namespace: 'default',
      fieldSelector: `involvedObject.name=${node},reason=DrainBlocked`,
    });
    // No disruption controller runs in this guest: the apiserver says the budget is not processed yet.
    assert.match(
      blocked.items[0]?.message ?? '',
      /^Eviction of default\/pinned refused by PodDisruptionBudget default\/pinned \(disruptionsAllowed not computed yet: /,
      'no DrainBlocked Event on the node',
    );
    assert.equal(
      (await core.readNamespacedPod({ name: 'pinned', namespace: NS })).metadata?.deletionTimestamp,
      undefined,
    );
    assert.notEqual(await fileOn(node, '/etc/kindling/version'), 'v7', 'the config was applied without a drain');
  }

  before(async () => {
    bed = await RolloutBed.start({ nodes: NODES, zones: 3, setAnnotations: { [ANNOTATIONS.maxUnavailable]: '3' } });
    ({ mgmt, guest, ignition, fleet, watcher } = bed);
    core = bed.core();
    // A pod on every node: each drain evicts something.
    await Promise.all(
      NODES.map((name) =>
        core.createNamespacedPod({
          namespace: NS,
          body: {
            metadata: { name: `work-${name}` },
            spec: { nodeName: name, containers: [{ name: 'c', image: 'x' }] },
          },
        }),
      ),
    );
    ({ upgrader, drainer } = bed.inProcess(log));
    await Promise.all([upgrader.start(), drainer.start()]);
  });

  after(async () => {
    await Promise.all([upgrader?.stop(), drainer?.stop()]);
    await bed?.stop();
  });

  it('when a 10-node MachineSet with maxUnavailable 3 gets a new target, it should update every node, never more than 3 unavailable, and clean up', async () => {
    const started = Date.now();
    await target('h1', payload('v1'));
    const ms = await completed(h('h1'));
    const seconds = (Date.now() - started) / 1000;
    assert.ok(watcher.max <= 3, `${watcher.max} nodes were unavailable at once`);
    assert.ok(watcher.max >= 1, 'the watcher never saw a node unavailable: nothing was measured');
    await assertAllAt(h('h1'), 'v1');
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
      const secrets = await core.listNamespacedSecret({
        namespace: GUEST_NAMESPACE,
        labelSelector: LABELS.payloadSecret,
      });
      return pods.items.length === 0 && secrets.items.length === 0;
    });
    const work = await core.listNamespacedPod({ namespace: NS });
    assert.equal(work.items.length, 0, 'the drains should have evicted the workload pods');
    log.warn({ seconds, maxUnavailable: watcher.max, events: watcher.events }, '10-node rollout figures');
  });

  it('when maxUnavailable is a percentage and the target changes mid-rollout, it should retarget the nodes not done and end at the new target', async () => {
    watcher.reset();
    await target('h2', payload('v2'), '20%');
    await eventually(
      `some nodes to be at ${h('h2')} and others still updating`,
      async () => {
        const ns = await nodes();
        return (
          ns.some((n) => n.metadata?.annotations?.[ANNOTATIONS.currentConfig] === h('h2')) &&
          ns.some((n) => n.metadata?.annotations?.[ANNOTATIONS.currentConfig] !== h('h2'))
        );
      },
      60_000,
      100,
    );
    await target('h3', payload('v3'));
    await completed(h('h3'));
    assert.ok(watcher.max <= 2, `${watcher.max} nodes were unavailable at once with maxUnavailable 20% of 10`);
    await assertAllAt(h('h3'), 'v3');
  });

  it('when the agent cannot write a path, it should restore the files, mark the node Degraded and halt the rollout with the reason; once fixed, it should go on', async () => {
    for (const node of NODES)
      await writeFile(join(fleet.rootOf(node), 'etc', 'blocker'), 'a file where the payload wants a folder');
    await target('h4', payload('v4', [{ path: '/etc/blocker/x.conf', contents: { source: 'data:,x' } }]));
    const halted = await eventually(
      'the rollout to halt',
      async () => {
        const ms = await machineSet();
        return ms.metadata.annotations?.[ANNOTATIONS.inPlaceFailure];
      },
      60_000,
      200,
    );
    assert.match(halted, /^n\d\d: failed to write \/etc\/blocker\/x\.conf: .*\(all changes rolled back\)$/);
    await assertHalted(halted.split(':')[0] ?? '');

    for (const n of NODES) await rm(join(fleet.rootOf(n), 'etc', 'blocker'), { force: true });
    watcher.reset();
    await target('h5', payload('v5', [{ path: '/etc/blocker/x.conf', contents: { source: 'data:,x' } }]));
    const ms = await completed(h('h5'));
    assert.equal(ms.metadata.annotations?.[ANNOTATIONS.inPlaceFailure], undefined);
    await assertAllAt(h('h5'), 'v5');
    assert.ok(watcher.max <= 3, `${watcher.max} nodes were unavailable at once`);
  });

  it('when the pool is scaled up mid-rollout, it should update only the joined nodes that need it, and complete once every Machine has a node at the target', async () => {
    watcher.reset();
    await target('h6', payload('v6'), '3');
    const first = await eventually(
      `a node at ${h('h6')} while others are not yet`,
      async () => {
        const ns = await nodes();
        const at = ns.filter((n) => n.metadata?.annotations?.[ANNOTATIONS.currentConfig] === h('h6'));
        return at.length > 0 && at.length < ns.length ? (at[0]?.metadata?.name ?? '') : undefined;
      },
      120_000,
      100,
    );
    await scaleTo(NODES.length + 3);
    // n11 booted from the target's payload: its root is a copy of a node at h6 (without the agent's state), and
    // like any freshly booted node it carries no currentConfig. n13 joins with currentConfig already at h6.
    for (const joiner of ['n11', 'n13'])
      await cp(fleet.rootOf(first), fleet.rootOf(joiner), {
        recursive: true,
        filter: (src) => !src.startsWith(join(fleet.rootOf(first), STATE_DIR)),
      });
    await joinNode('n11');
    await joinNode('n13', { [ANNOTATIONS.currentConfig]: h('h6'), [ANNOTATIONS.state]: 'Done' });
    // n12's Machine is still provisioning: it may boot an older payload, so the rollout must wait for its node.
    await createTestMachine(mgmt.kubeConfig, {
      name: `${POOL}-n12`,
      namespace: NS,
      cluster: 'tenant',
      machineSet: POOL,
    });
    const progress = await eventually(
      `every node with a Machine at ${h('h6')}, the provisioning one pending`,
      async () => {
        const ann = (await machineSet()).metadata.annotations ?? {};
        return ann[ANNOTATIONS.inPlaceProgress] === '12 of 13 updated' ? ann : undefined;
      },
      120_000,
      200,
    );
    assert.notEqual(
      progress[ANNOTATIONS.currentConfigHash],
      h('h6'),
      'the rollout completed while a Machine had no node',
    );
    // n12 booted from an older payload (an empty root here): it needs the full update, drain and reboot.
    await joinNode('n12', {}, { machine: false });
    await setTestNodeRef(mgmt.kubeConfig, { name: `${POOL}-n12`, namespace: NS, node: 'n12' });
    await completed(h('h6'));
    assert.ok(watcher.max <= 3, `${watcher.max} nodes were unavailable at once`);
    await assertAllAt(h('h6'), 'v6');
    await assertJoinedNodes();
    await scaleTo(NODES.length);
  });

  it('when a pod can never be evicted and nodeDrainTimeout is reached, it should report it on the node, not mark it drained, and halt the rollout with the reason; once cleared, it should go on', async () => {
    const policy = guest.kubeConfig.makeApiClient(k8s.PolicyV1Api);
    // n01 is among the first nodes picked (one per zone, then by name). Its pod's PDB allows no disruption.
    await core.createNamespacedPod({
      namespace: NS,
      body: {
        metadata: { name: 'pinned', labels: { app: 'pinned' } },
        spec: { nodeName: 'n01', containers: [{ name: 'c', image: 'x' }] },
      },
    });
    await policy.createNamespacedPodDisruptionBudget({
      namespace: NS,
      body: { metadata: { name: 'pinned' }, spec: { maxUnavailable: 0, selector: { matchLabels: { app: 'pinned' } } } },
    });
    await patchSet({ spec: { template: { spec: { deletion: { nodeDrainTimeoutSeconds: 5 } } } } });
    watcher.reset();
    // Every progress the upgrader writes: while the budget refuses, it names n01's drain and the budget.
    const progress: string[] = [];
    const progressWatch = await new k8s.Watch(mgmt.kubeConfig).watch(
      `/apis/${CAPI_GROUP}/v1beta2/namespaces/${NS}/machinesets`,
      {},
      (_type: string, ms: MachineSetLike) => {
        const text = ms.metadata.annotations?.[ANNOTATIONS.inPlaceProgress];
        if (text !== undefined && progress.at(-1) !== text) progress.push(text);
      },
      () => undefined,
    );
    let failure: string;
    try {
      await target('h7', payload('v7'), '3');
      failure = await eventually(
        'the rollout to halt',
        async () => (await machineSet()).metadata.annotations?.[ANNOTATIONS.inPlaceFailure],
        120_000,
        200,
      );
    } finally {
      progressWatch.abort();
    }
    assert.match(
      failure,
      /^n01: drain failed: nodeDrainTimeout 5s reached with 1 pod\(s\) not evicted: default\/pinned/,
    );
    assert.ok(
      progress.some((p) =>
        /^\d+ of 10 updated; n01 draining, blocked by PodDisruptionBudget default\/pinned($|;)/.test(p),
      ),
      `no progress named the blocking budget: ${progress.join(' | ')}`,
    );
    await assertDrainGivenUp('n01', h('h7'));
    // Nodes handed out before the timeout (capacity freed by finished ones) finish; the halt starts no other.
    const handedH7 = async (): Promise<string[]> =>
      (await nodes())
        .filter((n) => n.metadata?.annotations?.[ANNOTATIONS.desiredConfig] === h('h7'))
        .map((n) => n.metadata?.name ?? '')
        .sort();
    const atHalt = await handedH7();
    assert.ok(
      atHalt.includes('n01') && atHalt.length >= 3,
      `nodes handed ${h('h7')} by the halt: ${atHalt.join(', ')}`,
    );
    await eventually(
      'the other nodes in flight to finish',
      async () =>
        (await machineSet()).metadata.annotations?.[ANNOTATIONS.inPlaceProgress] ===
        `${atHalt.length - 1} of 10 updated`,
      120_000,
      200,
    );
    assert.deepEqual(await handedH7(), atHalt, `no node was handed ${h('h7')} after the halt`);

    // The operator's fix: the pod goes, the timeout is lifted, the failure is cleared; the drain is retried.
    await core.deleteNamespacedPod({ name: 'pinned', namespace: NS, gracePeriodSeconds: 0 });
    await policy.deleteNamespacedPodDisruptionBudget({ name: 'pinned', namespace: NS });
    await patchSet({ spec: { template: { spec: { deletion: null } } } });
    await core.patchNode(
      { name: 'n01', body: { metadata: { annotations: { [ANNOTATIONS.drainFailure]: null } } } },
      merge,
    );
    const ms = await completed(h('h7'));
    assert.equal(ms.metadata.annotations?.[ANNOTATIONS.inPlaceFailure], undefined);
    await assertAllAt(h('h7'), 'v7');
    assert.ok(watcher.max <= 3, `${watcher.max} nodes were unavailable at once`);
  });

  it('when the agent Pod of a node in flight is deleted, it should give the node a new one and the rollout should complete', async () => {
    watcher.reset();
    await target('h7b', payload('v7b'), '3');
    // A node its agent has just taken up (Working, drain not applied yet): it has seconds of work left.
    const victim = await eventually(
      'a node taken up and not drained yet',
      async () => {
        const n = (await nodes()).find((x) => {
          const ann = x.metadata?.annotations ?? {};
          return (
            ann[ANNOTATIONS.desiredConfig] === h('h7b') &&
            ann[ANNOTATIONS.state] === 'Working' &&
            ann[ANNOTATIONS.lastAppliedDrain] !== `drain-${h('h7b')}`
          );
        });
        return n?.metadata?.name;
      },
      60_000,
      50,
    );
    await core.deleteNamespacedPod({ name: agentPodName(victim), namespace: GUEST_NAMESPACE, gracePeriodSeconds: 0 });
    const at = (await core.readNode({ name: victim })).metadata?.annotations?.[ANNOTATIONS.currentConfig];
    assert.notEqual(at, h('h7b'), `${victim} was done before its agent Pod went: nothing was tested`);
    await completed(h('h7b'));
    await assertAllAt(h('h7b'), 'v7b');
    assert.ok(watcher.max <= 3, `${watcher.max} nodes were unavailable at once`);
  });

  it('when the upgrader, the drainer and agents are SIGKILLed at random moments mid-rollout, it should still complete with the invariants held', async () => {
    await Promise.all([upgrader?.stop(), drainer?.stop()]);
    upgrader = undefined;
    drainer = undefined;
    const common = [
      '--kubeconfig',
      mgmt.kubeconfigPath,
      `--namespaces=${NS}`,
      '--leader-elect=false',
      '--log-level',
      'error',
    ];
    const commands: Record<'upgrader' | 'drainer', string[]> = {
      upgrader: [
        'inplace-upgrader',
        ...common,
        '--ignition-url',
        ignition.url,
        '--ignition-ca-file',
        ignition.caFile,
        '--resync',
        '2s',
      ],
      drainer: ['drainer', ...common],
    };
    const procs = new Map<string, ChildProcess>();
    const launch = (which: 'upgrader' | 'drainer'): void =>
      void procs.set(
        which,
        spawn(process.execPath, [KINDLING_BIN, ...commands[which]], { stdio: ['ignore', 'ignore', 'inherit'] }),
      );
    launch('upgrader');
    launch('drainer');
    const kills: string[] = [];
    try {
      watcher.reset();
      await target('h8', payload('v8'), '3');
      const done = completed(h('h8'), 180_000);
      let finished = false;
      void done.then(
        () => (finished = true),
        () => undefined,
      );
      await killAtRandom({
        kills,
        isFinished: () => finished,
        fleet,
        log,
        kill: (kind) => {
          procs.get(kind)?.kill('SIGKILL');
          launch(kind);
        },
      });
      await done;
    } finally {
      for (const p of procs.values()) p.kill('SIGKILL');
    }
    log.warn({ kills }, 'SIGKILLs during the rollout');
    const real = kills.filter((k) => !k.includes('skipped'));
    assert.ok(real.length >= 5, `only ${real.length} kills happened before the rollout completed: ${kills.join(', ')}`);
    assert.ok(
      real.some((k) => k.startsWith('agent ')) && real.includes('upgrader') && real.includes('drainer'),
      `not every kind was killed: ${kills.join(', ')}`,
    );
    assert.ok(watcher.max <= 3, `${watcher.max} nodes were unavailable at once`);
    await assertAllAt(h('h8'), 'v8');
  });
});

/**
 * SIGKILLs in turn the upgrader, an agent, the drainer, an agent, … at random moments (seeded, the seed is
 * logged) until the rollout finishes or 8 kills were made.
 */
async function killAtRandom(opts: {
  kills: string[];
  isFinished: () => boolean;
  kill: (kind: 'upgrader' | 'drainer') => void;
  fleet: AgentFleet;
  log: Logger;
}): Promise<void> {
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
