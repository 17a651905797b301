import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type * as k8s from '#k8s';
import { ANNOTATIONS } from '../../api/src/keys.js';
import { desiredNode } from './nodes.js';
import { samplePool } from '../../api/testing/nodepool.js';

const node = (patch: Partial<k8s.V1Node> = {}): k8s.V1Node => ({
  metadata: { name: 'n1', resourceVersion: '42', labels: { keep: 'yes' } },
  spec: {},
  ...patch,
});
const ours = (fields: object): k8s.V1ManagedFieldsEntry => ({
  manager: 'kindling-nodepool-controller',
  operation: 'Apply',
  fieldsType: 'FieldsV1',
  fieldsV1: fields,
});

describe('desiredNode', () => {
  it("when the pool has labels and taints for a fresh Node, it should apply them with the Node's other taints and its resourceVersion", () => {
    const live = node({ spec: { taints: [{ key: 'other', effect: 'NoExecute' }] } });
    assert.deepEqual(desiredNode(samplePool(), live), {
      apiVersion: 'v1',
      kind: 'Node',
      metadata: {
        name: 'n1',
        resourceVersion: '42',
        labels: { 'example.com/role': 'worker', tier: 'gold' },
        annotations: { [ANNOTATIONS.poolTaints]: '["example.com/dedicated:NoSchedule"]' },
      },
      spec: {
        taints: [
          { key: 'other', effect: 'NoExecute' },
          { key: 'example.com/dedicated', value: 'batch', effect: 'NoSchedule' },
        ],
      },
    });
  });

  it('when the pool dropped a taint it had put on, it should remove only that one', () => {
    const live = node({
      metadata: { name: 'n1', resourceVersion: '7', annotations: { [ANNOTATIONS.poolTaints]: '["gone:NoSchedule"]' } },
      spec: {
        taints: [
          { key: 'gone', effect: 'NoSchedule' },
          { key: 'other', effect: 'NoExecute' },
        ],
      },
    });
    const d = desiredNode(
      samplePool((p) => (p.spec.taints = undefined)),
      live,
    );
    assert.deepEqual(d?.spec.taints, [{ key: 'other', effect: 'NoExecute' }]);
    assert.deepEqual(d?.metadata.annotations, {});
  });

  it('when the Node already carries exactly what the pool applied, it should need no write', () => {
    const live = node({
      metadata: {
        name: 'n1',
        labels: { keep: 'yes', 'example.com/role': 'worker', tier: 'gold' },
        annotations: { [ANNOTATIONS.poolTaints]: '["example.com/dedicated:NoSchedule"]' },
        managedFields: [
          ours({
            'f:metadata': {
              'f:labels': { 'f:example.com/role': {}, 'f:tier': {} },
              'f:annotations': { [`f:${ANNOTATIONS.poolTaints}`]: {} },
            },
            'f:spec': { 'f:taints': {} },
          }),
        ],
      },
      spec: { taints: [{ key: 'example.com/dedicated', value: 'batch', effect: 'NoSchedule', timeAdded: new Date() }] },
    });
    assert.equal(desiredNode(samplePool(), live), undefined);
  });

  it('when the pool dropped a label it owns on the Node, it should apply without it', () => {
    const live = node({
      metadata: {
        name: 'n1',
        labels: { keep: 'yes', old: 'x' },
        managedFields: [ours({ 'f:metadata': { 'f:labels': { 'f:old': {} } }, 'f:spec': { 'f:taints': {} } })],
      },
    });
    const d = desiredNode(
      samplePool((p) => ((p.spec.taints = undefined), (p.spec.nodeLabels = undefined))),
      live,
    );
    assert.deepEqual(d?.metadata.labels, {});
  });

  it('when a pool with no labels or taints meets a Node it never touched, it should write nothing', () => {
    assert.equal(
      desiredNode(
        samplePool((p) => ((p.spec.taints = undefined), (p.spec.nodeLabels = undefined))),
        node(),
      ),
      undefined,
    );
  });
});
