import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Condition } from '../../api/src/conditions.js';
import { eventBody } from '../../support/src/events.js';
import { conditionTransitions, EVENT_COMPONENT } from './events.js';
import { samplePool } from '../../api/testing/nodepool.js';

const at = '2026-11-23T08:00:00Z';
const c = (type: string, status: Condition['status'], reason: string, message = 'm'): Condition =>
  ({ type, status, reason, message, lastTransitionTime: at }) as Condition;

describe('conditionTransitions', () => {
  it('when a spec condition starts out False, it should make a Warning named after the reason', () => {
    const out = conditionTransitions(
      [],
      [
        c('ValidMachineConfig', 'False', 'ConfigMapMissing', 'ConfigMap x does not exist'),
        c('Ready', 'False', 'NotReady'),
      ],
    );
    assert.deepEqual(out, [
      {
        type: 'Warning',
        reason: 'ConfigMapMissing',
        message: 'ValidMachineConfig is False: ConfigMap x does not exist',
      },
    ]);
  });

  it('when conditions first appear healthy or in progress, it should make no Event', () => {
    assert.deepEqual(
      conditionTransitions(
        [],
        [
          c('ValidMachineConfig', 'True', 'AsExpected'),
          c('ValidGeneratedPayload', 'Unknown', 'Pending'),
          c('UpdatingConfig', 'False', 'AsExpected'),
        ],
      ),
      [],
    );
  });

  it('when a spec condition turns True, it should make a Normal Event with its reason', () => {
    const out = conditionTransitions(
      [c('ValidMachineConfig', 'False', 'ConfigMapMissing')],
      [c('ValidMachineConfig', 'True', 'AsExpected', 'ok')],
    );
    assert.deepEqual(out, [
      { type: 'Normal', reason: 'AsExpected', message: 'ValidMachineConfig is True (was False): ok' },
    ]);
  });

  it('when Ready flips to False, it should make a Warning; a False progress condition makes a Normal one', () => {
    const out = conditionTransitions(
      [c('Ready', 'True', 'AsExpected'), c('UpdatingConfig', 'True', 'InProgress')],
      [c('Ready', 'False', 'NotReady'), c('UpdatingConfig', 'False', 'AsExpected')],
    );
    assert.deepEqual(
      out.map((t) => [t.type, t.reason]),
      [
        ['Warning', 'NotReady'],
        ['Normal', 'AsExpected'],
      ],
    );
  });

  it('when only the reason or message changes, it should make no Event', () => {
    assert.deepEqual(
      conditionTransitions(
        [c('SupportedVersionSkew', 'False', 'UpgradeSkipsMinor')],
        [c('SupportedVersionSkew', 'False', 'NodeNewerThanControlPlane')],
      ),
      [],
    );
  });
});

describe("the controller's Events", () => {
  it('when built for a pool, it should point at the pool and name the reporting component', () => {
    const pool = samplePool();
    const e = eventBody(
      pool,
      { type: 'Warning', reason: 'ConfigMapMissing', message: 'x' },
      { component: EVENT_COMPONENT, instance: 'host-1' },
      new Date(at),
    );
    assert.deepEqual(e.involvedObject, {
      apiVersion: 'kindling.dev/v1beta1',
      kind: 'NodePool',
      name: 'workers',
      namespace: 'tenant-a',
      uid: pool.metadata.uid,
    });
    assert.equal(e.metadata.generateName, 'workers.');
    assert.equal(e.source?.component, 'kindling-nodepool-controller');
    assert.equal(e.reportingComponent, 'kindling-nodepool-controller');
    assert.equal(e.reportingInstance, 'host-1');
  });
});
