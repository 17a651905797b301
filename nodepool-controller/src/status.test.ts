import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { NodePool, RolloutRecord } from '../../api/src/nodepool.js';
import type { Machine } from '../../api/src/capi.js';
import { CONDITION_TYPES, type ConditionType } from '../../api/src/conditions.js';
import { samplePool, sampleInPlacePool } from '../../api/testing/nodepool.js';
import { computeStatus, type Observations } from './status.js';

const NOW = '2026-11-24T00:00:00Z';
const GATE =
  'n01: health check failed: 5m after the reboot into h2, the Node is not Ready (Ready=False, KubeletConfigInvalid: kubelet cannot start: invalid configuration: maxPods (--max-pods) -1 must not be a negative number); restored the previous files and units and rebooted';
const record: RolloutRecord = {
  from: 'h1',
  to: 'h2',
  since: NOW,
  changes: [{ input: 'release', detail: 'r:1.36.2 to r:1.36.3-broken-kubelet', strategy: 'InPlace' }],
};

function observed(rollout: Observations['rollout'], why?: RolloutRecord): Observations {
  return { pool: sampleInPlacePool(), machines: [], healthCheckExists: false, effectiveHash: 'h2', rollout, why };
}
const condition = (o: Observations, type: string): { status: string; reason: string; message: string } | undefined =>
  computeStatus({ observations: o, now: NOW }).conditions?.find((c) => c.type === type);

describe('pool status during an in-place rollout', () => {
  it('when the health gate rolled a node back and the rollout halted, UpdatingVersion should be False/Failed with the node and the reason', () => {
    const c = condition(
      observed({ from: 'h1', to: 'h2', changed: ['release'], progress: '0 of 3 updated', failure: GATE }),
      'UpdatingVersion',
    );
    assert.equal(c?.status, 'False');
    assert.equal(c?.reason, 'Failed');
    assert.equal(c?.message, `Updating the release (hash h1 to h2) failed: ${GATE}`);
  });

  it("when a node waits for the maintenance window because the rollout's ceiling holds its update back, UpdatingConfig should say it waits, not that it failed", () => {
    const waiting = 'n01: the update needs a reboot; waiting for the maintenance window (opens 2026-12-01T02:00Z)';
    const c = condition(
      observed({ from: 'h1', to: 'h2', changed: ['config'], progress: '2 of 3 updated', waiting }),
      'UpdatingConfig',
    );
    assert.deepEqual(
      [c?.status, c?.reason, c?.message],
      [
        'True',
        'WaitingForMaintenanceWindow',
        `Updating the config (hash h1 to h2) waits for the maintenance window: ${waiting}`,
      ],
    );
  });

  it('when the pool is paused mid-rollout, UpdatingConfig should say where it stopped', () => {
    const progress = '3 of 6 updated; paused at 3 of 6 by spec.pausedUntil: no node is handed out until it clears';
    const c = condition(observed({ from: 'h1', to: 'h2', changed: ['config'], progress }), 'UpdatingConfig');
    assert.equal(c?.status, 'True');
    assert.equal(c?.message, `Updating the config (hash h1 to h2): ${progress}`);
  });

  it('when a rollout is under way, status.rollout should hold its record; once none is, no record', () => {
    assert.deepEqual(
      computeStatus({ observations: observed({ from: 'h1', to: 'h2', changed: ['release'] }, record), now: NOW })
        .rollout,
      record,
    );
    assert.equal(computeStatus({ observations: observed(undefined), now: NOW }).rollout, undefined);
  });
});

// ---- the status computation as a table: observations → conditions ----

const OK = { ok: true, reason: 'AsExpected', message: 'ok' } as const;

function machine(name: string, ready = 'True', healthy = 'True'): Machine {
  const conditions = [
    { type: 'Ready', status: ready },
    { type: 'NodeHealthy', status: healthy },
  ];
  return {
    apiVersion: 'cluster.x-k8s.io/v1beta1',
    kind: 'Machine',
    metadata: { name, namespace: 'tenant-a' },
    spec: { clusterName: 'guest', bootstrap: {}, infrastructureRef: { name } },
    status: { conditions },
  } as unknown as Machine;
}

