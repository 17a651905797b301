/**
 * The local providers under the real Cluster API core manager: a Cluster backed by a LocalControlPlane, a
 * MachineSet of LocalMachines; Cluster API creates the Machines, hosts boot with the real Ignition client,
 * their kubelets join the guest cluster (a hosted control plane: bootstrap tokens, Node authorizer,
 * NodeRestriction) by TLS bootstrap, and the Machines reach Running. The test approves the kubelets' CSRs in
 * place of Kindling's approver. Scaling down removes host and Node.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, access } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as k8s from '#k8s';
import {
  startCluster,
  installCapiCrds,
  installCrds,
  startCapiManager,
  type Cluster,
  type CapiManager,
} from '../../../test/bed/src/index.js';
import { createLogger } from '../../../support/src/logger.js';
import { LOCAL_CRD_DIR } from '../crds.js';
import { startProviders, type Providers } from './run.js';
import { eventually } from '../../../test/bed/src/eventually.js';
import { KUBELET_REASONS } from './kubelet/join.js';
import { hostsCanJoin } from './testing.js';

const NS = 'tenants';
const log = createLogger({ name: 'providers-test', level: process.env.TEST_LOG_LEVEL ?? 'silent' });

const exists = (p: string): Promise<boolean> =>
  access(p).then(
    () => true,
    () => false,
  );

/** A MachineSet of LocalMachines from the "small" template, booting with the given bootstrap Secret. */
function machineSet(name: string, replicas: number, dataSecretName: string): k8s.KubernetesObject {
  return {
    apiVersion: 'cluster.x-k8s.io/v1beta2',
    kind: 'MachineSet',
    metadata: { name, namespace: NS },
    spec: {
      clusterName: 'guest',
      replicas,
      selector: { matchLabels: { pool: name } },
      template: {
        metadata: { labels: { pool: name } },
        spec: {
          clusterName: 'guest',
          bootstrap: { dataSecretName },
          infrastructureRef: { apiGroup: 'infrastructure.kindling.dev', kind: 'LocalMachineTemplate', name: 'small' },
        },
      },
    },
  } as k8s.KubernetesObject;
}

interface MachineObject extends k8s.KubernetesObject {
  status?: { phase?: string; nodeRef?: { name: string } };
}

type LM = k8s.KubernetesObject & {
  status?: {
    conditions?: { type: string; status: string; reason: string; message: string; lastTransitionTime: string }[];
  };
};

const conditionOf = (lm: LM, type: string): NonNullable<NonNullable<LM['status']>['conditions']>[number] | undefined =>
  lm.status?.conditions?.find((c) => c.type === type);

/** Checks a host joined as its own Node with the release's version; returns how long from boot to Ready. */
function assertJoined(lm: LM, nodes: k8s.V1Node[]): string {
  const name = lm.metadata?.name ?? '';
  const joined = conditionOf(lm, 'Joined');
  assert.equal(joined?.reason, KUBELET_REASONS.joined, `LocalMachine ${name}: ${JSON.stringify(joined)}`);
  const node = nodes.find((n) => n.metadata?.name === name);
  assert.equal(node?.status?.nodeInfo?.kubeletVersion, 'v1.36.2');
  return `${name}: Booted to Node Ready ${Math.round((readyAt(node) - Date.parse(conditionOf(lm, 'Booted')?.lastTransitionTime ?? '')) / 1000)} s (1 s resolution)`;
}

const readyAt = (node: k8s.V1Node): number =>
  new Date(node.status?.conditions?.find((c) => c.type === 'Ready')?.lastTransitionTime ?? 0).getTime();

