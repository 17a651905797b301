/**
 * The metadata-only fields and scale from zero on the real test bed: Machine and Node annotations,
 * nodeDeletionTimeout and minReadySeconds reach the child's template, the existing Machines and their guest Nodes
 * in place (the same Machines, the same config hash) and go when removed; a pool with autoScaling.min 0 tells the
 * cluster autoscaler what a node offers, from the infrastructure template's status.capacity (the local
 * provider's LocalMachineTemplate, its status written here as a provider would) or from spec.autoScaling.capacity.
 * The controller runs in-process; the real ignition server mints the tokens the children wait for.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as k8s from '#k8s';
import {
  eventually,
  installCapiCrds,
  installCrds,
  installKindlingCrds,
  startCluster,
  type Cluster,
} from '../../test/bed/src/index.js';
import { LOCAL_CRD_DIR } from '../../local/src/crds.js';
import { createLogger } from '../../support/src/logger.js';
import { ANNOTATIONS, LABELS, userDataSecretName } from '../../api/src/keys.js';
import type { Condition } from '../../api/src/conditions.js';
import type { NodePool } from '../../api/src/nodepool.js';
import type { Machine, MachineDeployment, MachineSet } from '../../api/src/capi.js';
import { nodePoolFixture } from '../../api/testing/nodepool.js';
import { runIgnitionServer, type IgnitionServer } from '../../ignition-server/testing/index.js';
import { createNodePoolController, type NodePoolController } from './controller.js';

const NS = 'default';
const CAPI = 'cluster.x-k8s.io/v1beta2';
const MERGE = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch);
const INFRA = { group: 'infrastructure.kindling.dev', version: 'v1alpha1', plural: 'localmachinetemplates' };

type Child = MachineSet | MachineDeployment;
const cond = (p: NodePool, type: string): Condition | undefined => p.status?.conditions?.find((c) => c.type === type);

/** The annotations the cluster autoscaler reads for scaling from zero, as a pool's child carries them. */
const capacityOf = (child: Child): Record<string, string> =>
  Object.fromEntries(
    Object.entries(child.metadata.annotations ?? {}).filter(([k]) =>
      k.startsWith('capacity.cluster-autoscaler.kubernetes.io/'),
    ),
  );

