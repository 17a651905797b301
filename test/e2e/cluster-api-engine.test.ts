/**
 * End to end on the local environment (`npm start`): the sample pool `capi` runs on the ClusterAPI in-place
 * engine. The real Cluster API manager (RuntimeSDK, InPlaceUpdates) drives its MachineDeployment: it clones
 * Kindling's bootstrap template into a KindlingConfig per Machine, asks Kindling's extension (served by the
 * inplace-upgrader, registered by an ExtensionConfig) what it can update in place, and calls UpdateMachine,
 * which drives the same agent protocol as the MachineSet engine (agent on the host, central drainer). What
 * the extension refuses, Cluster API rolls out by replacement. The test puts a workload of its own on the
 * pool's nodes behind a PodDisruptionBudget, so the extension's drains evict real pods; it pauses the pool
 * mid-update, and SIGKILLs the upgrader (which hosts the extension) and the drainer at random points of an
 * update (seeded: `KINDLING_CHAOS_SEED=<seed>` replays the plan).
 */
import { after, before, describe, it, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { randomInt } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as k8s from '@kubernetes/client-node';
import { BOOTSTRAP_API_VERSION, type KindlingConfig } from '../../api/src/bootstrap.js';
import { ANNOTATIONS, NODE_STATES, userDataSecretName } from '../../api/src/keys.js';
import { AvailabilityWatcher } from '../../inplace-upgrader/testing/index.js';
import { eventually } from '../bed/src/index.js';
import { PdbWatcher, killRunning, seeded, shuffled, supervision } from './disruption.js';
import { LocalEnvironment, NS, WorkloadWatcher, type Machine, type Workload } from './environment.js';

const MINUTES = 60_000;
const POOL = 'capi';
const osRelease = (version: string): string => `Kindling Linux ${version}\n`;
/** The test's own workload on the pool's two nodes: a drain evicts its pods one at a time, as the budget allows. */
const WEB: Workload = { namespace: 'default', name: 'capi-web', labelSelector: 'app=capi-web', replicas: 3, maxUnavailable: 1 };
/** A file of the pool's own config document (ConfigMap EXTRA): a new value is a new payload, done in place. */
const EXTRA = { configMap: 'capi-extra', path: 'etc/kindling/capi-extra' } as const;
/**
 * Leader timings every component reads from its environment (KINDLING_<FLAG>): a SIGKILLed leader's Lease
 * frees in half a minute, with a renew deadline roomy enough for a machine shared by many suites (at the
 * defaults a leader whose apiserver answers its renewal after 10 s exits, seen at load 45).
 */
const LEADER_ENV = { KINDLING_LEADER_ELECT_LEASE_DURATION: '30s', KINDLING_LEADER_ELECT_RENEW_DEADLINE: '20s', KINDLING_LEADER_ELECT_RETRY_PERIOD: '2s' };

interface CapiMachine extends Machine {
  spec?: { bootstrap?: { configRef?: { name: string }; dataSecretName?: string } };
  status?: Machine['status'] & { conditions?: { type: string; status: string; reason?: string }[] };
}

interface NodeConfig {
  name: string;
  desired?: string;
  current?: string;
  state?: string;
}

/** What an update went through, seen from the guest independently of Kindling. */
interface Watchers {
  nodes: AvailabilityWatcher;
  pods: WorkloadWatcher;
  pdbs: PdbWatcher;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Never more than maxUnavailable (1) nodes down and at least one seen down; pods evicted, the budget never broken. */
function assertHeld(w: Watchers, context = ''): void {
  assert.ok(w.nodes.events > 0, `the node watcher saw Node events ${context}`);
  assert.ok(w.nodes.max >= 1, `the watcher never saw a node unavailable (${w.nodes.events} events): the bound below was not measured ${context}`);
  assert.ok(w.nodes.max <= 1, `at most 1 unavailable (maxUnavailable), saw ${w.nodes.max} ${context}`);
  assert.ok(w.pods.evicted.size >= 1, `no pod of ${WEB.namespace}/${WEB.name} was evicted through the Eviction API (${w.pods.events} events): the drains did not meet the budget ${context}`);
  const floor = WEB.replicas - WEB.maxUnavailable;
  assert.ok(Number.isFinite(w.pods.min) && w.pods.min >= floor, `never fewer than ${floor} of ${WEB.replicas} pods available, saw ${w.pods.min} ${context}`);
  assert.ok(w.pdbs.events > 0, `the PodDisruptionBudget watcher saw the budgets ${context}`);
  assert.deepEqual(w.pdbs.violations, [], `PodDisruptionBudgets violated ${context}`);
}

interface HookLine {
  hook?: string;
  status?: string;
  message?: string;
}

describe('a NodePool on the ClusterAPI in-place engine, end to end', { timeout: 60 * MINUTES }, () => {
  let env: LocalEnvironment;
  let stateDir: string;

  const machines = async (): Promise<CapiMachine[]> => (await env.machines(POOL)).filter((m) => !m.metadata.deletionTimestamp);
  const uids = async (): Promise<string[]> => (await machines()).map((m) => m.metadata.uid ?? '').sort();
  const kindlingConfigs = async (): Promise<KindlingConfig[]> => {
    const [group, version] = BOOTSTRAP_API_VERSION.split('/') as [string, string];
    return ((await env.custom.listNamespacedCustomObject({ group, version, namespace: NS, plural: 'kindlingconfigs', labelSelector: `kindling.dev/nodepool=${POOL}` })) as { items: KindlingConfig[] }).items;
  };
  const hostFiles = async (path: string): Promise<(string | undefined)[]> => Promise.all((await env.hosts(POOL)).map((h) => env.hostFile(h, path)));
  const poolReady = async (): Promise<boolean> => (await env.pool(POOL)).status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;
  const hookLines = async (hook: string): Promise<HookLine[]> =>
    (await readFile(join(stateDir, 'logs', 'inplace-upgrader.log'), 'utf8'))
      .split('\n')
      .filter((l) => l.includes(`"hook":"${hook}"`))
      .map((l) => JSON.parse(l) as HookLine);

  const upToDate = async (): Promise<boolean> => (await machines()).every((m) => m.status?.conditions?.some((c) => c.type === 'UpToDate' && c.status === 'True'));
  const nodeConfigs = async (): Promise<NodeConfig[]> =>
    (await env.nodes(POOL)).map((n) => {
      const ann = n.metadata?.annotations ?? {};
      return { name: n.metadata?.name ?? '', desired: ann[ANNOTATIONS.desiredConfig], current: ann[ANNOTATIONS.currentConfig], state: ann[ANNOTATIONS.state] };
    });
  const condition = async (type: string): Promise<{ status: string; message?: string } | undefined> => (await env.pool(POOL)).status?.conditions?.find((c) => c.type === type);
  const deploymentPaused = async (): Promise<boolean> => {
    const md = (await env.custom.getNamespacedCustomObject({ group: 'cluster.x-k8s.io', version: 'v1beta2', namespace: NS, plural: 'machinedeployments', name: POOL })) as Machine;
    return md.metadata.annotations?.[ANNOTATIONS.capiPaused] !== undefined;
  };

  /** The pool's own config document (ConfigMap EXTRA) writing `value` into EXTRA.path: a new payload each time. */
  const setExtra = async (value: string): Promise<void> => {
    const core = env.mgmt.makeApiClient(k8s.CoreV1Api);
    const doc = [
      'apiVersion: machineconfiguration.openshift.io/v1',
      'kind: MachineConfig',
      'metadata: { name: 60-capi-extra }',
      'spec:',
      '  config:',
      '    ignition: { version: 3.2.0 }',
      `    storage: { files: [{ path: /${EXTRA.path}, mode: 420, overwrite: true, contents: { source: "data:,${value}%0A" } }] }`,
    ].join('\n');
    const body = { metadata: { name: EXTRA.configMap }, data: { config: doc } };
    const exists = await core.readNamespacedConfigMap({ name: EXTRA.configMap, namespace: NS }).then(() => true, () => false);
    if (exists) {
      await core.replaceNamespacedConfigMap({ name: EXTRA.configMap, namespace: NS, body });
      return;
    }
    await core.createNamespacedConfigMap({ namespace: NS, body });
    await env.patchPool(POOL, { spec: { config: [{ name: 'motd' }, { name: EXTRA.configMap }] } });
  };

  /** Every host with EXTRA.path at `value`, on the Machines `old`, each UpToDate, the pool Ready: an update in place is done. */
  const updatedInPlace = (old: string[], value: string): Promise<boolean> =>
    eventually(`every ${POOL} host with /${EXTRA.path} = ${value}, its Machine UpToDate`, async () => {
      const files = await hostFiles(EXTRA.path);
      return files.length === 2 && files.every((f) => f === `${value}\n`) && (await uids()).join() === old.join() && (await upToDate()) && (await poolReady());
    }, 15 * MINUTES, 2000);

  /** The test's workload on the pool's nodes, once every pod runs there and its budget allows one disruption. */
  const startWorkload = async (): Promise<void> => {
    const labels = { app: WEB.name };
    const policy = env.guest.makeApiClient(k8s.PolicyV1Api);
    const core = env.guest.makeApiClient(k8s.CoreV1Api);
    // A soft spread: a hard one would leave an evicted pod nowhere to go while its node is cordoned.
    const spread = { maxSkew: 1, topologyKey: 'kubernetes.io/hostname', whenUnsatisfiable: 'ScheduleAnyway', labelSelector: { matchLabels: labels } };
    await env.guest.makeApiClient(k8s.AppsV1Api).createNamespacedDeployment({
      namespace: WEB.namespace,
      body: {
        metadata: { name: WEB.name },
        spec: {
          replicas: WEB.replicas,
          selector: { matchLabels: labels },
          template: { metadata: { labels }, spec: { nodeSelector: { 'kindling.dev/pool': POOL }, topologySpreadConstraints: [spread], containers: [{ name: 'pause', image: 'registry.k8s.io/pause:3.10' }] } },
        },
      },
    });
    await policy.createNamespacedPodDisruptionBudget({ namespace: WEB.namespace, body: { metadata: { name: WEB.name }, spec: { maxUnavailable: WEB.maxUnavailable, selector: { matchLabels: labels } } } });
    await eventually(`${WEB.namespace}/${WEB.name} running on the ${POOL} nodes, its budget allowing one disruption`, async () => {
      const nodes = new Set((await env.nodes(POOL)).map((n) => n.metadata?.name));
      const pods = (await core.listNamespacedPod({ namespace: WEB.namespace, labelSelector: WEB.labelSelector })).items;
      const running = pods.filter((p) => nodes.has(p.spec?.nodeName) && p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True'));
      const pdb = await policy.readNamespacedPodDisruptionBudget({ name: WEB.name, namespace: WEB.namespace });
      return running.length === WEB.replicas && pdb.status?.currentHealthy === WEB.replicas && pdb.status.disruptionsAllowed === WEB.maxUnavailable;
    }, 3 * MINUTES, 1000);
  };

  const startWatchers = async (): Promise<Watchers> => {
    const w = { nodes: new AvailabilityWatcher(env.guest, (await env.nodes(POOL)).map((n) => n.metadata?.name ?? '')), pods: new WorkloadWatcher(env.guest, WEB), pdbs: new PdbWatcher(env.guest) };
    await Promise.all([w.nodes.start(), w.pods.start(), w.pdbs.start()]);
    return w;
  };
  const stopWatchers = (w: Watchers): void => {
    w.nodes.stop();
    w.pods.stop();
    w.pdbs.stop();
  };

  /** Two Running Machines, none of them one of `old`, every host at `release`: a rollout by replacement is done. */
  const replaced = (old: string[], release: string): Promise<boolean> =>
    eventually(`the ${POOL} pool replaced by new Machines at ${release}`, async () => {
      const now = await uids();
      const files = await hostFiles('etc/kindling/os-release');
      return now.length === 2 && now.every((u) => !old.includes(u)) && (await env.agrees(POOL, 2)) && files.length === 2 && files.every((f) => f === osRelease(release)) && (await poolReady());
    }, 15 * MINUTES, 2000);

  before(async () => {
    stateDir = await mkdtemp(join(tmpdir(), 'kindling-e2e-capi-'));
    env = new LocalEnvironment(stateDir);
    await env.start({ timeoutMs: 15 * MINUTES, env: LEADER_ENV });
  });

  after(async () => {
    const code = await env.stop();
    assert.equal(code, 0, env.output.slice(-3000));
    await rm(stateDir, { recursive: true, force: true });
  });

  it('when started, the pool should be Ready with each Machine booted from its KindlingConfig’s data Secret', async () => {
    assert.match(env.output, /capi: 2\/2 Ready/);
    assert.ok(await env.agrees(POOL, 2), 'Machines, Nodes and hosts agree on 2');
    const configs = await kindlingConfigs();
    const hash = (await env.pool(POOL)).status?.configHash ?? '';
    assert.equal(configs.length, 2);
    for (const c of configs) {
      assert.deepEqual([c.spec.configHash, c.status?.dataSecretName, c.status?.initialization?.dataSecretCreated], [hash, userDataSecretName(POOL, hash), true]);
    }
    for (const m of await machines()) assert.equal(m.spec?.bootstrap?.dataSecretName, userDataSecretName(POOL, hash), `${m.metadata.name} booted from the pool's user-data`);
    assert.deepEqual(await hostFiles('etc/kindling/os-release'), [osRelease('1.36.2'), osRelease('1.36.2')]);
  });

  it('when the release changes, Cluster API should update every Machine in place through Kindling: same Machines, new files, UpToDate, pods evicted under their budget, never more than maxUnavailable down', async () => {
    const before = await uids();
    await startWorkload();
    const watchers = await startWatchers();
    try {
      const next = (await env.pool(POOL)).spec.release.image.replace(/:1\.36\.2$/, ':1.36.3');
      await env.patchPool(POOL, { spec: { release: { image: next } } });
      await eventually('every capi host at 1.36.3, its Machine UpToDate', async () => {
        const files = await hostFiles('etc/kindling/os-release');
        const upToDate = (await machines()).every((m) => m.status?.conditions?.some((c) => c.type === 'UpToDate' && c.status === 'True'));
        return files.length === 2 && files.every((f) => f === osRelease('1.36.3')) && upToDate && (await poolReady());
      }, 15 * MINUTES, 2000);
    } finally {
      stopWatchers(watchers);
    }
    assert.deepEqual(await uids(), before, 'no Machine was replaced');
    const hash = (await env.pool(POOL)).status?.configHash ?? '';
    assert.deepEqual((await kindlingConfigs()).map((c) => [c.spec.configHash, c.status?.dataSecretName]), [[hash, userDataSecretName(POOL, hash)], [hash, userDataSecretName(POOL, hash)]]);
    assertHeld(watchers);
    const claimed = (await hookLines('CanUpdateMachineSet')).filter((l) => l.status === 'Success' && /^in place: /.test(l.message ?? ''));
    assert.ok(claimed.length > 0, 'the extension claimed the change in place');
    const done = (await hookLines('UpdateMachine')).filter((l) => l.status === 'Success' && /is at /.test(l.message ?? ''));
    assert.ok(done.length >= 2, `UpdateMachine reported both Machines done: ${JSON.stringify(done)}`);
  });

  it('when pausedUntil is set mid-update, no further Machine should be handed its payload until it clears, the status should say where the update stopped, and then the update should complete', async () => {
    const before = await uids();
    const from = (await env.pool(POOL)).status?.configHash ?? '';
    await setExtra('paused');
    // Paused as soon as the first node is handed the payload: the rest of its update (drain, apply, reboot,
    // health gate) and Cluster API's move to the next Machine take far longer than this.
    const first = await eventually(`a ${POOL} node handed a payload other than ${from}`, async () => (await nodeConfigs()).find((n) => n.desired !== undefined && n.desired !== from), 5 * MINUTES, 200);
    const target = first.desired ?? '';
    await env.patchPool(POOL, { spec: { pausedUntil: 'true' } });
    await eventually('the MachineDeployment paused', deploymentPaused, MINUTES, 200);
    const handed = (await nodeConfigs()).filter((n) => n.desired === target).map((n) => n.name);
    assert.deepEqual(handed, [first.name], 'only the first node was handed the payload when the pause took effect');
    await eventually(`${first.name} done at ${target}`, async () => (await nodeConfigs()).some((n) => n.name === first.name && n.current === target && n.state === NODE_STATES.done), 10 * MINUTES, 1000);
    await eventually('the pool saying where the update stopped', async () => /: 1 of 2 updated; paused at 1 of 2 by spec\.pausedUntil/.test((await condition('UpdatingConfig'))?.message ?? ''), 2 * MINUTES, 1000);
    // Held: while the pool stays paused, the other node is not handed the payload.
    for (const until = Date.now() + 45_000; Date.now() < until; await sleep(1000)) {
      const others = (await nodeConfigs()).filter((n) => n.name !== first.name && n.desired === target);
      assert.deepEqual(others.map((n) => n.name), [], 'no further node handed out while the pool is paused');
    }
    assert.match((await condition('UpdatingConfig'))?.message ?? '', /1 of 2 updated; paused at 1 of 2/, 'still paused at 1 of 2');
    await env.patchPool(POOL, { spec: { pausedUntil: null } });
    await updatedInPlace(before, 'paused');
    assert.deepEqual(await uids(), before, 'no Machine was replaced');
    await eventually('the pool no longer updating its config', async () => (await condition('UpdatingConfig'))?.status === 'False', 2 * MINUTES, 1000);
  });

  it('when the upgrader (the extension’s process) and the drainer are SIGKILLed at random points of an in-place update, it should complete: same Machines, new files, the budget and maxUnavailable held', async (t: TestContext) => {
    const seed = Number(process.env.KINDLING_CHAOS_SEED ?? randomInt(2 ** 31));
    const random = seeded(seed);
    const plan = shuffled(['inplace-upgrader', 'inplace-upgrader', 'drainer', 'drainer'], random).map((replica) => ({ replica, delayMs: 500 + Math.floor(random() * 4500) }));
    const say = (line: string): void => {
      t.diagnostic(line);
      process.stderr.write(`capi chaos: ${line}\n`);
    };
    say(`seed ${seed} (replay with KINDLING_CHAOS_SEED=${seed}); plan: ${plan.map((k) => `kill ${k.replica} after ${k.delayMs} ms`).join(', ')}`);
    const before = await uids();
    const exitsBefore = (env.output.match(/\n(inplace-upgrader|drainer) exited, code 137 \(SIGKILL\)/g) ?? []).length;
    const kills: { replica: string; pid: number; at: number }[] = [];
    let completedAt: number | undefined;
    const started = Date.now();
    const watchers = await startWatchers();
    try {
      await setExtra('killed');
      const update = updatedInPlace(before, 'killed').then(() => (completedAt = Date.now() - started));
      const chaos = (async (): Promise<void> => {
        for (const step of plan) {
          await sleep(step.delayMs);
          if (completedAt !== undefined) return;
          kills.push({ replica: step.replica, pid: await killRunning(env, step.replica), at: Date.now() - started });
        }
      })();
      await Promise.all([update, chaos]);
    } finally {
      stopWatchers(watchers);
      say(`update complete after ${((completedAt ?? NaN) / 1000).toFixed(1)} s; kills: ${kills.map((k) => `+${(k.at / 1000).toFixed(1)} s ${k.replica} (pid ${k.pid})`).join(', ')}`);
      say(`the environment's supervision:\n${supervision(env.output)}`);
    }
    const context = `(seed ${seed})`;
    assert.equal(kills.length, plan.length, `every kill ran before the update completed ${context}`);
    assert.ok(kills.every((k) => k.at < (completedAt ?? 0)), `every kill happened during the update ${context}`);
    const exits = (env.output.match(/\n(inplace-upgrader|drainer) exited, code 137 \(SIGKILL\)/g) ?? []).length;
    assert.equal(exits - exitsBefore, kills.length, `each SIGKILL was reported by the environment's supervisor ${context}`);
    assert.deepEqual(await uids(), before, `no Machine was replaced ${context}`);
    assertHeld(watchers, context);
    const degraded = (await nodeConfigs()).filter((n) => n.state === NODE_STATES.degraded);
    assert.deepEqual(degraded, [], `no node Degraded ${context}`);
  });

  it('when the infrastructure template changes, the extension should refuse and Cluster API should replace the Machines', async () => {
    const before = await uids();
    const objects = k8s.KubernetesObjectApi.makeApiClient(env.mgmt);
    await objects.create({ apiVersion: 'infrastructure.kindling.dev/v1alpha1', kind: 'LocalMachineTemplate', metadata: { name: 'local-b', namespace: NS }, spec: { template: { spec: { failureDomains: ['zone-b', 'zone-c'] } } } } as k8s.KubernetesObject);
    await env.patchPool(POOL, { spec: { platform: { infrastructureTemplateRef: { apiGroup: 'infrastructure.kindling.dev', kind: 'LocalMachineTemplate', name: 'local-b' } } } });
    await replaced(before, '1.36.3');
    assert.match((await hookLines('CanUpdateMachineSet')).at(-1)?.message ?? '', /must roll: .*another infrastructure template \("local" → "local-b"\)/);
  });

  it('when the release and the template change together, Cluster API should roll out by replacement', async () => {
    const before = await uids();
    const previous = (await env.pool(POOL)).spec.release.image.replace(/:1\.36\.3$/, ':1.36.2');
    await env.patchPool(POOL, { spec: { release: { image: previous }, platform: { infrastructureTemplateRef: { apiGroup: 'infrastructure.kindling.dev', kind: 'LocalMachineTemplate', name: 'local' } } } });
    await replaced(before, '1.36.2');
    const last = (await hookLines('CanUpdateMachineSet')).at(-1)?.message ?? '';
    assert.match(last, /in place: .*KindlingConfigTemplate configHash/, 'the payload alone could have been done in place');
    assert.match(last, /must roll: .*another infrastructure template/, 'the template made it roll');
  });

  it('when the new payload carries kernel arguments, Cluster API should roll out by replacement instead of halting on a Degraded node', async () => {
    const before = await uids();
    const core = env.mgmt.makeApiClient(k8s.CoreV1Api);
    const doc = [
      'apiVersion: machineconfiguration.openshift.io/v1',
      'kind: MachineConfig',
      'metadata: { name: 50-kargs }',
      'spec:',
      '  kernelArguments: [nosmt]',
      '  config:',
      '    ignition: { version: 3.2.0 }',
      '    storage: { files: [{ path: /etc/kindling/kargs-sample, mode: 420, contents: { source: "data:,nosmt%0A" } }] }',
    ].join('\n');
    await core.createNamespacedConfigMap({ namespace: NS, body: { metadata: { name: 'kargs' }, data: { config: doc } } });
    await env.patchPool(POOL, { spec: { config: [{ name: 'motd' }, { name: 'kargs' }] } });
    await replaced(before, '1.36.2');
    assert.deepEqual(await hostFiles('etc/kindling/kargs-sample'), ['nosmt\n', 'nosmt\n'], 'the new hosts booted the new payload');
    assert.match((await hookLines('CanUpdateMachineSet')).at(-1)?.message ?? '', /must roll: .*holds what the node agent cannot apply in place \(kernelArguments/);
    const degraded = (await env.nodes(POOL)).filter((n) => n.metadata?.annotations?.['machineconfiguration.openshift.io/state'] === 'Degraded');
    assert.deepEqual(degraded, [], 'no node Degraded');
  });
});