/** A converged pool: every verdict passes, three machines ready and available, a host reached the endpoint. */
function converged(patch: Partial<Observations> = {}, pool: (p: NodePool) => void = () => {}): Observations {
  return {
    pool: samplePool(pool),
    release: { ...OK, message: 'Release 1.36.3', version: '1.36.3' },
    config: OK,
    skew: OK,
    targetHash: 'h2',
    effectiveHash: 'h2',
    effectiveVersion: '1.36.3',
    payload: { reason: 'AsExpected', message: 'The payload is valid' },
    reachedIgnitionAt: NOW,
    healthCheckExists: false,
    child: { desired: 3, available: 3 },
    machines: [machine('m1'), machine('m2'), machine('m3')],
    ...patch,
  };
}

interface Row {
  when: string;
  should: string;
  o: Observations;
  type: ConditionType;
  want: { status: string; reason: string; message: string };
}

const late = { machine: 'm3', since: '2026-11-23T23:40:00Z', reason: 'no CSR seen from the host' };

const TABLE: Row[] = [
  {
    when: 'nothing was checked yet',
    should: 'say the release is Unknown',
    o: converged({ release: undefined }),
    type: 'ValidReleaseImage',
    want: { status: 'Unknown', reason: 'AsExpected', message: 'Release image not checked yet' },
  },
  {
    when: 'the release cannot be read',
    should: 'report its reason and message',
    o: converged({ release: { ok: false, reason: 'ImageUnreachable', message: 'no such image' } }),
    type: 'ValidReleaseImage',
    want: { status: 'False', reason: 'ImageUnreachable', message: 'no such image' },
  },
  {
    when: 'a config ConfigMap is missing',
    should: 'make Ready name the condition first',
    o: converged({
      config: {
        ok: false,
        reason: 'ConfigMapMissing',
        message: 'ConfigMap kubelet-config does not exist in namespace tenant-a',
      },
    }),
    type: 'Ready',
    want: {
      status: 'False',
      reason: 'NotReady',
      message: 'ValidMachineConfig: ConfigMap kubelet-config does not exist in namespace tenant-a',
    },
  },
  {
    when: 'the release is newer than the control plane',
    should: 'report the skew policy that refuses it',
    o: converged({ skew: { ok: false, reason: 'NodeNewerThanControlPlane', message: 'newer' } }),
    type: 'SupportedVersionSkew',
    want: { status: 'False', reason: 'NodeNewerThanControlPlane', message: 'newer' },
  },
  {
    when: 'the apiserver refused a child',
    should: "name the object, the code and the apiserver's message",
    o: converged({
      refusal: { kind: 'MachineSet', key: 'tenant-a/workers', code: 422, message: 'spec.replicas: Invalid value' },
    }),
    type: 'ChildObjectsAccepted',
    want: {
      status: 'False',
      reason: 'Refused',
      message: 'The apiserver refused MachineSet tenant-a/workers (422): spec.replicas: Invalid value',
    },
  },
  {
    when: 'the ignition server has not judged the payload',
    should: 'be Unknown and Pending',
    o: converged({ payload: {} }),
    type: 'ValidGeneratedPayload',
    want: { status: 'Unknown', reason: 'Pending', message: 'Waiting for the ignition server to generate the payload' },
  },
  {
    when: 'the ignition server refused the payload',
    should: 'carry its reason and message',
    o: converged({ payload: { reason: 'InvalidConfig', message: 'bad unit' } }),
    type: 'ValidGeneratedPayload',
    want: { status: 'False', reason: 'InvalidConfig', message: 'bad unit' },
  },
  {
    when: 'no host fetched its payload',
    should: 'say NotReached',
    o: converged({ reachedIgnitionAt: undefined }),
    type: 'ReachedIgnitionEndpoint',
    want: {
      status: 'False',
      reason: 'NotReached',
      message: 'No host has fetched its payload with the current token yet',
    },
  },
  {
    when: 'autoscaling is set',
    should: 'name its bounds',
    o: converged({}, (p) => (p.spec.autoScaling = { min: 1, max: 5 })),
    type: 'AutoscalingEnabled',
    want: { status: 'True', reason: 'AsExpected', message: 'The cluster autoscaler keeps between 1 and 5 nodes' },
  },
  {
    when: 'autoscaling is not set',
    should: 'be Disabled',
    o: converged(),
    type: 'AutoscalingEnabled',
    want: { status: 'False', reason: 'Disabled', message: 'spec.autoScaling is not set' },
  },
  {
    when: 'auto-repair is on and no health check exists yet',
    should: 'wait for ignition',
    o: converged({}, (p) => (p.spec.management.autoRepair = true)),
    type: 'AutorepairEnabled',
    want: {
      status: 'False',
      reason: 'WaitingForIgnition',
      message: 'The MachineHealthCheck is created once a host has reached the ignition endpoint',
    },
  },
  {
    when: 'auto-repair is on and the health check exists',
    should: 'be True',
    o: converged({ healthCheckExists: true }, (p) => (p.spec.management.autoRepair = true)),
    type: 'AutorepairEnabled',
    want: { status: 'True', reason: 'AsExpected', message: 'A MachineHealthCheck remediates unhealthy machines' },
  },
  {
    when: 'the pool is paused until a date',
    should: 'say until when',
    o: converged({ pausedUntil: '2026-11-25T00:00:00Z' }),
    type: 'ReconciliationActive',
    want: { status: 'False', reason: 'Paused', message: 'Paused by spec.pausedUntil until 2026-11-25T00:00:00Z' },
  },
  {
    when: 'the pool is paused',
    should: 'make Ready False on the pause',
    o: converged({ pausedUntil: 'true' }),
    type: 'Ready',
    want: { status: 'False', reason: 'NotReady', message: 'ReconciliationActive: Paused by spec.pausedUntil' },
  },
  {
    when: 'more than five machines are not ready',
    should: 'name the first five by name and count the rest',
    o: converged({ machines: ['m1', 'm2', 'm3', 'm4', 'm5', 'm6', 'm7'].map((n) => machine(n, 'False')) }),
    type: 'AllMachinesReady',
    want: {
      status: 'False',
      reason: 'MachinesNotReady',
      message: '7 of 7 machines are not ready: m1, m2, m3, m4, m5, and 2 more',
    },
  },
  {
    when: 'a Node is not healthy',
    should: 'name its machine',
    o: converged({ machines: [machine('m1'), machine('m2', 'True', 'False')] }),
    type: 'AllNodesHealthy',
    want: { status: 'False', reason: 'NodesNotHealthy', message: '1 of 2 machines are not healthy: m2' },
  },
  {
    when: 'booted hosts are joining within the timeout',
    should: 'count them and stay True',
    o: converged({ joining: { waiting: 2, late: [], timeoutMs: 600_000 } }),
    type: 'AllNodesJoined',
    want: { status: 'True', reason: 'AsExpected', message: '2 booted host(s) joining, within the 10m timeout' },
  },
  {
    when: 'booted hosts are past the join timeout',
    should: 'name the first, how many more, and why',
    o: converged({ joining: { waiting: 2, late: [late, { ...late, machine: 'm2' }], timeoutMs: 90_000 } }),
    type: 'AllNodesJoined',
    want: {
      status: 'False',
      reason: 'NodesNotJoined',
      message:
        '2 host(s) booted but did not join within 90s: m3 (and 1 more), booted at 2026-11-23T23:40:00Z: no CSR seen from the host',
    },
  },
  {
    when: 'a change waits on its token',
    should: 'make Ready False with what it waits for',
    o: converged({ pending: 'Waiting for the ignition server to mint the token of config hash h3' }),
    type: 'Ready',
    want: {
      status: 'False',
      reason: 'NotReady',
      message: 'Waiting for the ignition server to mint the token of config hash h3',
    },
  },
  {
    when: 'the pool has no child yet',
    should: 'say it has no machines',
    o: converged({ child: undefined }),
    type: 'Ready',
    want: { status: 'False', reason: 'NotReady', message: 'The pool has no machines yet' },
  },
  {
    when: 'fewer machines are available than desired',
    should: 'count them',
    o: converged({ child: { desired: 3, available: 1 } }),
    type: 'Ready',
    want: { status: 'False', reason: 'NotReady', message: '1 of 3 machines are available' },
  },
  {
    when: 'every verdict passes and every machine is available',
    should: 'be Ready',
    o: converged(),
    type: 'Ready',
    want: { status: 'True', reason: 'AsExpected', message: 'All machines are available at the desired config' },
  },
];

