import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  desiredBootstrapTemplate,
  desiredMachineDeployment,
  desiredMachineHealthCheck,
  desiredMachinePropagation,
  desiredMachineSet,
  desiredReplicas,
  durationSeconds,
} from './capi.js';
import { goldenIn } from '../../support/testing/golden.js';
import { ANNOTATIONS } from '../../api/src/keys.js';
import { DEFAULT_HEALTH_CHECK_TIMEOUT, type NodePool } from '../../api/src/nodepool.js';
import { scaleFromZero } from './capacity.js';
import { configHash, normaliseConfig } from './hash.js';
import { sampleInPlacePool, samplePool } from '../../api/testing/nodepool.js';

const assertGolden = goldenIn('nodepool-controller/src/testdata');

const opts = { hash: '0123456789abcdef', version: 'v1.36.3' };

describe('desiredMachineDeployment', () => {
  it('when a rollout that replaces Machines is held on the ClusterAPI engine, it should pause the MachineDeployment as on Replace; an in-place one only carries the hold', () => {
    const capi = samplePool((p) => (p.spec.management = { upgradeType: 'InPlace', inPlace: { engine: 'ClusterAPI' } }));
    const hold = 'waiting for the maintenance window (opens 2026-12-01T02:00Z)';
    const replacing = desiredMachineDeployment(capi, { ...opts, hold, replacesMachines: true });
    assert.equal(replacing.spec.paused, true, 'Cluster API creates no Machine of the new template');
    assert.equal(replacing.metadata.annotations?.[ANNOTATIONS.rolloutHold], hold);
    const inPlace = desiredMachineDeployment(capi, { ...opts, hold });
    assert.deepEqual([inPlace.spec.paused, inPlace.metadata.annotations?.[ANNOTATIONS.rolloutHold]], [undefined, hold]);
    assert.equal(desiredMachineDeployment(capi, { ...opts, replacesMachines: true }).spec.paused, undefined);
    assert.equal(desiredMachineDeployment(samplePool(), { ...opts, hold }).spec.paused, true);
  });

  it('when the pool is Replace, it should be a v1beta2 MachineDeployment owned by the pool (golden)', () => {
    assertGolden('machinedeployment.json', desiredMachineDeployment(samplePool(), opts));
  });

  it('when the pool autoscales, it should carry min/max annotations and clamp the live replicas (golden)', () => {
    const pool = samplePool((p) => {
      delete p.spec.replicas;
      p.spec.autoScaling = { min: 2, max: 5 };
      p.spec.management.replace = { strategy: 'OnDelete' };
    });
    assertGolden('machinedeployment-autoscaling.json', desiredMachineDeployment(pool, { ...opts, liveReplicas: 9 }));
  });

  it('when the strategy is OnDelete, it should not carry rollingUpdate', () => {
    const md = desiredMachineDeployment(
      samplePool((p) => (p.spec.management.replace = { strategy: 'OnDelete' })),
      opts,
    );
    assert.deepEqual(md.spec.rollout, { strategy: { type: 'OnDelete' } });
  });

  it('when only labels, taints, timeouts or replicas change, it should keep the bootstrap data and version', () => {
    const before = desiredMachineDeployment(samplePool(), opts);
    const after = desiredMachineDeployment(
      samplePool((p) => {
        p.spec.nodeLabels = {};
        p.spec.taints = [];
        p.spec.nodeDrainTimeout = '1h';
        p.spec.replicas = 7;
      }),
      opts,
    );
    assert.deepEqual(after.spec.template.spec.bootstrap, before.spec.template.spec.bootstrap);
    assert.equal(after.spec.template.spec.version, before.spec.template.spec.version);
    assert.deepEqual(after.spec.template.metadata?.labels, {
      'kindling.dev/nodepool': 'workers',
      'cluster.x-k8s.io/cluster-name': 'guest',
    });
    assert.equal(after.spec.template.spec.taints, undefined);
  });
});

describe('desiredMachineSet', () => {
  it('when the pool is InPlace, it should be a v1beta2 MachineSet with target hash and resolved maxUnavailable (golden)', () => {
    assertGolden('machineset.json', desiredMachineSet(sampleInPlacePool(), opts));
  });

  it('when a node label tries to take a selector key, it should keep the selector label', () => {
    const ms = desiredMachineSet(
      sampleInPlacePool((p) => (p.spec.nodeLabels = { 'kindling.dev/nodepool': 'evil' })),
      opts,
    );
    assert.equal(ms.spec.template.metadata?.labels?.['kindling.dev/nodepool'], 'workers');
    assert.deepEqual(ms.spec.selector.matchLabels, {
      'kindling.dev/nodepool': 'workers',
      'cluster.x-k8s.io/cluster-name': 'guest',
    });
  });
});

