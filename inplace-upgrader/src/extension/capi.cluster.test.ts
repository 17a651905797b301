/**
 * Kindling's Runtime Extension under the real Cluster API manager (v1.14.2, feature gates RuntimeSDK,
 * InPlaceUpdates and MachineTaintPropagation), registered with an ExtensionConfig (HTTPS, caBundle): the
 * manager discovers it, and its MachineDeployment controller asks it, through CanUpdateMachineSet, what
 * can be updated in place. The local providers boot hosts with the real Ignition client and join Nodes
 * (KWOK); the real ignition server renders the payload the extension inspects.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as k8s from '#k8s';
import { CAPI_API_VERSION, RUNTIME_API_VERSION, type ExtensionConfig } from '../../../api/src/capi.js';
import { LABELS, SECRET_KEYS, userDataSecretName } from '../../../api/src/keys.js';
import { createApplier } from '../../../support/src/apply.js';
import { createLogger } from '../../../support/src/logger.js';
import { LOCAL_CRD_DIR } from '../../../local/src/crds.js';
import { startProviders, type Providers } from '../../../local/src/providers/run.js';
import {
  eventually,
  installCapiCrds,
  installCrds,
  installKindlingCrds,
  startCapiManager,
  startCluster,
  type CapiManager,
  type Cluster,
} from '../../../test/bed/src/index.js';
import { hostsCanJoin } from '../../../local/src/providers/testing.js';
import { machineConfig, runExtension, tokenSecret, type ExtensionFixture } from '../../testing/index.js';
import { runIgnitionServer, type IgnitionServer } from '../../../ignition-server/testing/index.js';
import { EXTENSION_CONFIG_NAME, extensionConfig, HANDLERS } from './hooks.js';

const NS = 'tenants';
const POOL = 'workers';
const log = createLogger({ name: 'capi-extension-test', level: process.env.TEST_LOG_LEVEL ?? 'silent' });
const UPDATE_IN_PROGRESS = 'in-place-updates.internal.cluster.x-k8s.io/update-in-progress';
const PENDING_HOOKS = 'runtime.cluster.x-k8s.io/pending-hooks';

interface MachineObject extends k8s.KubernetesObject {
  spec: { bootstrap: { dataSecretName?: string }; infrastructureRef: { name: string } };
  status?: { phase?: string; nodeRef?: { name: string } };
}

interface HookLine {
  hook: string;
  object?: string;
  status: string;
  message?: string;
}

/** A complete Ignition config as user-data: the hosts boot from it without the ignition server. */
/** The hosts' boot config; `join` (the guest's join material) lets their kubelets register Nodes. */
function bootConfig(version: string, join: object[] = []): object {
  return {
    ignition: { version: '3.3.0' },
    storage: {
      files: [{ path: '/etc/kindling/version', mode: 420, contents: { source: `data:,${version}` } }, ...join],
    },
  };
}

function machineDeployment(hash: string, template: string): k8s.KubernetesObject {
  const labels = { [LABELS.nodePool]: POOL };
  return {
    apiVersion: CAPI_API_VERSION,
    kind: 'MachineDeployment',
    metadata: { name: POOL, namespace: NS },
    spec: {
      clusterName: 'guest',
      replicas: 2,
      selector: { matchLabels: labels },
      template: {
        metadata: { labels },
        spec: {
          clusterName: 'guest',
          bootstrap: { dataSecretName: userDataSecretName(POOL, hash) },
          infrastructureRef: { apiGroup: 'infrastructure.kindling.dev', kind: 'LocalMachineTemplate', name: template },
        },
      },
      rollout: { strategy: { type: 'RollingUpdate', rollingUpdate: { maxSurge: 0, maxUnavailable: 1 } } },
    },
  } as k8s.KubernetesObject;
}