describe('the status computation (observations → conditions)', () => {
  for (const row of TABLE) {
    it(`when ${row.when}, ${row.type} should ${row.should}`, () => {
      const c = condition(row.o, row.type);
      assert.deepEqual(c && { status: c.status, reason: c.reason, message: c.message }, row.want);
    });
  }

  it("when the observations hold every condition type, it should list each once in the API's order", () => {
    const types = computeStatus({ observations: converged(), now: NOW }).conditions?.map((c) => c.type);
    assert.deepEqual(types, [...CONDITION_TYPES]);
  });

  it('when a condition keeps its status, it should keep its transition time; when it changes, it should take the new time', () => {
    const before = computeStatus({ observations: converged(), now: '2026-11-23T00:00:00Z' });
    const o = converged({ child: { desired: 3, available: 2 } }, (p) => (p.status = before));
    const after = computeStatus({ observations: o, now: NOW }).conditions ?? [];
    assert.equal(after.find((c) => c.type === 'ValidReleaseImage')?.lastTransitionTime, '2026-11-23T00:00:00Z');
    assert.equal(after.find((c) => c.type === 'Ready')?.lastTransitionTime, NOW);
  });

  it('when the pool is converged, it should report the effective hash, version, available replicas and generation', () => {
    const status = computeStatus({ observations: converged(), now: NOW });
    assert.deepEqual(
      { ...status, conditions: undefined },
      { replicas: 3, version: '1.36.3', configHash: 'h2', observedGeneration: 3, conditions: undefined },
    );
  });

  it('when a rollout is under way, it should keep the version the nodes had until it ends', () => {
    const o = converged(
      { rollout: { from: 'h1', to: 'h2', changed: ['release'] }, effectiveVersion: '1.36.4' },
      (p) => (p.status = { version: '1.36.3' }),
    );
    assert.equal(computeStatus({ observations: o, now: NOW }).version, '1.36.3');
  });
});

