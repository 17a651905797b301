import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { KubernetesObject } from '#k8s';
import { contains, isUpToDate } from './diff.js';

const M = 'kindling-nodepool-controller';

function live(fieldsV1: Record<string, unknown>, extra: Record<string, unknown> = {}): KubernetesObject {
  return {
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: {
      name: 'x',
      labels: { a: '1', other: 'keep' },
      managedFields: [
        { manager: M, operation: 'Apply', fieldsV1 },
        { manager: 'someone', operation: 'Update', fieldsV1: { 'f:metadata': { 'f:labels': { 'f:other': {} } } } },
      ],
    },
    ...extra,
  };
}

describe('isUpToDate', () => {
  const owned = { 'f:metadata': { 'f:labels': { 'f:a': {} } } };

  it('when every desired field is live and nothing more is owned, it should say no apply is needed', () => {
    assert.equal(
      isUpToDate(live(owned), { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'x', labels: { a: '1' } } }, M),
      true,
    );
  });

  it('when a desired value differs or is missing, it should say an apply is needed', () => {
    assert.equal(isUpToDate(live(owned), { metadata: { name: 'x', labels: { a: '2' } } }, M), false);
    assert.equal(isUpToDate(live(owned), { metadata: { name: 'x', labels: { a: '1', b: '1' } } }, M), false);
    assert.equal(isUpToDate(undefined, { metadata: { name: 'x' } }, M), false);
  });

  it('when the manager owns a label the desired object dropped, it should say an apply is needed to remove it', () => {
    assert.equal(isUpToDate(live(owned), { metadata: { name: 'x', labels: {} } }, M), false);
  });

  it('when another manager owns an extra label, it should not care', () => {
    assert.equal(isUpToDate(live(owned), { metadata: { name: 'x', labels: { a: '1' } } }, M), true);
  });

  it('when the manager owns a list item (by key) the desired list lost, it should say an apply is needed', () => {
    const ownedTaints = {
      'f:spec': {
        'f:taints': {
          'k:{"effect":"NoSchedule","key":"t1"}': { '.': {}, 'f:key': {} },
          'k:{"effect":"NoSchedule","key":"t2"}': {},
        },
      },
    };
    const obj = live(ownedTaints, {
      spec: {
        taints: [
          { key: 't1', effect: 'NoSchedule' },
          { key: 't2', effect: 'NoSchedule' },
        ],
      },
    });
    assert.equal(
      isUpToDate(
        obj,
        {
          metadata: { name: 'x' },
          spec: {
            taints: [
              { key: 't1', effect: 'NoSchedule' },
              { key: 't2', effect: 'NoSchedule' },
            ],
          },
        } as KubernetesObject,
        M,
      ),
      true,
    );
    assert.equal(
      isUpToDate(
        obj,
        { metadata: { name: 'x' }, spec: { taints: [{ key: 't1', effect: 'NoSchedule' }] } } as KubernetesObject,
        M,
      ),
      false,
    );
  });

  it('when the manager never applied the object, it should say an apply is needed (to take ownership)', () => {
    const obj = live(owned);
    obj.metadata!.managedFields = [];
    assert.equal(isUpToDate(obj, { metadata: { name: 'x', labels: { a: '1' } } }, M), false);
  });
});

describe('contains', () => {
  it('when live has a Date and desired the same instant as text, it should match', () => {
    assert.equal(contains(new Date('2026-01-01T00:00:00Z'), '2026-01-01T00:00:00Z'), true);
    assert.equal(contains({ a: [1, 2] }, { a: [2] }), true);
    assert.equal(contains({ a: [1] }, { a: [3] }), false);
  });
});