describe('nodepool-controller: metadata in place and scale from zero, on the real test bed', () => {
  let mgmt: Cluster;
  let guest: Cluster;
  let objects: k8s.KubernetesObjectApi;
  let custom: k8s.CustomObjectsApi;
  let controller: NodePoolController;
  let ignition: IgnitionServer;
  let dir: string;
  const log = createLogger({ name: 'metadata-capacity-test', level: process.env['TEST_LOG_LEVEL'] ?? 'warn' });

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'metadata-capacity-'));
    mgmt = await startCluster({ name: 'mgmt' });
    [guest] = await Promise.all([
      startCluster({
        name: 'guest',
        controllerManager: false,
        kwok: true,
        management: { cluster: mgmt, namespace: NS },
      }),
      installKindlingCrds(mgmt),
      installCapiCrds(mgmt),
      installCrds(mgmt, LOCAL_CRD_DIR),
    ]);
    objects = k8s.KubernetesObjectApi.makeApiClient(mgmt.kubeConfig);
    custom = mgmt.kubeConfig.makeApiClient(k8s.CustomObjectsApi);
    ignition = await runIgnitionServer({
      kubeconfigPath: mgmt.kubeconfigPath,
      dir: join(dir, 'ignition-server'),
      namespace: NS,
      releases: ['1.36.3'],
    });
    controller = createNodePoolController({
      kubeConfig: mgmt.kubeConfig,
      namespaces: [NS],
      log,
      config: {
        ignition: { endpoint: ignition.endpoint, caPem: ignition.caPem },
        tokenGraceMs: 2 * 3600_000,
        maxSkewMinors: 3,
      },
      workers: 4,
    });
    await controller.start();
  });
  after(async () => {
    await controller?.stop();
    await ignition?.stop();
    await Promise.all([guest?.stop(), mgmt?.stop()]);
    if (dir && process.env['KEEP_TEST_DIR'] === undefined) await rm(dir, { recursive: true, force: true });
  });

  const pool = (name: string, patch?: (p: NodePool) => void): NodePool =>
    nodePoolFixture(name, NS, (p) => {
      p.spec.release.image = ignition.releases['1.36.3'] ?? '';
      patch?.(p);
    });
  const read = <T extends k8s.KubernetesObject>(kind: string, name: string, apiVersion = CAPI): Promise<T> =>
    objects.read<T>({ apiVersion, kind, metadata: { name, namespace: NS } });
  const readPool = (name: string): Promise<NodePool> => read<NodePool>('NodePool', name, 'kindling.dev/v1beta1');
  const patchPool = (name: string, spec: object): Promise<unknown> =>
    custom.patchNamespacedCustomObject(
      { group: 'kindling.dev', version: 'v1beta1', namespace: NS, plural: 'nodepools', name, body: { spec } },
      MERGE,
    );
  const converged = async (name: string, extra: (p: NodePool) => boolean = () => true): Promise<NodePool> => {
    const p = await eventually(`pool ${name} to converge`, async () => {
      const p = await readPool(name);
      return p.status?.observedGeneration === p.metadata.generation && cond(p, 'Ready') !== undefined && extra(p)
        ? p
        : undefined;
    });
    await controller.queue.drained();
    return p;
  };

  /** A Machine of the pool linked to a guest Node, as Cluster API would make them (no CAPI controller runs here). */
  async function machineWithNode(name: string, hash: string): Promise<{ uid: string; node: string }> {
    const node = `${name}-n1`;
    await guest.kubeConfig.makeApiClient(k8s.CoreV1Api).createNode({
      body: {
        metadata: { name: node, annotations: { 'kwok.x-k8s.io/node': 'fake', 'other.example/keep': 'yes' } },
      },
    });
    const created = await objects.create<Machine>({
      apiVersion: CAPI,
      kind: 'Machine',
      metadata: {
        name: `${name}-m1`,
        namespace: NS,
        labels: { [LABELS.nodePool]: name, [LABELS.capiClusterName]: 'guest' },
        annotations: { 'other.example/keep': 'yes' },
      },
      spec: {
        clusterName: 'guest',
        bootstrap: { dataSecretName: userDataSecretName(name, hash) },
        infrastructureRef: { apiGroup: 'infrastructure.kindling.dev', kind: 'LocalMachine', name: node },
      },
    });
    await custom.patchNamespacedCustomObjectStatus(
      {
        group: 'cluster.x-k8s.io',
        version: 'v1beta2',
        namespace: NS,
        plural: 'machines',
        name: `${name}-m1`,
        body: { status: { nodeRef: { name: node } } },
      },
      MERGE,
    );
    return { uid: created.metadata?.uid ?? '', node };
  }

  const METADATA = {
    machineAnnotations: { 'example.com/owner': 'team-a' },
    nodeAnnotations: { 'example.com/rack': 'r7' },
    nodeDeletionTimeout: '45s',
    minReadySeconds: 20,
  };

  /** Whether the Machine, the child's template and the Node all carry METADATA (or, `set` false, none of it). */
  async function metadataEverywhere(kind: string, name: string, node: string, set: boolean): Promise<boolean> {
    const m = await read<Machine>('Machine', `${name}-m1`);
    const child = await read<Child>(kind, name);
    const n = await guest.kubeConfig.makeApiClient(k8s.CoreV1Api).readNode({ name: node });
    const seen = [
      m.metadata.annotations?.['example.com/owner'],
      m.spec.deletion?.nodeDeletionTimeoutSeconds,
      m.spec.minReadySeconds,
      child.spec.template.metadata?.annotations?.['example.com/owner'],
      child.spec.template.spec.deletion?.nodeDeletionTimeoutSeconds,
      child.spec.template.spec.minReadySeconds,
      n.metadata?.annotations?.['example.com/rack'],
    ];
    const want = set ? ['team-a', 45, 20, 'team-a', 45, 20, 'r7'] : Array<undefined>(seen.length).fill(undefined);
    return JSON.stringify(seen) === JSON.stringify(want);
  }

  const engines: [string, string, (p: NodePool) => void][] = [
    ['a Replace pool', 'MachineDeployment', () => {}],
    ['an InPlace pool', 'MachineSet', (p) => (p.spec.management = { upgradeType: 'InPlace' })],
  ];
  for (const [which, kind, management] of engines) {
    it(`when Machine and Node annotations, nodeDeletionTimeout and minReadySeconds of ${which} are set and then removed, its ${kind}, existing Machine and Node should follow in place with the same Machine and config hash`, async () => {
      const name = `meta-${kind.toLowerCase()}`;
      await objects.create(pool(name, management));
      const hash = (await converged(name, (p) => p.status?.configHash !== undefined)).status?.configHash ?? '';
      const { uid, node } = await machineWithNode(name, hash);

      await patchPool(name, METADATA);
      await eventually('the metadata on the template, the Machine and the Node', () =>
        metadataEverywhere(kind, name, node, true),
      );
      assert.equal((await converged(name)).status?.configHash, hash, 'metadata changes no hash');

      await patchPool(name, {
        machineAnnotations: null,
        nodeAnnotations: null,
        nodeDeletionTimeout: null,
        minReadySeconds: null,
      });
      await eventually('the metadata gone everywhere', () => metadataEverywhere(kind, name, node, false));
      const m = await read<Machine>('Machine', `${name}-m1`);
      assert.equal(m.metadata.uid, uid, 'the same Machine, updated in place');
      assert.equal(m.metadata.annotations?.['other.example/keep'], 'yes', "others' annotations stay");
      const n = await guest.kubeConfig.makeApiClient(k8s.CoreV1Api).readNode({ name: node });
      assert.equal(n.metadata?.annotations?.['other.example/keep'], 'yes');
      const child = await read<Child>(kind, name);
      assert.equal(child.spec.template.spec.bootstrap.dataSecretName, userDataSecretName(name, hash), 'no rollout');
      assert.equal((await converged(name)).status?.configHash, hash);
    });
  }

  /** A LocalMachineTemplate; with `capacity`, its status reports it as a provider would. */
  async function template(name: string, capacity?: Record<string, string>): Promise<void> {
    await custom.createNamespacedCustomObject({
      ...INFRA,
      namespace: NS,
      body: {
        apiVersion: `${INFRA.group}/${INFRA.version}`,
        kind: 'LocalMachineTemplate',
        metadata: { name },
        spec: { template: {} },
      },
    });
    if (capacity)
      await custom.patchNamespacedCustomObjectStatus(
        { ...INFRA, namespace: NS, name, body: { status: { capacity } } },
        MERGE,
      );
  }

  const fromZero = (name: string, templateName: string, capacity?: NodePool['spec']['autoScaling']): NodePool =>
    pool(name, (p) => {
      delete p.spec.replicas;
      p.spec.autoScaling = capacity ?? { min: 0, max: 3 };
      p.spec.nodeLabels = { 'example.com/role': 'batch' };
      p.spec.taints = [{ key: 'example.com/dedicated', value: 'batch', effect: 'NoSchedule' }];
      p.spec.platform.infrastructureTemplateRef.name = templateName;
    });

  it("when a pool may scale to zero and its infrastructure template reports capacity, its MachineDeployment should carry the template's capacity at 0 replicas and the condition should say so", async () => {
    await template('sized', { cpu: '8', memory: '32Gi', 'nvidia.com/gpu': '1' });
    await objects.create(fromZero('zero-template', 'sized', { min: 0, max: 3, capacity: { cpu: '1', memory: '1Gi' } }));
    const p = await converged(
      'zero-template',
      (x) => cond(x, 'AutoscalingEnabled')?.message.includes('capacity') === true,
    );
    const md = await read<MachineDeployment>('MachineDeployment', 'zero-template');
    assert.equal(md.spec.replicas, 0);
    assert.equal(md.metadata.annotations?.[ANNOTATIONS.autoscalerMinSize], '0');
    assert.deepEqual(capacityOf(md), {
      [ANNOTATIONS.autoscalerCapacityCpu]: '8',
      [ANNOTATIONS.autoscalerCapacityMemory]: '32Gi',
      [ANNOTATIONS.autoscalerCapacityGpuCount]: '1',
      [ANNOTATIONS.autoscalerCapacityGpuType]: 'nvidia.com/gpu',
      [ANNOTATIONS.autoscalerCapacityLabels]: 'example.com/role=batch',
      [ANNOTATIONS.autoscalerCapacityTaints]: 'example.com/dedicated=batch:NoSchedule',
    });
    assert.equal(cond(p, 'AutoscalingEnabled')?.status, 'True');
    assert.match(
      cond(p, 'AutoscalingEnabled')?.message ?? '',
      /from LocalMachineTemplate sized's status \(cpu 8, memory 32Gi, 1 nvidia.com\/gpu\)/,
    );
  });

  it('when the template reports no capacity, the spec capacity should stand in and the condition should say so; without either, it should say the autoscaler cannot scale from zero; min above 0 drops the annotations', async () => {
    await template('plain');
    await objects.create(fromZero('zero-spec', 'plain', { min: 0, max: 3, capacity: { cpu: '2', memory: '4Gi' } }));
    let p = await converged('zero-spec', (x) => cond(x, 'AutoscalingEnabled')?.message.includes('capacity') === true);
    let md = await read<MachineDeployment>('MachineDeployment', 'zero-spec');
    assert.equal(md.spec.replicas, 0);
    assert.deepEqual(capacityOf(md), {
      [ANNOTATIONS.autoscalerCapacityCpu]: '2',
      [ANNOTATIONS.autoscalerCapacityMemory]: '4Gi',
      [ANNOTATIONS.autoscalerCapacityLabels]: 'example.com/role=batch',
      [ANNOTATIONS.autoscalerCapacityTaints]: 'example.com/dedicated=batch:NoSchedule',
    });
    assert.equal(cond(p, 'AutoscalingEnabled')?.status, 'True');
    assert.match(
      cond(p, 'AutoscalingEnabled')?.message ?? '',
      /from spec.autoScaling.capacity \(cpu 2, memory 4Gi\), as LocalMachineTemplate plain reports no capacity/,
    );

    await patchPool('zero-spec', { autoScaling: { capacity: null } });
    p = await converged('zero-spec', (x) => cond(x, 'AutoscalingEnabled')?.reason === 'CapacityUnknown');
    assert.equal(cond(p, 'AutoscalingEnabled')?.status, 'False');
    assert.match(cond(p, 'AutoscalingEnabled')?.message ?? '', /cannot scale the pool up from zero/);
    md = await read<MachineDeployment>('MachineDeployment', 'zero-spec');
    assert.deepEqual(capacityOf(md), {});

    await patchPool('zero-spec', { autoScaling: { min: 1, capacity: { cpu: '2' } } });
    p = await converged('zero-spec', (x) => cond(x, 'AutoscalingEnabled')?.reason === 'AsExpected');
    assert.doesNotMatch(cond(p, 'AutoscalingEnabled')?.message ?? '', /capacity/);
    md = await read<MachineDeployment>('MachineDeployment', 'zero-spec');
    assert.deepEqual([md.spec.replicas, capacityOf(md)], [1, {}]);
  });
});
