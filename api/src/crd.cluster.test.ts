/**
 * The NodePool CRD on a real kube-apiserver: bad NodePools are refused with the schema/CEL message a person
 * reads, and a valid one is accepted and defaulted. Each assertion would fail against a fake apiserver.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import * as k8s from '#k8s';
import { execFileSync } from 'node:child_process';
import { startCluster, installKindlingCrds, testbedBinary, type Cluster } from '../../test/bed/src/index.js';
import type { DisruptionPolicy } from './disruption.js';
import type { NodePool } from './nodepool.js';
import { nodePoolFixture } from '../testing/nodepool.js';

const NS = 'default';

/** The message of the Status the apiserver answered with. */
function statusMessage(err: unknown): string {
  const body = (err as { body?: unknown }).body;
  return (JSON.parse(typeof body === 'string' ? body : '{}') as { message?: string }).message ?? String(err);
}

const pool = (name: string, patch?: (p: NodePool) => void): NodePool => nodePoolFixture(name, NS, patch);

/** An InPlace pool's management with this disruption policy (loosely typed: the tests send what a person might). */
const inPlacePolicy = (disruptionPolicy: unknown): NodePool['spec']['management'] => ({
  upgradeType: 'InPlace',
  inPlace: { disruptionPolicy: disruptionPolicy as DisruptionPolicy },
});

