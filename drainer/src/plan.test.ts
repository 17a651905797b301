import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type * as k8s from '#k8s';
import type { Machine, MachineSet } from '../../api/src/capi.js';
import { ANNOTATIONS, LABELS } from '../../api/src/keys.js';
import {
  cordonPatch,
  drainedPatch,
  drainFailedPatch,
  drainRequest,
  drainTimeoutMs,
  planEvictions,
  podVerdict,
  uncordonPatch,
} from './plan.js';

const node = (annotations: Record<string, string>, unschedulable?: boolean): k8s.V1Node => ({
  metadata: { name: 'n1', resourceVersion: '7', annotations },
  spec: unschedulable === undefined ? {} : { unschedulable },
});

const pod = (name: string, meta: Partial<k8s.V1ObjectMeta> = {}): k8s.V1Pod => ({
  metadata: { name, namespace: 'default', uid: name, ...meta },
});

describe('drainRequest', () => {
  const cases: { name: string; ann: Record<string, string>; kind: string }[] = [
    { name: 'no request', ann: {}, kind: 'none' },
    {
      name: 'request already applied',
      ann: { [ANNOTATIONS.desiredDrain]: 'drain-a', [ANNOTATIONS.lastAppliedDrain]: 'drain-a' },
      kind: 'none',
    },
    {
      name: 'a new drain',
      ann: { [ANNOTATIONS.desiredDrain]: 'drain-a', [ANNOTATIONS.lastAppliedDrain]: 'uncordon-z' },
      kind: 'drain',
    },
    {
      name: 'an uncordon',
      ann: { [ANNOTATIONS.desiredDrain]: 'uncordon-a', [ANNOTATIONS.lastAppliedDrain]: 'drain-a' },
      kind: 'uncordon',
    },
    {
      name: 'a drain already given up',
      ann: { [ANNOTATIONS.desiredDrain]: 'drain-a', [ANNOTATIONS.drainFailure]: 'drain-a: timeout' },
      kind: 'failed',
    },
    {
      name: 'a new drain after an older failure',
      ann: { [ANNOTATIONS.desiredDrain]: 'drain-b', [ANNOTATIONS.drainFailure]: 'drain-a: timeout' },
      kind: 'drain',
    },
    { name: 'garbage', ann: { [ANNOTATIONS.desiredDrain]: 'reboot-now' }, kind: 'invalid' },
  ];
  for (const c of cases) {
    it(`when the node holds ${c.name}, it should read "${c.kind}"`, () => {
      assert.equal(drainRequest(node(c.ann)).kind, c.kind);
    });
  }
});

describe('podVerdict and planEvictions', () => {
  it('when a pod is a mirror pod, a DaemonSet pod or the agent, it should be left alone', () => {
    assert.equal(podVerdict(pod('static', { annotations: { 'kubernetes.io/config.mirror': 'abc' } })), 'skip-mirror');
    assert.equal(
      podVerdict(
        pod('ds', {
          ownerReferences: [{ apiVersion: 'apps/v1', kind: 'DaemonSet', name: 'x', uid: 'u', controller: true }],
        }),
      ),
      'skip-daemonset',
    );
    assert.equal(podVerdict(pod('agent', { labels: { [LABELS.agentPod]: 'true' } })), 'skip-agent');
  });

  it('when a pod is owned by a ReplicaSet or by nothing, it should be evicted; when it is terminating, waited for', () => {
    assert.equal(
      podVerdict(
        pod('rs', {
          ownerReferences: [{ apiVersion: 'apps/v1', kind: 'ReplicaSet', name: 'x', uid: 'u', controller: true }],
        }),
      ),
      'evict',
    );
    assert.equal(podVerdict(pod('bare')), 'evict');
    assert.equal(podVerdict(pod('going', { deletionTimestamp: new Date() })), 'wait');
  });

  it('when a DaemonSet only references a pod without controlling it, it should still be evicted', () => {
    assert.equal(
      podVerdict(
        pod('adopted', { ownerReferences: [{ apiVersion: 'apps/v1', kind: 'DaemonSet', name: 'x', uid: 'u' }] }),
      ),
      'evict',
    );
  });

  it('when given a mix, it should split it into evict, wait and skipped', () => {
    const plan = planEvictions([
      pod('a'),
      pod('b', { deletionTimestamp: new Date() }),
      pod('m', { annotations: { 'kubernetes.io/config.mirror': '' } }),
    ]);
    assert.deepEqual(
      plan.evict.map((p) => p.metadata?.name),
      ['a'],
    );
    assert.deepEqual(
      plan.waitFor.map((p) => p.metadata?.name),
      ['b'],
    );
    assert.deepEqual(
      plan.skipped.map((s) => s.verdict),
      ['skip-mirror'],
    );
  });
});