describe('desiredReplicas', () => {
  it('when autoscaling, it should keep a live count in range and clamp one out of range', () => {
    const pool = samplePool((p) => {
      delete p.spec.replicas;
      p.spec.autoScaling = { min: 2, max: 5 };
    });
    assert.deepEqual(
      [undefined, 0, 3, 5, 9].map((n) => desiredReplicas(pool, n)),
      [2, 2, 3, 5, 5],
    );
    assert.equal(desiredReplicas(samplePool(), 9), 3);
  });
});

describe('durationSeconds', () => {
  it('when given Go durations, it should give whole seconds', () => {
    assert.deepEqual(
      ['10m', '1m30s', '1.5h', '500ms', '0s', '2h3m4s'].map(durationSeconds),
      [600, 90, 5400, 0, 0, 7384],
    );
    assert.equal(durationSeconds(undefined), undefined);
    assert.throws(() => durationSeconds('ten'));
  });
});

describe('desiredMachineHealthCheck', () => {
  it('when autoRepair is on, it should select the pool with sane defaults (golden)', () => {
    assertGolden('machinehealthcheck.json', desiredMachineHealthCheck(sampleInPlacePool()));
  });

  it('when the pool carries a health-check timeout annotation, it should use it; a malformed one keeps the default', () => {
    const withTimeout = (value: string): number[] => {
      const pool = sampleInPlacePool();
      pool.metadata.annotations = { ...pool.metadata.annotations, [ANNOTATIONS.machineHealthCheckTimeout]: value };
      return desiredMachineHealthCheck(pool).spec.checks?.unhealthyNodeConditions?.map((c) => c.timeoutSeconds) ?? [];
    };
    assert.deepEqual(withTimeout('1m30s'), [90, 90]);
    assert.deepEqual(withTimeout('soon'), [480, 480]);
    assert.deepEqual(withTimeout('0s'), [480, 480]);
  });
});

describe('desiredMachinePropagation', () => {
  it('when propagating onto a Machine, it should hold only labels, taints and timeouts (golden)', () => {
    assertGolden(
      'machine-propagation.json',
      desiredMachinePropagation(samplePool(), { name: 'workers-abcde', namespace: 'tenant-a' }),
    );
  });

  it('when the pool has no labels, taints or timeouts, it should apply empty labels so earlier ones are removed', () => {
    const pool = samplePool((p) => {
      delete p.spec.nodeLabels;
      delete p.spec.taints;
      delete p.spec.nodeDrainTimeout;
      delete p.spec.nodeVolumeDetachTimeout;
    });
    assert.deepEqual(desiredMachinePropagation(pool, { name: 'm', namespace: 'ns' }), {
      apiVersion: 'cluster.x-k8s.io/v1beta2',
      kind: 'Machine',
      metadata: { name: 'm', namespace: 'ns', labels: {} },
      spec: {},
    });
  });
});

describe('the ClusterAPI in-place engine', () => {
  const clusterApiPool = sampleInPlacePool(
    (p) => (p.spec.management.inPlace = { engine: 'ClusterAPI', maxUnavailable: 2, maxSurge: 1 }),
  );

  it('when an InPlace pool uses the ClusterAPI engine, it should be a MachineDeployment booting from its bootstrap template under the pool’s bounds (golden)', () => {
    const md = desiredMachineDeployment(clusterApiPool, opts);
    assertGolden('machinedeployment-clusterapi.json', md);
    assert.deepEqual(md.spec.template.spec.bootstrap, {
      configRef: { apiGroup: 'bootstrap.kindling.dev', kind: 'KindlingConfigTemplate', name: `workers-${opts.hash}` },
    });
    assert.deepEqual(md.spec.rollout, {
      strategy: { type: 'RollingUpdate', rollingUpdate: { maxSurge: 1, maxUnavailable: 2 } },
    });
  });

  it('when a ClusterAPI engine pool sets a health check timeout, it should carry it on the MachineDeployment for UpdateMachine, else the default', () => {
    const timeoutOf = (md: { metadata: { annotations?: Record<string, string> } }): string | undefined =>
      md.metadata.annotations?.[ANNOTATIONS.healthCheckTimeout];
    assert.equal(
      timeoutOf(
        desiredMachineDeployment(
          sampleInPlacePool((p) => (p.spec.management.inPlace = { engine: 'ClusterAPI', healthCheckTimeout: '90s' })),
          opts,
        ),
      ),
      '90s',
    );
    assert.equal(timeoutOf(desiredMachineDeployment(clusterApiPool, opts)), DEFAULT_HEALTH_CHECK_TIMEOUT);
    assert.equal(
      timeoutOf(desiredMachineDeployment(samplePool(), opts)),
      undefined,
      'a Replace pool has no health gate',
    );
  });

  it('when the ClusterAPI engine pool sets no bounds, it should update one Machine at a time without surging', () => {
    const md = desiredMachineDeployment(
      sampleInPlacePool((p) => (p.spec.management.inPlace = { engine: 'ClusterAPI' })),
      opts,
    );
    assert.deepEqual(md.spec.rollout?.strategy?.rollingUpdate, { maxSurge: 0, maxUnavailable: 1 });
  });

  it('when the hash changes, it should be a new bootstrap template naming the pool and hash, owned by the pool (golden)', () => {
    assertGolden('kindlingconfigtemplate.json', desiredBootstrapTemplate(clusterApiPool, opts.hash));
    assert.notEqual(
      desiredBootstrapTemplate(clusterApiPool, 'ffff').metadata.name,
      desiredBootstrapTemplate(clusterApiPool, opts.hash).metadata.name,
    );
  });
});