describe('NodePool CRD on a real apiserver', () => {
  let cluster: Cluster;
  let objects: k8s.KubernetesObjectApi;

  before(async () => {
    cluster = await startCluster({ name: 'crd', controllerManager: false });
    await installKindlingCrds(cluster);
    objects = k8s.KubernetesObjectApi.makeApiClient(cluster.kubeConfig);
  });
  after(async () => cluster?.stop());

  async function refusal(obj: NodePool): Promise<string> {
    try {
      await objects.create(obj);
    } catch (err) {
      assert.equal((err as { code?: number }).code, 422, `expected 422, got ${String(err)}`);
      return statusMessage(err);
    }
    assert.fail(`NodePool ${obj.metadata.name} was accepted`);
  }

  const invalid: [string, (p: NodePool) => void, RegExp][] = [
    [
      'both replicas and autoScaling are set',
      (p) => (p.spec.autoScaling = { min: 1, max: 3 }),
      /set exactly one of spec.replicas or spec.autoScaling/,
    ],
    [
      'neither replicas nor autoScaling is set',
      (p) => delete p.spec.replicas,
      /set exactly one of spec.replicas or spec.autoScaling/,
    ],
    [
      'autoScaling.max is below min',
      (p) => {
        delete p.spec.replicas;
        p.spec.autoScaling = { min: 5, max: 2 };
      },
      /autoScaling.max must be greater than or equal to spec.autoScaling.min/,
    ],
    [
      'inPlace is set on a Replace pool',
      (p) => (p.spec.management.inPlace = { maxUnavailable: 2 }),
      /inPlace may only be set when spec.management.upgradeType is InPlace/,
    ],
    [
      'inPlace.maxUnavailable is 150%',
      (p) => (p.spec.management = { upgradeType: 'InPlace', inPlace: { maxUnavailable: '150%' } }),
      /maxUnavailable must be an integer of at least 1 or a percentage/,
    ],
    [
      'inPlace.maxUnavailable is 0',
      (p) => (p.spec.management = { upgradeType: 'InPlace', inPlace: { maxUnavailable: 0 } }),
      /maxUnavailable must be an integer of at least 1/,
    ],
    [
      'nodeDrainTimeout is prose',
      (p) => (p.spec.nodeDrainTimeout = 'ten minutes'),
      /must be a duration such as 30s, 10m or 1h30m/,
    ],
    [
      'pausedUntil is not a date',
      (p) => (p.spec.pausedUntil = 'tomorrow'),
      /pausedUntil must be 'true', 'false' or an RFC3339 date/,
    ],
    [
      'upgradeType is unknown',
      (p) => (p.spec.management.upgradeType = 'Rolling' as 'Replace'),
      /Unsupported value: "Rolling": supported values: "Replace", "InPlace"/,
    ],
    [
      'more than 10 config ConfigMaps',
      (p) => (p.spec.config = Array.from({ length: 11 }, (_, i) => ({ name: `c${i}` }))),
      /Too many: 11: must have at most 10 items/,
    ],
    [
      'more than 50 taints',
      (p) => (p.spec.taints = Array.from({ length: 51 }, (_, i) => ({ key: `k${i}`, effect: 'NoSchedule' as const }))),
      /Too many: 51: must have at most 50 items/,
    ],
    [
      'maxSurge and maxUnavailable are both 0',
      (p) => (p.spec.management.replace = { rollingUpdate: { maxSurge: 0, maxUnavailable: 0 } }),
      /maxSurge and maxUnavailable cannot both be 0/,
    ],
    [
      'rollingUpdate is set with OnDelete',
      (p) => (p.spec.management.replace = { strategy: 'OnDelete', rollingUpdate: { maxSurge: 2 } }),
      /rollingUpdate may only be set when the strategy is RollingUpdate/,
    ],
    [
      'maxSurge is a malformed percentage',
      (p) => (p.spec.management.replace = { rollingUpdate: { maxSurge: '10 percent' } }),
      /must be a non-negative integer or a percentage from 0% to 100%/,
    ],
    [
      'a node label key has a space',
      (p) => (p.spec.nodeLabels = { 'my role': 'x' }),
      /nodeLabels keys must be label keys/,
    ],
    [
      'the release image is missing',
      (p) => (p.spec.release = {} as NodePool['spec']['release']),
      /spec.release.image: Required value/,
    ],
    [
      'the platform is missing',
      (p) => delete (p.spec as Partial<NodePool['spec']>).platform,
      /spec.platform: Required value/,
    ],
    [
      'maxSurge is set with the MachineSet engine',
      (p) => (p.spec.management = { upgradeType: 'InPlace', inPlace: { maxSurge: 1 } }),
      /maxSurge may only be set with engine ClusterAPI/,
    ],
    [
      'the engine is unknown',
      (p) => (p.spec.management = { upgradeType: 'InPlace', inPlace: { engine: 'Kured' as 'ClusterAPI' } }),
      /Unsupported value: "Kured": supported values: "MachineSet", "ClusterAPI"/,
    ],
    [
      'the maintenance window schedule has 4 fields',
      (p) => (p.spec.management.maintenanceWindow = { schedule: '0 2 * *', duration: '1h' }),
      /maintenanceWindow.schedule must be a 5-field cron expression/,
    ],
    [
      'the maintenance window duration is prose',
      (p) => (p.spec.management.maintenanceWindow = { schedule: '0 2 * * *', duration: 'an hour' }),
      /maintenanceWindow.duration must be a duration such as 4h or 90m/,
    ],
    [
      'the maintenance window time zone is not an IANA name',
      (p) => (p.spec.management.maintenanceWindow = { schedule: '0 2 * * *', duration: '1h', timeZone: 'UTC+2 hours' }),
      /maintenanceWindow.timeZone must be an IANA time zone name/,
    ],
    ['the cluster name is not a DNS label', (p) => (p.spec.clusterName = 'Guest_1'), /clusterName must be a DNS label/],
    [
      'the infrastructure template kind is not a kind',
      (p) => (p.spec.platform.infrastructureTemplateRef.kind = 'machinetemplates/x'),
      /infrastructureTemplateRef.kind must be a kind such as AWSMachineTemplate/,
    ],
    [
      'the infrastructure template name is not an object name',
      (p) => (p.spec.platform.infrastructureTemplateRef.name = 'small,metadata.name=other'),
      /infrastructureTemplateRef.name must be an object name/,
    ],
    [
      'allowSkips names a rule that cannot be skipped',
      (p) => (p.spec.release.allowSkips = ['NodeNewerThanControlPlane' as 'Downgrade']),
      /Unsupported value: "NodeNewerThanControlPlane": supported values: "Downgrade", "MinorSkip"/,
    ],
    [
      'allowSkips names a rule twice',
      (p) => (p.spec.release.allowSkips = ['Downgrade', 'Downgrade']),
      /spec.release.allowSkips\[1\]: Duplicate value: "Downgrade"/,
    ],
    [
      'nodeDeletionTimeout is prose',
      (p) => (p.spec.nodeDeletionTimeout = 'a while'),
      /spec.nodeDeletionTimeout: Invalid value: "a while": must be a duration such as 30s, 10m or 1h30m/,
    ],
    [
      'minReadySeconds is negative',
      (p) => (p.spec.minReadySeconds = -1),
      /spec.minReadySeconds: Invalid value: -1: spec.minReadySeconds in body should be greater than or equal to 0/,
    ],
    [
      'a Machine annotation key has a space',
      (p) => (p.spec.machineAnnotations = { 'my owner': 'x' }),
      /spec.machineAnnotations: Invalid value: annotation keys must be keys such as 'example.com\/owner' or 'owner'/,
    ],
    [
      'a node annotation key has two slashes',
      (p) => (p.spec.nodeAnnotations = { 'a/b/c': 'x' }),
      /spec.nodeAnnotations: Invalid value: annotation keys must be keys such as/,
    ],
    [
      'the scale-from-zero memory is prose',
      (p) => {
        delete p.spec.replicas;
        p.spec.autoScaling = { min: 0, max: 3, capacity: { cpu: '4', memory: 'sixteen gigs' } };
      },
      /spec.autoScaling.capacity.memory: Invalid value: "sixteen gigs": must be a quantity such as 4, 500m or 16Gi/,
    ],
    [
      'the scale-from-zero GPU count is negative',
      (p) => {
        delete p.spec.replicas;
        p.spec.autoScaling = { min: 0, max: 3, capacity: { gpuCount: -2 } };
      },
      /autoScaling.capacity.gpuCount: Invalid value: -2/,
    ],
    [
      'a disruption policy Restart names no unit',
      (p) => (p.spec.management = inPlacePolicy({ files: [{ path: '/etc/motd', actions: [{ type: 'Restart' }] }] })),
      /a Reload or Restart action names its unit/,
    ],
    [
      'a disruption policy combines None with another action',
      (p) => (p.spec.management = inPlacePolicy({ sshKeys: { actions: [{ type: 'None' }, { type: 'Drain' }] } })),
      /the action None cannot be combined with other actions/,
    ],
    [
      'a disruption policy path is relative',
      (p) => (p.spec.management = inPlacePolicy({ files: [{ path: 'etc/motd', actions: [{ type: 'None' }] }] })),
      /a disruption policy path must be absolute/,
    ],
    [
      'a disruption policy names a unit that is no systemd unit',
      (p) => (p.spec.management = inPlacePolicy({ units: [{ name: 'kubelet', actions: [{ type: 'None' }] }] })),
      /must be a systemd unit name such as kubelet.service/,
    ],
  ];

  for (const [condition, mistake, message] of invalid) {
    it(`when ${condition}, it should be refused with a message that says so`, async () => {
      const body = await refusal(pool(`bad-${invalid.findIndex((c) => c[0] === condition)}`, mistake));
      assert.match(body, message);
    });
  }

  it('when a NodePool is valid, it should be accepted with its defaults filled in', async () => {
    const created = await objects.create(pool('good', (p) => (p.spec.pausedUntil = '2026-12-31T18:00:00Z')));
    assert.deepEqual(created.spec.management, {
      upgradeType: 'Replace',
      replace: { strategy: 'RollingUpdate', rollingUpdate: { maxSurge: 1, maxUnavailable: 0 } },
      autoRepair: false,
    });
    assert.equal(created.spec.release.allowPrerelease, false);
  });

  it('when a pool sets the version overrides, the in-place metadata and a scale-from-zero capacity, it should be accepted as written', async () => {
    const spec = {
      allowSkips: ['Downgrade', 'MinorSkip'] as ('Downgrade' | 'MinorSkip')[],
      capacity: { cpu: '500m', memory: '16Gi', gpuCount: 1, gpuType: 'nvidia.com/gpu' },
      machineAnnotations: { 'example.com/owner': 'team-a', owner: 'b' },
      nodeAnnotations: { 'example.com/rack': 'r1' },
    };
    const created = await objects.create(
      pool('everything', (p) => {
        p.spec.release.allowSkips = spec.allowSkips;
        delete p.spec.replicas;
        p.spec.autoScaling = { min: 0, max: 3, capacity: spec.capacity };
        p.spec.machineAnnotations = spec.machineAnnotations;
        p.spec.nodeAnnotations = spec.nodeAnnotations;
        p.spec.nodeDeletionTimeout = '1m30s';
        p.spec.minReadySeconds = 20;
      }),
    );
    assert.deepEqual(created.spec.release.allowSkips, spec.allowSkips);
    assert.deepEqual(created.spec.autoScaling, { min: 0, max: 3, capacity: spec.capacity });
    assert.deepEqual(created.spec.machineAnnotations, spec.machineAnnotations);
    assert.deepEqual(created.spec.nodeAnnotations, spec.nodeAnnotations);
    assert.equal(created.spec.nodeDeletionTimeout, '1m30s');
    assert.equal(created.spec.minReadySeconds, 20);
  });

  it('when an InPlace pool gives an empty inPlace, it should default maxUnavailable to 1', async () => {
    const created = await objects.create(
      pool('inplace', (p) => (p.spec.management = { upgradeType: 'InPlace', inPlace: {} })),
    );
    assert.deepEqual(created.spec.management.inPlace, { engine: 'MachineSet', maxUnavailable: 1 });
  });

  it('when a disruption policy is valid, it should be accepted with Exact as the default match', async () => {
    const policy: DisruptionPolicy = {
      files: [
        { path: '/etc/motd', actions: [{ type: 'None' }] },
        { path: '/etc/app/', match: 'Prefix', actions: [{ type: 'Restart', unit: 'app@one.service' }] },
      ],
      units: [
        { name: 'chronyd.service', actions: [{ type: 'DaemonReload' }, { type: 'Restart', unit: 'chronyd.service' }] },
      ],
    };
    const created = await objects.create(pool('policy', (p) => (p.spec.management = inPlacePolicy(policy))));
    assert.equal(created.spec.management.inPlace?.disruptionPolicy?.files?.[0]?.match, 'Exact');
    assert.deepEqual(created.spec.management.inPlace?.disruptionPolicy?.units, policy.units);
  });

  it('when the in-place engine of an existing pool changes, it should be refused with why and what to do instead', async () => {
    const created = await objects.create(
      pool(
        'engine',
        (p) => (p.spec.management = { upgradeType: 'InPlace', inPlace: { engine: 'ClusterAPI', maxSurge: 1 } }),
      ),
    );
    const switched = structuredClone(created);
    switched.spec.management.inPlace = { engine: 'MachineSet', maxUnavailable: 1 };
    await assert.rejects(objects.replace(switched), (err) =>
      /inPlace.engine is immutable: .*create a new NodePool with the other engine/.test(statusMessage(err)),
    );
    const dropped = structuredClone(created);
    delete dropped.spec.management.inPlace;
    await assert.rejects(objects.replace(dropped), (err) => /inPlace.engine is immutable/.test(statusMessage(err)));
  });

  it('when clusterName or upgradeType changes on an existing pool, it should be refused as immutable', async () => {
    const created = await objects.create(pool('immutable'));
    const moved = structuredClone(created);
    moved.spec.clusterName = 'other';
    await assert.rejects(objects.replace(moved), (err) => /spec.clusterName is immutable/.test(statusMessage(err)));
    const retyped = structuredClone(created);
    retyped.spec.management.upgradeType = 'InPlace';
    await assert.rejects(objects.replace(retyped), (err) =>
      /spec.management.upgradeType is immutable/.test(statusMessage(err)),
    );
  });

  it('when a pool is scaled through the scale subresource, it should change spec.replicas', async () => {
    await objects.create(pool('scaled'));
    const api = cluster.kubeConfig.makeApiClient(k8s.CustomObjectsApi);
    await api.patchNamespacedCustomObjectScale(
      {
        group: 'kindling.dev',
        version: 'v1beta1',
        namespace: NS,
        plural: 'nodepools',
        name: 'scaled',
        body: { spec: { replicas: 7 } },
      },
      k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
    );
    const read = await objects.read<NodePool>({
      apiVersion: 'kindling.dev/v1beta1',
      kind: 'NodePool',
      metadata: { name: 'scaled', namespace: NS },
    });
    assert.equal(read.spec.replicas, 7);
  });

  it('when kubectl lists pools by short name, it should show the printer columns', async () => {
    await objects.create(pool('listed'));
    const table = execFileSync(
      testbedBinary('kubectl'),
      ['--kubeconfig', cluster.kubeconfigPath, 'get', 'np', 'listed', '-n', NS],
      { encoding: 'utf8' },
    );
    const [header, row] = table.trim().split('\n');
    assert.deepEqual(header?.split(/\s+/), [
      'NAME',
      'CLUSTER',
      'DESIRED',
      'CURRENT',
      'VERSION',
      'UPDATINGVERSION',
      'UPDATINGCONFIG',
      'MESSAGE',
      'AGE',
    ]);
    assert.match(row ?? '', /^listed\s+guest\s+2\s/);
  });
});