describe('drainTimeoutMs', () => {
  const ms = (seconds?: number): MachineSet =>
    ({
      spec: {
        template: { spec: { deletion: seconds === undefined ? undefined : { nodeDrainTimeoutSeconds: seconds } } },
      },
    }) as MachineSet;
  const machine = (seconds: number): Machine =>
    ({ spec: { deletion: { nodeDrainTimeoutSeconds: seconds } } }) as Machine;

  it("when the MachineSet's template sets a timeout, it should win over the Machine and the default", () => {
    assert.equal(drainTimeoutMs({ machineSet: ms(30), machine: machine(60), defaultMs: 5_000 }), 30_000);
  });
  it('when the template sets 0, it should mean no timeout', () => {
    assert.equal(drainTimeoutMs({ machineSet: ms(0), defaultMs: 5_000 }), 0);
  });
  it('when only the Machine sets one, it should use it; when nothing does, the default', () => {
    assert.equal(drainTimeoutMs({ machineSet: ms(), machine: machine(60), defaultMs: 5_000 }), 60_000);
    assert.equal(drainTimeoutMs({ defaultMs: 5_000 }), 5_000);
  });
});

describe('cordon and uncordon patches', () => {
  const now = new Date('2026-08-01T00:00:00Z');

  it('when a schedulable node is drained, it should cordon and remember it was not cordoned before', () => {
    const patch = cordonPatch(node({}, false), now);
    assert.deepEqual(patch, {
      metadata: {
        annotations: { [ANNOTATIONS.cordonedBeforeDrain]: 'false', [ANNOTATIONS.drainStartedAt]: now.toISOString() },
        resourceVersion: '7',
      },
      spec: { unschedulable: true },
    });
  });

  it('when an operator had cordoned the node, it should remember that', () => {
    assert.equal(cordonPatch(node({}, true), now)?.metadata.annotations[ANNOTATIONS.cordonedBeforeDrain], 'true');
  });

  it('when the node is still cordoned from an earlier drain of this cycle, it should keep the first answer', () => {
    const patch = cordonPatch(node({ [ANNOTATIONS.cordonedBeforeDrain]: 'false' }, true), now);
    assert.equal(patch?.metadata.annotations[ANNOTATIONS.cordonedBeforeDrain], undefined);
    assert.equal(patch?.metadata.annotations[ANNOTATIONS.drainStartedAt], now.toISOString());
  });

  it('when the node is cordoned and everything is recorded, it should write nothing', () => {
    assert.equal(
      cordonPatch(node({ [ANNOTATIONS.cordonedBeforeDrain]: 'false', [ANNOTATIONS.drainStartedAt]: 'x' }, true), now),
      undefined,
    );
  });

  it('when the drainer cordoned the node, uncordon should make it schedulable again', () => {
    const patch = uncordonPatch(node({ [ANNOTATIONS.cordonedBeforeDrain]: 'false' }, true), 'uncordon-a');
    assert.deepEqual(patch.spec, { unschedulable: false });
    assert.equal(patch.metadata.annotations[ANNOTATIONS.lastAppliedDrain], 'uncordon-a');
    assert.equal(patch.metadata.annotations[ANNOTATIONS.cordonedBeforeDrain], null);
  });

  it('when the drain completes, gives up or is cancelled by an uncordon, it should remove the drain-blocked annotation', () => {
    const blocked = {
      [ANNOTATIONS.drainBlocked]:
        'default/web-1 blocked by PodDisruptionBudget default/web since 2026-08-01T00:00:00.000Z',
    };
    assert.equal(drainedPatch('drain-a').metadata.annotations[ANNOTATIONS.drainBlocked], null);
    assert.equal(drainFailedPatch('drain-a', 'timeout').metadata.annotations[ANNOTATIONS.drainBlocked], null);
    assert.equal(
      uncordonPatch(node({ ...blocked, [ANNOTATIONS.cordonedBeforeDrain]: 'false' }, true), 'uncordon-a').metadata
        .annotations[ANNOTATIONS.drainBlocked],
      null,
    );
  });

  it('when an operator had cordoned the node (or the drainer never did), uncordon should leave it cordoned', () => {
    assert.equal(
      uncordonPatch(node({ [ANNOTATIONS.cordonedBeforeDrain]: 'true' }, true), 'uncordon-a').spec,
      undefined,
    );
    assert.equal(uncordonPatch(node({}, true), 'uncordon-a').spec, undefined);
  });
});