describe('metadata and timeouts in place', () => {
  const withMetadata = (p: NodePool): void => {
    p.spec.machineAnnotations = { 'example.com/owner': 'team-a' };
    p.spec.nodeDeletionTimeout = '45s';
    p.spec.minReadySeconds = 20;
  };

  it('when the pool sets Machine annotations, nodeDeletionTimeout and minReadySeconds, it should put them in the template and on existing Machines', () => {
    for (const child of [
      desiredMachineSet(sampleInPlacePool(withMetadata), opts),
      desiredMachineDeployment(samplePool(withMetadata), opts),
    ]) {
      assert.deepEqual(child.spec.template.metadata?.annotations, { 'example.com/owner': 'team-a' });
      assert.equal(child.spec.template.spec.deletion?.nodeDeletionTimeoutSeconds, 45);
      assert.equal(child.spec.template.spec.minReadySeconds, 20);
    }
    assertGolden(
      'machine-propagation-metadata.json',
      desiredMachinePropagation(samplePool(withMetadata), { name: 'workers-abcde', namespace: 'tenant-a' }),
    );
  });

  it('when they change or are removed, it should keep the bootstrap data, version and config hash', () => {
    const hashOf = (p: NodePool): string => configHash({ release: p.spec.release.image, config: normaliseConfig([]) });
    const [before, after] = [samplePool(withMetadata), samplePool()];
    assert.equal(hashOf(after), hashOf(before));
    const [a, b] = [desiredMachineDeployment(before, opts), desiredMachineDeployment(after, opts)];
    assert.deepEqual(b.spec.template.spec.bootstrap, a.spec.template.spec.bootstrap);
    assert.equal(b.spec.template.spec.version, a.spec.template.spec.version);
    assert.equal(b.spec.template.metadata?.annotations, undefined);
    assert.equal(b.spec.template.spec.minReadySeconds, undefined);
    assert.equal(desiredMachinePropagation(after, { name: 'm' }).metadata['annotations'], undefined);
  });
});

describe('scale from zero', () => {
  const fromZero = (patch: (p: NodePool) => void = () => {}): NodePool =>
    samplePool((p) => {
      delete p.spec.replicas;
      p.spec.autoScaling = { min: 0, max: 4 };
      patch(p);
    });
  const capacityOf = (pool: NodePool, template?: Record<string, string>): Record<string, string> | undefined =>
    desiredMachineDeployment(pool, { ...opts, capacity: scaleFromZero(pool, template)?.annotations }).metadata
      .annotations;

  it('when min is 0 and the template reports capacity, it should carry the autoscaler capacity annotations from it (golden)', () => {
    const pool = fromZero((p) => (p.spec.autoScaling = { min: 0, max: 4, capacity: { cpu: '1', memory: '1Gi' } }));
    const template = { cpu: '4', memory: '16Gi', 'nvidia.com/gpu': '2', pods: '110' };
    assert.equal(scaleFromZero(pool, template)?.source, 'InfrastructureTemplate');
    assertGolden('machinedeployment-scale-from-zero.json', capacityOf(pool, template));
  });

  it('when the template reports none, it should take spec.autoScaling.capacity and say so', () => {
    const pool = fromZero(
      (p) =>
        (p.spec.autoScaling = {
          min: 0,
          max: 4,
          capacity: { cpu: '2', memory: '8Gi', gpuCount: 1, gpuType: 'nvidia.com/gpu' },
        }),
    );
    const decided = scaleFromZero(pool, undefined);
    assert.equal(decided?.source, 'Spec');
    assert.match(decided?.message ?? '', /from spec\.autoScaling\.capacity \(cpu 2, memory 8Gi, 1 nvidia\.com\/gpu\)/);
    assert.equal(capacityOf(pool)?.[ANNOTATIONS.autoscalerCapacityGpuCount], '1');
  });

  it('when neither reports capacity, it should write none and say the autoscaler cannot scale from zero', () => {
    const decided = scaleFromZero(fromZero(), {});
    assert.equal(decided?.source, undefined);
    assert.match(decided?.message ?? '', /cannot scale the pool up from zero/);
  });

  it('when min is above 0, it should carry no capacity annotations even with a spec capacity', () => {
    const pool = fromZero((p) => (p.spec.autoScaling = { min: 1, max: 4, capacity: { cpu: '2' } }));
    assert.equal(scaleFromZero(pool, { cpu: '4' }), undefined);
    assert.equal(capacityOf(pool, { cpu: '4' })?.[ANNOTATIONS.autoscalerCapacityCpu], undefined);
  });
});
