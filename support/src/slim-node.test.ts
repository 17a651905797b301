import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type * as k8s from '#k8s';
import { slimNode } from './slim-node.js';

const node = (heartbeat: string, ready: string): k8s.V1Node => ({
  apiVersion: 'v1',
  kind: 'Node',
  metadata: {
    name: 'n1',
    uid: 'u1',
    resourceVersion: heartbeat,
    labels: { pool: 'workers' },
    annotations: { 'kindling.dev/desired-drain': 'drain-abc' },
    managedFields: [{ manager: 'kubelet', operation: 'Update' }],
  },
  spec: { unschedulable: true, taints: [{ key: 'k', effect: 'NoSchedule' }], podCIDR: '10.0.0.0/24' },
  status: {
    conditions: [{ type: 'Ready', status: ready, lastHeartbeatTime: new Date(heartbeat), reason: 'KubeletReady' }],
    images: [{ names: ['registry/app:1'], sizeBytes: 1 }],
  },
});

describe('slimNode', () => {
  it('when a Node is slimmed, it should keep what the drainer and upgrader read', () => {
    const slim = slimNode(node('2026-11-24T00:00:00Z', 'True'));
    assert.equal(slim.metadata?.name, 'n1');
    assert.equal(slim.metadata?.uid, 'u1');
    assert.deepEqual(slim.metadata?.labels, { pool: 'workers' });
    assert.deepEqual(slim.metadata?.annotations, { 'kindling.dev/desired-drain': 'drain-abc' });
    assert.equal(slim.spec?.unschedulable, true);
    assert.deepEqual(slim.spec?.taints, [{ key: 'k', effect: 'NoSchedule' }]);
    assert.deepEqual(slim.status?.conditions, [{ type: 'Ready', status: 'True' }]);
    assert.equal(slim.status?.images, undefined);
    assert.equal(slim.metadata?.managedFields, undefined);
  });

  it('when only the heartbeat moved, it should give the same Node but for its resourceVersion; when Ready flips, not', () => {
    const strip = (n: k8s.V1Node): unknown => ({ ...n, metadata: { ...n.metadata, resourceVersion: undefined } });
    const a = slimNode(node('2026-11-24T00:00:00Z', 'True'));
    const b = slimNode(node('2026-11-24T00:00:40Z', 'True'));
    assert.deepEqual(strip(a), strip(b));
    assert.notDeepEqual(strip(a), strip(slimNode(node('2026-11-24T00:00:40Z', 'False'))));
  });
});