describe('pool status of the rollout gate', () => {
  const fine = { ok: true, reason: 'AsExpected', message: 'fine' } as const;
  const checked = (): Observations => ({ ...observed(undefined), release: fine, config: fine, skew: fine });

  it('when the maintenance window holds a change, RolloutAllowed should be False with when it opens, and Ready should say so', () => {
    const message = 'waiting for the maintenance window (opens 2026-12-01T02:00Z)';
    const o: Observations = {
      ...checked(),
      gate: { allowed: false, reason: 'WaitingForMaintenanceWindow', message },
      pending: `The change to config hash h3 is held: ${message}`,
    };
    assert.deepEqual(condition(o, 'RolloutAllowed'), {
      ...condition(o, 'RolloutAllowed'),
      status: 'False',
      reason: 'WaitingForMaintenanceWindow',
      message,
    });
    assert.match(condition(o, 'Ready')?.message ?? '', /held: waiting for the maintenance window \(opens/);
  });

  it('when the window cannot be read, ValidMaintenanceWindow should be False with the reason and Ready should name it', () => {
    const o: Observations = {
      ...checked(),
      window: { ok: false, reason: 'InvalidTimeZone', message: 'timeZone "Mars/Olympus" is not a time zone' },
    };
    assert.deepEqual(
      [condition(o, 'ValidMaintenanceWindow')?.status, condition(o, 'ValidMaintenanceWindow')?.reason],
      ['False', 'InvalidTimeZone'],
    );
    assert.match(condition(o, 'Ready')?.message ?? '', /^ValidMaintenanceWindow: timeZone/);
  });

  it('when there is no window and no rollout waits, both conditions should be fine', () => {
    const o = observed(undefined);
    assert.deepEqual(
      ['ValidMaintenanceWindow', 'RolloutAllowed'].map((t) => condition(o, t)?.reason),
      ['AsExpected', 'AsExpected'],
    );
  });
});
