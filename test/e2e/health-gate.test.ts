/**
 * The health gate end to end on the local environment (`npm start`), in a file of its own (each e2e file keeps
 * within the per-file time budget, and local.test.ts's scenarios fill its own): the sample InPlace pool moves to
 * the sample release whose kubelet config the simulated kubelet refuses; the agent on the first host fails the
 * gate, restores the host root's old files and reboots, and the rollout halts there. Moved back to the release
 * it came from, the pool recovers.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import * as k8s from '#k8s';
import { ANNOTATIONS, NODE_STATES } from '../../api/src/keys.js';
import { isReady } from '../../inplace-upgrader/src/preview.js';
import { eventually } from '../bed/src/index.js';
import { useLocalEnvironment, LocalEnvironment, NS } from './environment.js';

const MINUTES = 60_000;

describe('the health gate on the local environment', { timeout: 20 * MINUTES }, () => {
  let env: LocalEnvironment;
  useLocalEnvironment('gate', (e) => (env = e));

  it('when the InPlace pool moves to a release whose kubelet config the kubelet refuses, the first node should fail the health gate, be rolled back to its old files and stay Degraded with the reason, no other node touched; moved back, the pool should recover', async () => {
    const pool = await env.pool('inplace');
    const good = pool.spec.release.image;
    const uids = (await env.machines('inplace')).map((m) => m.metadata.uid).sort();
    const hosts = await env.hosts('inplace');
    assert.equal(hosts.length, 3);
    const before = new Map(await Promise.all(hosts.map(async (h) => [h, await hostFiles(env, h)] as const)));
    const goodHash = await configsOf(env);
    const broken = good.replace(/:1\.36\.2$/, ':1.36.3-broken-kubelet');
    assert.notEqual(broken, good);
    // A pre-release tag: the pool takes it only when allowed to.
    await env.patchPool('inplace', {
      spec: {
        release: { image: broken, allowPrerelease: true },
        management: { inPlace: { healthCheckTimeout: '20s' } },
      },
    });

    const failed = await eventually(
      'a node Degraded by the health gate',
      async () =>
        (await env.nodes('inplace')).find((n) => n.metadata?.annotations?.[ANNOTATIONS.state] === NODE_STATES.degraded),
      10 * MINUTES,
      2000,
    );
    const name = failed.metadata?.name ?? '';
    const target = await assertRolledBack(env, failed, goodHash, before.get(name));
    const condition = await eventually(
      'the pool to say the update failed',
      async () => {
        const c = (await env.pool('inplace')).status?.conditions?.find((x) => x.type === 'UpdatingVersion');
        return c?.status === 'False' && c.reason === 'Failed' ? c : undefined;
      },
      3 * MINUTES,
      2000,
    );
    assert.ok(condition.message.includes(`${name}: health check failed`), condition.message);
    // The rollout halted on the failed node: nobody else was handed the broken config, or changed.
    for (const other of hosts.filter((h) => h !== name)) await assertUntouched(env, other, target, before.get(other));
    assert.equal(
      (await readNode(env, name)).metadata?.annotations?.[ANNOTATIONS.state],
      NODE_STATES.degraded,
      `${name} stays Degraded`,
    );

    // Back to the good release: the failed node is retargeted and the pool is whole again.
    await env.patchPool('inplace', { spec: { release: { image: good } } });
    await eventually(
      'every inplace node on the good release, none Degraded',
      async () => {
        const nodes = await env.nodes('inplace');
        return nodes.length === 3 && nodes.every((n) => settledOn(n, goodHash));
      },
      10 * MINUTES,
      2000,
    );
    await eventually(
      'the inplace pool Ready, no update in progress',
      async () => {
        const conditions = (await env.pool('inplace')).status?.conditions ?? [];
        const updating = conditions.find((c) => c.type === 'UpdatingVersion');
        return (
          conditions.some((c) => c.type === 'Ready' && c.status === 'True') &&
          updating?.status === 'False' &&
          updating.reason === 'AsExpected'
        );
      },
      5 * MINUTES,
      2000,
    );
    for (const h of hosts) assert.deepEqual(await hostFiles(env, h), before.get(h), `${h}'s files`);
    assert.deepEqual((await env.machines('inplace')).map((m) => m.metadata.uid).sort(), uids, 'no Machine replaced');
    // The pool reads Ready from its nodes; the upgrader gives the Machines back to remediation in its next pass.
    await eventually(
      'every inplace Machine given back to remediation',
      async () =>
        (await env.machines('inplace')).every(
          (m) => m.metadata.annotations?.[ANNOTATIONS.capiSkipRemediation] === undefined,
        ),
      2 * MINUTES,
      2000,
    );
  });
});

/**
 * The inplace pool's config now, and undefined: a node never updated in place carries no config annotation.
 * Every node is on one of them.
 */