describe('local providers under Cluster API', () => {
  let mgmt: Cluster;
  let guest: Cluster;
  let capi: CapiManager;
  let providers: Providers;
  let stateDir: string;
  let objects: k8s.KubernetesObjectApi;
  let approver: Awaited<ReturnType<typeof hostsCanJoin>>;

  before(async () => {
    stateDir = await mkdtemp(join(tmpdir(), 'kindling-hosts-'));
    [mgmt, guest] = await Promise.all([
      startCluster({ name: 'mgmt' }),
      startCluster({ name: 'guest', kwok: true, nodeAuth: true }),
    ]);
    await Promise.all([installCapiCrds(mgmt), installCrds(mgmt, LOCAL_CRD_DIR)]);
    capi = await startCapiManager(mgmt);
    providers = await startProviders({ kubeConfig: mgmt.kubeConfig, stateDir, log });
    objects = k8s.KubernetesObjectApi.makeApiClient(mgmt.kubeConfig);
    const core = mgmt.kubeConfig.makeApiClient(k8s.CoreV1Api);
    await core.createNamespace({ body: { metadata: { name: NS } } });
    await core.createNamespacedSecret({
      namespace: NS,
      body: { metadata: { name: 'guest-admin' }, stringData: { value: guest.kubeconfigYaml } },
    });
    // A complete Ignition config with join material as bootstrap data: this test is about the providers and the
    // hosts' kubelets, not the ignition server.
    approver = await hostsCanJoin(guest);
    const hello = { path: '/etc/kindling/hello', mode: 420, contents: { source: 'data:,booted%20by%20ignition' } };
    const config = { ignition: { version: '3.3.0' }, storage: { files: [hello, ...approver.files] } };
    await core.createNamespacedSecret({
      namespace: NS,
      body: { metadata: { name: 'boot' }, stringData: { value: JSON.stringify(config), format: 'ignition' } },
    });
    const bare = { ignition: { version: '3.3.0' }, storage: { files: [hello] } };
    await core.createNamespacedSecret({
      namespace: NS,
      body: { metadata: { name: 'bare' }, stringData: { value: JSON.stringify(bare), format: 'ignition' } },
    });
  });
  after(async () => {
    approver?.stop();
    await providers?.stop();
    await capi?.stop();
    await Promise.all([guest?.stop(), mgmt?.stop()]);
    await rm(stateDir, { recursive: true, force: true });
  });

  it('when a MachineSet of LocalMachines is created, it should boot hosts with Ignition, their kubelets join as Nodes, and run the Machines', async (t) => {
    const create = (o: object): Promise<k8s.KubernetesObject> => objects.create(o);
    await create({
      apiVersion: 'controlplane.kindling.dev/v1alpha1',
      kind: 'LocalControlPlane',
      metadata: { name: 'guest', namespace: NS },
      spec: { adminKubeconfigSecretRef: { name: 'guest-admin' } },
    });
    await create({
      apiVersion: 'cluster.x-k8s.io/v1beta2',
      kind: 'Cluster',
      metadata: { name: 'guest', namespace: NS },
      spec: { controlPlaneRef: { apiGroup: 'controlplane.kindling.dev', kind: 'LocalControlPlane', name: 'guest' } },
    });
    await create({
      apiVersion: 'infrastructure.kindling.dev/v1alpha1',
      kind: 'LocalMachineTemplate',
      metadata: { name: 'small', namespace: NS },
      spec: { template: { spec: { failureDomains: ['zone-a', 'zone-b'] } } },
    });
    await create(machineSet('workers', 2, 'boot'));

    const machines = await eventually(
      'two Running Machines',
      async () => {
        const list = await objects.list<MachineObject>('cluster.x-k8s.io/v1beta2', 'Machine', NS);
        return list.items.length === 2 && list.items.every((m) => m.status?.phase === 'Running')
          ? list.items
          : undefined;
      },
      90_000,
    );
    const guestCore = guest.kubeConfig.makeApiClient(k8s.CoreV1Api);
    const nodes = (await guestCore.listNode()).items;
    assert.deepEqual(nodes.map((n) => n.metadata?.name).sort(), machines.map((m) => m.status?.nodeRef?.name).sort());
    assert.deepEqual(nodes.map((n) => n.metadata?.labels?.['topology.kubernetes.io/zone']).sort(), [
      'zone-a',
      'zone-b',
    ]);
    for (const m of machines) {
      const hello = await readFile(join(stateDir, 'hosts', NS, m.metadata?.name ?? '', 'etc/kindling/hello'), 'utf8');
      assert.equal(hello, 'booted by ignition');
    }
    const lms = await objects.list<LM>(
      'infrastructure.kindling.dev/v1alpha1',
      'LocalMachine',
      NS,
      undefined,
      undefined,
      undefined,
      undefined,
      'pool=workers',
    );
    for (const lm of lms.items) t.diagnostic(assertJoined(lm, nodes));

    await objects.patch(
      {
        apiVersion: 'cluster.x-k8s.io/v1beta2',
        kind: 'MachineSet',
        metadata: { name: 'workers', namespace: NS },
        spec: { replicas: 1 },
      } as k8s.KubernetesObject,
      undefined,
      undefined,
      undefined,
      undefined,
      k8s.PatchStrategy.MergePatch,
    );
    const gone = await eventually(
      'one Machine, Node and host to go',
      async () => {
        const list = await objects.list<MachineObject>('cluster.x-k8s.io/v1beta2', 'Machine', NS);
        const left = (await guestCore.listNode()).items;
        const removed = machines.find((m) => !list.items.some((l) => l.metadata?.name === m.metadata?.name));
        return list.items.length === 1 && left.length === 1 && removed ? removed : undefined;
      },
      90_000,
    );
    assert.equal(await exists(join(stateDir, 'hosts', NS, gone.metadata?.name ?? '')), false);
  });

  it("when a host's payload has no join material, it should be provisioned but stay unjoined, and its LocalMachine say why", async () => {
    await objects.create(machineSet('bare', 1, 'bare'));
    const joined = await eventually(
      'a Joined=False condition',
      async () => {
        const list = await objects.list<LM>(
          'infrastructure.kindling.dev/v1alpha1',
          'LocalMachine',
          NS,
          undefined,
          undefined,
          undefined,
          undefined,
          'pool=bare',
        );
        return list.items[0]?.status?.conditions?.find((c) => c.type === 'Joined' && c.status === 'False');
      },
      120_000,
    );
    assert.equal(joined.reason, KUBELET_REASONS.noJoinMaterial);
    assert.match(joined.message, /bootstrap-kubeconfig and \/etc\/kubernetes\/kubelet.conf missing/);
    const guestCore = guest.kubeConfig.makeApiClient(k8s.CoreV1Api);
    const machine = (
      await objects.list<MachineObject>(
        'cluster.x-k8s.io/v1beta2',
        'Machine',
        NS,
        undefined,
        undefined,
        undefined,
        undefined,
        'pool=bare',
      )
    ).items[0];
    assert.equal(machine?.status?.nodeRef, undefined);
    assert.ok(!(await guestCore.listNode()).items.some((n) => n.metadata?.name?.startsWith('bare-')));
  });

  it('when a host cannot fetch its config, it should say why on the LocalMachine', async () => {
    const core = mgmt.kubeConfig.makeApiClient(k8s.CoreV1Api);
    const stub = {
      ignition: {
        version: '3.3.0',
        config: { merge: [{ source: 'https://127.0.0.1:1/ignition' }] },
        timeouts: { httpTotal: 5 },
      },
    };
    await core.createNamespacedSecret({
      namespace: NS,
      body: { metadata: { name: 'broken' }, stringData: { value: JSON.stringify(stub), format: 'ignition' } },
    });
    await objects.create(machineSet('broken', 1, 'broken'));
    const booted = await eventually(
      'a Booted=False condition',
      async () => {
        const list = await objects.list<LM>(
          'infrastructure.kindling.dev/v1alpha1',
          'LocalMachine',
          NS,
          undefined,
          undefined,
          undefined,
          undefined,
          'pool=broken',
        );
        return list.items[0]?.status?.conditions?.find((c) => c.type === 'Booted' && c.status === 'False');
      },
      120_000,
    );
    assert.match(booted.message, /ignition fetch stage failed/);
  });
});