describe('Kindling as the in-place Runtime Extension of the Cluster API manager', () => {
  let mgmt: Cluster;
  let guest: Cluster;
  let capi: CapiManager;
  let providers: Providers;
  let ignition: IgnitionServer;
  let ext: ExtensionFixture;
  let dir: string;
  let objects: k8s.KubernetesObjectApi;
  let approver: Awaited<ReturnType<typeof hostsCanJoin>> | undefined;
  /** The guest's join material, in every boot config: this test is about Cluster API's in-place flow, not joining. */
  let joinFiles: object[] = [];

  const apply = (o: object): Promise<unknown> => createApplier(mgmt.kubeConfig, 'kindling-test').apply(o);
  const machines = async (): Promise<MachineObject[]> =>
    (await objects.list<MachineObject>(CAPI_API_VERSION, 'Machine', NS)).items;
  const running = (
    want: (m: MachineObject[]) => boolean,
    what: string,
    timeoutMs = 120_000,
  ): Promise<MachineObject[]> =>
    eventually(
      what,
      async () => {
        const list = (await machines()).filter((m) => !m.metadata?.deletionTimestamp);
        return list.length === 2 && list.every((m) => m.status?.phase === 'Running') && want(list) ? list : undefined;
      },
      timeoutMs,
      500,
    );
  const hookLines = async (hook: string): Promise<HookLine[]> =>
    (await readFile(ext.logFile, 'utf8'))
      .split('\n')
      .filter((l) => l.includes(`"hook":"${hook}"`))
      .map((l) => JSON.parse(l) as HookLine);

  /** The config hash of each published version, by the name the test gives it. */
  const hashes = new Map<string, string>();
  const h = (name: string): string => hashes.get(name) ?? name;
  /** What the nodepool-controller writes for a config: the user-data Secret and the token Secret (the server renders the payload). */
  async function publish(name: string, version: string): Promise<void> {
    const core = mgmt.kubeConfig.makeApiClient(k8s.CoreV1Api);
    const { hash, secret } = await tokenSecret(mgmt.kubeConfig, {
      namespace: NS,
      pool: POOL,
      cluster: 'guest',
      release: ignition.release,
      config: [machineConfig('50-test', bootConfig(version))],
    });
    hashes.set(name, hash);
    await core.createNamespacedSecret({
      namespace: NS,
      body: {
        metadata: {
          name: userDataSecretName(POOL, hash),
          labels: { [LABELS.userDataSecret]: 'true', [LABELS.nodePool]: POOL },
        },
        stringData: {
          [SECRET_KEYS.value]: JSON.stringify(bootConfig(version, joinFiles)),
          [SECRET_KEYS.format]: 'ignition',
        },
      },
    });
    await core.createNamespacedSecret({ namespace: NS, body: secret });
  }

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'kindling-capi-extension-'));
    [mgmt, guest] = await Promise.all([
      startCluster({ name: 'mgmt', dir: join(dir, 'mgmt') }),
      startCluster({ name: 'guest', kwok: true, nodeAuth: true }),
    ]);
    await Promise.all([installCapiCrds(mgmt), installCrds(mgmt, LOCAL_CRD_DIR), installKindlingCrds(mgmt)]);
    capi = await startCapiManager(mgmt);
    objects = k8s.KubernetesObjectApi.makeApiClient(mgmt.kubeConfig);
    const core = mgmt.kubeConfig.makeApiClient(k8s.CoreV1Api);
    // A tenant namespace: the only kind the ExtensionConfig lets the manager call the extension for.
    await core.createNamespace({ body: { metadata: { name: NS, labels: { [LABELS.tenant]: 'true' } } } });
    await core.createNamespacedSecret({
      namespace: NS,
      body: { metadata: { name: 'guest-admin' }, stringData: { value: guest.kubeconfigYaml } },
    });
    approver = await hostsCanJoin(guest);
    joinFiles = approver.files;
    [providers, ignition] = await Promise.all([
      startProviders({ kubeConfig: mgmt.kubeConfig, stateDir: join(dir, 'state'), log }),
      runIgnitionServer({ kubeconfigPath: mgmt.kubeconfigPath, dir: join(dir, 'ignition-server'), namespace: NS }),
    ]);
    ext = await runExtension({
      kubeconfigPath: mgmt.kubeconfigPath,
      namespaces: NS,
      dir: join(dir, 'extension'),
      ignition,
    });
  });

  after(async () => {
    approver?.stop();
    await Promise.all([ext?.stop(), providers?.stop(), ignition?.stop()]);
    await capi?.stop();
    await Promise.all([guest?.stop(), mgmt?.stop()]);
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('when the ExtensionConfig points at the extension, the manager should discover its three in-place handlers', async () => {
    // Right after start the new CRD can still answer 429 (storage initialising): apply until it is accepted.
    await eventually(
      'the ExtensionConfig to be accepted',
      () => apply(extensionConfig({ url: ext.url, caPem: ext.caPem })).then(() => true),
      30_000,
      250,
    );
    const discovered = await eventually(
      'the ExtensionConfig to be discovered',
      async () => {
        const ec = (await objects.read({
          apiVersion: RUNTIME_API_VERSION,
          kind: 'ExtensionConfig',
          metadata: { name: EXTENSION_CONFIG_NAME },
        })) as unknown as ExtensionConfig;
        // Discovered can be True before the handlers are written (a status from another pass): wait for both.
        return ec.status?.conditions?.some((c) => c.type === 'Discovered' && c.status === 'True') &&
          (ec.status.handlers?.length ?? 0) > 0
          ? ec
          : undefined;
      },
      60_000,
      250,
    );
    assert.deepEqual(
      discovered.status?.handlers?.map((h) => [h.name, h.requestHook.hook, h.failurePolicy, h.timeoutSeconds]),
      HANDLERS.map((h) => [`${h.name}.${EXTENSION_CONFIG_NAME}`, h.requestHook.hook, 'Fail', 5]),
    );
  });

  it('when the infrastructure template of a MachineDeployment changes, the extension should refuse it and Cluster API should replace the Machines', async () => {
    await apply({
      apiVersion: 'controlplane.kindling.dev/v1alpha1',
      kind: 'LocalControlPlane',
      metadata: { name: 'guest', namespace: NS },
      spec: { adminKubeconfigSecretRef: { name: 'guest-admin' } },
    });
    await apply({
      apiVersion: CAPI_API_VERSION,
      kind: 'Cluster',
      metadata: { name: 'guest', namespace: NS },
      spec: { controlPlaneRef: { apiGroup: 'controlplane.kindling.dev', kind: 'LocalControlPlane', name: 'guest' } },
    });
    for (const [name, zones] of [
      ['small', ['zone-a', 'zone-b']],
      ['large', ['zone-c']],
    ] as const) {
      await apply({
        apiVersion: 'infrastructure.kindling.dev/v1alpha1',
        kind: 'LocalMachineTemplate',
        metadata: { name, namespace: NS },
        spec: { template: { spec: { failureDomains: zones } } },
      });
    }
    await publish('h1', 'v1');
    await apply(machineDeployment(h('h1'), 'small'));
    const first = await running(() => true, 'two Running Machines');

    await apply(machineDeployment(h('h1'), 'large'));
    const replaced = await running(
      (list) => list.every((m) => !first.some((f) => f.metadata?.uid === m.metadata?.uid)),
      'two new Running Machines',
      180_000,
    );
    assert.equal(replaced.length, 2);
    const asked = await hookLines('CanUpdateMachineSet');
    assert.ok(asked.length > 0, 'Cluster API never asked CanUpdateMachineSet');
    assert.ok(
      asked.every((l) => l.status === 'Success'),
      JSON.stringify(asked),
    );
    assert.match(
      asked.at(-1)?.message ?? '',
      /must roll: .*infrastructureRef\.name \(another infrastructure template \("small" → "large"\): new machines\).*LocalMachineTemplate large failureDomains/,
    );
  });

  it('when only the user-data Secret changes (no bootstrap provider), the extension should refuse it and Cluster API should replace the Machines', async () => {
    // Cluster API would move a Machine to a new bootstrap.dataSecretName in place but never call UpdateMachine
    // (only a bootstrap config marks a Machine's data Secret created), leaving it "updating" for ever: the
    // extension makes such a change roll; pools are updated in place through Kindling's bootstrap provider.
    const before = await running(() => true, 'two Running Machines');
    await publish('h2', 'v2');
    await apply(machineDeployment(h('h2'), 'large'));
    const replaced = await running(
      (list) =>
        list.every(
          (m) =>
            !before.some((b) => b.metadata?.uid === m.metadata?.uid) &&
            m.spec.bootstrap.dataSecretName === userDataSecretName(POOL, h('h2')),
        ),
      `two new Running Machines on ${h('h2')}`,
      180_000,
    );
    assert.equal(replaced.length, 2);
    assert.ok(
      replaced.every(
        (m) =>
          m.metadata?.annotations?.[UPDATE_IN_PROGRESS] === undefined &&
          m.metadata?.annotations?.[PENDING_HOOKS] === undefined,
      ),
      'no Machine was left updating in place',
    );
    const answer = (await hookLines('CanUpdateMachineSet')).at(-1);
    assert.equal(answer?.status, 'Success');
    assert.match(
      answer?.message ?? '',
      new RegExp(
        `must roll: bootstrap\\.dataSecretName \\("${userDataSecretName(POOL, h('h2'))}" is named without a bootstrap config, and Cluster API calls UpdateMachine only for Machines with one`,
      ),
    );
    assert.deepEqual(await hookLines('UpdateMachine'), []);
  });
});