async function configsOf(env: LocalEnvironment): Promise<Set<string | undefined>> {
  const set = (await env.custom.getNamespacedCustomObject({
    group: 'cluster.x-k8s.io',
    version: 'v1beta2',
    namespace: NS,
    plural: 'machinesets',
    name: 'inplace',
  })) as { metadata: { annotations?: Record<string, string> } };
  const current = set.metadata.annotations?.[ANNOTATIONS.currentConfigHash];
  assert.ok(current, 'the inplace MachineSet has a current config');
  const configs = new Set([current, undefined]);
  for (const n of await env.nodes('inplace'))
    assert.ok(
      configs.has(n.metadata?.annotations?.[ANNOTATIONS.currentConfig]),
      `${n.metadata?.name ?? ''} is on another config`,
    );
  return configs;
}

/**
 * The node the health gate failed: Degraded with the gate's reason, back on its old config and the host root's
 * old files, Ready again (its kubelet takes the restored config). Gives the config it was handed.
 */
async function assertRolledBack(
  env: LocalEnvironment,
  failed: k8s.V1Node,
  goodHash: Set<string | undefined>,
  filesBefore: Record<string, string | undefined> | undefined,
): Promise<string> {
  const name = failed.metadata?.name ?? '';
  const ann = failed.metadata?.annotations ?? {};
  assert.match(
    ann[ANNOTATIONS.reason] ?? '',
    /^health check failed: 20s after the reboot into \w+, the Node is not Ready \(Ready=False, KubeletConfigInvalid: kubelet cannot start: .*maxPods \(--max-pods\) -1 must not be a negative number\); restored the previous files and units and rebooted$/,
  );
  assert.ok(
    goodHash.has(ann[ANNOTATIONS.currentConfig]),
    `${name} is back on its old config, not ${ann[ANNOTATIONS.currentConfig] ?? '(none)'}`,
  );
  const target = ann[ANNOTATIONS.desiredConfig] ?? '';
  assert.ok(target !== '' && !goodHash.has(target), `${name} was handed the broken config`);
  assert.deepEqual(await hostFiles(env, name), filesBefore, `${name}'s files were not restored`);
  await eventually(
    `${name} Ready again after the rollback`,
    async () => isReady(await readNode(env, name)),
    3 * MINUTES,
    1000,
  );
  return target;
}

/** A node the halted rollout never reached: not handed the broken config, not Degraded, its files as before. */
async function assertUntouched(
  env: LocalEnvironment,
  name: string,
  broken: string,
  filesBefore: Record<string, string | undefined> | undefined,
): Promise<void> {
  const ann = (await readNode(env, name)).metadata?.annotations ?? {};
  assert.notEqual(ann[ANNOTATIONS.desiredConfig], broken, `${name} was handed the broken config`);
  assert.notEqual(ann[ANNOTATIONS.state], NODE_STATES.degraded, `${name} is Degraded`);
  assert.deepEqual(await hostFiles(env, name), filesBefore, `${name}'s files changed`);
}

/** On one of `hashes`, handed nothing else, not Degraded, Ready and schedulable. */
function settledOn(node: k8s.V1Node, hashes: Set<string | undefined>): boolean {
  const a = node.metadata?.annotations ?? {};
  const handed = a[ANNOTATIONS.desiredConfig] ?? a[ANNOTATIONS.currentConfig];
  return (
    a[ANNOTATIONS.state] !== NODE_STATES.degraded &&
    hashes.has(a[ANNOTATIONS.currentConfig]) &&
    hashes.has(handed) &&
    isReady(node) &&
    node.spec?.unschedulable !== true
  );
}

/** The host root's files the broken release writes (undefined where absent). */
async function hostFiles(env: LocalEnvironment, host: string): Promise<Record<string, string | undefined>> {
  const paths = ['etc/kindling/os-release', 'etc/kubernetes/kubelet.conf'];
  return Object.fromEntries(await Promise.all(paths.map(async (p) => [p, await env.hostFile(host, p)] as const)));
}

const readNode = (env: LocalEnvironment, name: string): Promise<k8s.V1Node> =>
  env.guest.makeApiClient(k8s.CoreV1Api).readNode({ name });
