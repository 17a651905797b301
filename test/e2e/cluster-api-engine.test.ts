/**
 * End to end on the local environment (`npm start`): the sample pool `capi` runs on the ClusterAPI in-place
 * engine. The real Cluster API manager (RuntimeSDK, InPlaceUpdates) drives its MachineDeployment: it clones
 * Kindling's bootstrap template into a KindlingConfig per Machine, asks Kindling's extension (served by the
 * inplace-upgrader, registered by an ExtensionConfig) what it can update in place, and calls UpdateMachine,
 * which drives the same agent protocol as the MachineSet engine (agent on the host, central drainer). What
 * the extension refuses, Cluster API rolls out by replacement. The test puts a workload of its own on the
 * pool's nodes behind a PodDisruptionBudget, so the extension's drains evict real pods. (A pause mid-update
 * and SIGKILLs during one: cluster-api-disruption.test.ts, each file within the runner's 10 minutes.)
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as k8s from '#k8s';
import { BOOTSTRAP_API_VERSION, type KindlingConfig } from '../../api/src/bootstrap.js';
import { userDataSecretName } from '../../api/src/keys.js';
import { eventually } from '../bed/src/index.js';
import { CapiPool, POOL, assertHeld, stopWatchers, type CapiMachine } from './cluster-api.js';
import { LocalEnvironment, NS } from './environment.js';

const MINUTES = 60_000;
const osRelease = (version: string): string => `Kindling Linux ${version}\n`;

interface HookLine {
  hook?: string;
  status?: string;
  message?: string;
}

describe('a NodePool on the ClusterAPI in-place engine, end to end', { timeout: 60 * MINUTES }, () => {
  let env: LocalEnvironment;
  let stateDir: string;

  let pool: CapiPool;
  const machines = (): Promise<CapiMachine[]> => pool.machines();
  const uids = (): Promise<string[]> => pool.uids();
  const kindlingConfigs = async (): Promise<KindlingConfig[]> => {
    const [group, version] = BOOTSTRAP_API_VERSION.split('/') as [string, string];
    return (
      (await env.custom.listNamespacedCustomObject({
        group,
        version,
        namespace: NS,
        plural: 'kindlingconfigs',
        labelSelector: `kindling.dev/nodepool=${POOL}`,
      })) as { items: KindlingConfig[] }
    ).items;
  };
  const hostFiles = (path: string): Promise<(string | undefined)[]> => pool.hostFiles(path);
  const poolReady = (): Promise<boolean> => pool.ready();
  const hookLines = async (hook: string): Promise<HookLine[]> =>
    (await readFile(join(stateDir, 'logs', 'inplace-upgrader.log'), 'utf8'))
      .split('\n')
      .filter((l) => l.includes(`"hook":"${hook}"`))
      .map((l) => JSON.parse(l) as HookLine);

  /** Two Running Machines, none of them one of `old`, every host at `release`: a rollout by replacement is done. */
  const replaced = (old: string[], release: string): Promise<boolean> =>
    eventually(
      `the ${POOL} pool replaced by new Machines at ${release}`,
      async () => {
        const now = await uids();
        const files = await hostFiles('etc/kindling/os-release');
        return (
          now.length === 2 &&
          now.every((u) => !old.includes(u)) &&
          (await env.agrees(POOL, 2)) &&
          files.length === 2 &&
          files.every((f) => f === osRelease(release)) &&
          (await poolReady())
        );
      },
      15 * MINUTES,
      2000,
    );

  before(async () => {
    stateDir = await mkdtemp(join(tmpdir(), 'kindling-e2e-capi-'));
    env = new LocalEnvironment(stateDir);
    pool = new CapiPool(env);
    // Leader election stays on, with timings for a machine shared by many suites: at the defaults a leader
    // whose apiserver answers its renewal after 10 s exits (seen at load 45).
    await env.start({
      timeoutMs: 15 * MINUTES,
      env: {
        KINDLING_LEADER_ELECT_LEASE_DURATION: '120s',
        KINDLING_LEADER_ELECT_RENEW_DEADLINE: '90s',
        KINDLING_LEADER_ELECT_RETRY_PERIOD: '5s',
      },
    });
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
      assert.deepEqual(
        [c.spec.configHash, c.status?.dataSecretName, c.status?.initialization?.dataSecretCreated],
        [hash, userDataSecretName(POOL, hash), true],
      );
    }
    for (const m of await machines())
      assert.equal(
        m.spec?.bootstrap?.dataSecretName,
        userDataSecretName(POOL, hash),
        `${m.metadata.name} booted from the pool's user-data`,
      );
    assert.deepEqual(await hostFiles('etc/kindling/os-release'), [osRelease('1.36.2'), osRelease('1.36.2')]);
  });

  it('when the release changes, Cluster API should update every Machine in place through Kindling: same Machines, new files, UpToDate, pods evicted under their budget, never more than maxUnavailable down', async () => {
    const before = await uids();
    await pool.startWorkload();
    const watchers = await pool.startWatchers();
    try {
      const next = (await env.pool(POOL)).spec.release.image.replace(/:1\.36\.2$/, ':1.36.3');
      await env.patchPool(POOL, { spec: { release: { image: next } } });
      await eventually(
        'every capi host at 1.36.3, its Machine UpToDate',
        async () => {
          const files = await hostFiles('etc/kindling/os-release');
          const upToDate = (await machines()).every((m) =>
            m.status?.conditions?.some((c) => c.type === 'UpToDate' && c.status === 'True'),
          );
          return files.length === 2 && files.every((f) => f === osRelease('1.36.3')) && upToDate && (await poolReady());
        },
        15 * MINUTES,
        2000,
      );
    } finally {
      stopWatchers(watchers);
      // The rollouts below go through Cluster API's own drains, which wait out a budget's refusal on their own
      // schedule: with the workload still there a rollout took two minutes instead of half of one, too long for
      // the file to stay within the runner's 10 minutes.
      await pool.stopWorkload();
    }
    assert.deepEqual(await uids(), before, 'no Machine was replaced');
    const hash = (await env.pool(POOL)).status?.configHash ?? '';
    assert.deepEqual(
      (await kindlingConfigs()).map((c) => [c.spec.configHash, c.status?.dataSecretName]),
      [
        [hash, userDataSecretName(POOL, hash)],
        [hash, userDataSecretName(POOL, hash)],
      ],
    );
    assertHeld(watchers);
    const claimed = (await hookLines('CanUpdateMachineSet')).filter(
      (l) => l.status === 'Success' && /^in place: /.test(l.message ?? ''),
    );
    assert.ok(claimed.length > 0, 'the extension claimed the change in place');
    const done = (await hookLines('UpdateMachine')).filter(
      (l) => l.status === 'Success' && /is at /.test(l.message ?? ''),
    );
    assert.ok(done.length >= 2, `UpdateMachine reported both Machines done: ${JSON.stringify(done)}`);
  });

  it('when the infrastructure template changes, the extension should refuse and Cluster API should replace the Machines', async () => {
    const before = await uids();
    const objects = k8s.KubernetesObjectApi.makeApiClient(env.mgmt);
    await objects.create({
      apiVersion: 'infrastructure.kindling.dev/v1alpha1',
      kind: 'LocalMachineTemplate',
      metadata: { name: 'local-b', namespace: NS },
      spec: { template: { spec: { failureDomains: ['zone-b', 'zone-c'] } } },
    } as k8s.KubernetesObject);
    await env.patchPool(POOL, {
      spec: {
        platform: {
          infrastructureTemplateRef: {
            apiGroup: 'infrastructure.kindling.dev',
            kind: 'LocalMachineTemplate',
            name: 'local-b',
          },
        },
      },
    });
    await replaced(before, '1.36.3');
    assert.match(
      (await hookLines('CanUpdateMachineSet')).at(-1)?.message ?? '',
      /must roll: .*another infrastructure template \("local" → "local-b"\)/,
    );
  });

  it('when the release and the template change together, Cluster API should roll out by replacement', async () => {
    const before = await uids();
    const previous = (await env.pool(POOL)).spec.release.image.replace(/:1\.36\.3$/, ':1.36.2');
    await env.patchPool(POOL, {
      spec: {
        // Back to the release before: a downgrade of nodes that ran 1.36.3, which the version policy lets through
        // only when the pool says so.
        release: { image: previous, allowSkips: ['Downgrade'] },
        platform: {
          infrastructureTemplateRef: {
            apiGroup: 'infrastructure.kindling.dev',
            kind: 'LocalMachineTemplate',
            name: 'local',
          },
        },
      },
    });
    await replaced(before, '1.36.2');
    const last = (await hookLines('CanUpdateMachineSet')).at(-1)?.message ?? '';
    assert.match(
      last,
      /in place: .*KindlingConfigTemplate configHash/,
      'the payload alone could have been done in place',
    );
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
    await core.createNamespacedConfigMap({
      namespace: NS,
      body: { metadata: { name: 'kargs' }, data: { config: doc } },
    });
    await env.patchPool(POOL, { spec: { config: [{ name: 'motd' }, { name: 'kargs' }] } });
    // The pool's record of the rollout, read while it lasts (it goes once the rollout completes).
    const recorded = eventually(
      'status.rollout recording the kernel-arguments document',
      async () =>
        (await env.pool(POOL)).status?.rollout?.changes.find((c) => /MachineConfig 50-kargs added/.test(c.detail)),
      10 * MINUTES,
      250,
    ).catch(() => undefined);
    await replaced(before, '1.36.2');
    assert.equal(
      (await recorded)?.strategy,
      'Rollout',
      `status.rollout says Cluster API rolls the payload: ${JSON.stringify(await recorded)}`,
    );
    assert.deepEqual(
      await hostFiles('etc/kindling/kargs-sample'),
      ['nosmt\n', 'nosmt\n'],
      'the new hosts booted the new payload',
    );
    assert.match(
      (await hookLines('CanUpdateMachineSet')).at(-1)?.message ?? '',
      /must roll: .*holds what the node agent cannot apply in place \(kernelArguments/,
    );
    const degraded = (await env.nodes(POOL)).filter(
      (n) => n.metadata?.annotations?.['machineconfiguration.openshift.io/state'] === 'Degraded',
    );
    assert.deepEqual(degraded, [], 'no node Degraded');
  });
});
