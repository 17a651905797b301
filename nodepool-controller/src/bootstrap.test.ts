import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { KindlingConfig } from '../../api/src/bootstrap.js';
import { ANNOTATIONS } from '../../api/src/keys.js';
import { kindlingConfigStatus, machineDataSecret, sameStatus } from './bootstrap.js';
import { goldenIn } from '../../support/testing/golden.js';

const assertGolden = goldenIn('nodepool-controller/src/testdata');

const NOW = '2026-11-23T12:00:00Z';

function config(patch: (c: KindlingConfig) => void = () => {}): KindlingConfig {
  const c: KindlingConfig = {
    apiVersion: 'bootstrap.kindling.dev/v1beta1',
    kind: 'KindlingConfig',
    metadata: { name: 'workers-x7k2p', namespace: 'tenant-a', generation: 2 },
    spec: { nodePool: 'workers', configHash: '0123456789abcdef' },
  };
  patch(c);
  return c;
}

describe('KindlingConfig status (bootstrap contract v1beta2)', () => {
  it('when the pool’s user-data Secret for the hash exists, it should name it and say the data Secret is created (golden)', () => {
    assertGolden('kindlingconfig-status.json', kindlingConfigStatus(config(), true, NOW));
  });

  it('when that Secret does not exist, it should not name one and say why in a False Ready condition', () => {
    const status = kindlingConfigStatus(config(), false, NOW);
    assert.equal(status.dataSecretName, undefined);
    assert.deepEqual(status.initialization, { dataSecretCreated: false });
    assert.equal(status.conditions?.[0]?.reason, 'WaitingForDataSecret');
    assert.match(status.conditions?.[0]?.message ?? '', /user-data-workers-0123456789abcdef does not exist/);
  });

  it('when Cluster API rewrites the hash for an in-place update, it should name the new Secret, keep the transition time of a Ready that stays True, and count as a change', () => {
    const before = kindlingConfigStatus(config(), true, NOW);
    const moved = config((c) => {
      c.spec.configHash = 'fedcba9876543210';
      c.metadata.generation = 3;
      c.status = before;
    });
    const after = kindlingConfigStatus(moved, true, '2026-11-23T13:00:00Z');
    assert.equal(after.dataSecretName, 'user-data-workers-fedcba9876543210');
    assert.equal(after.conditions?.[0]?.lastTransitionTime, NOW);
    assert.equal(sameStatus(before, after), false);
    assert.equal(sameStatus(after, kindlingConfigStatus(moved, true, '2026-11-23T14:00:00Z')), true);
  });
});

describe('the data Secret a ClusterAPI-engine Machine names', () => {
  const machine = (secret: string | undefined, updating = false): Parameters<typeof machineDataSecret>[0] => ({
    metadata: updating ? { annotations: { [ANNOTATIONS.capiUpdateInProgress]: '' } } : {},
    spec: { bootstrap: secret === undefined ? {} : { dataSecretName: secret } },
  });
  const moved = config((c) => {
    c.spec.configHash = 'fedcba9876543210';
    c.status = kindlingConfigStatus(c, true, NOW);
  });

  it('when an in-place update is over, it should be the KindlingConfig’s new Secret', () => {
    assert.equal(
      machineDataSecret(machine('user-data-workers-0123456789abcdef'), moved),
      'user-data-workers-fedcba9876543210',
    );
  });

  it('when the update is under way, the config has no Secret yet, or Cluster API has not named one, it should not move', () => {
    assert.equal(
      machineDataSecret(machine('user-data-workers-0123456789abcdef', true), moved),
      'user-data-workers-0123456789abcdef',
    );
    assert.equal(
      machineDataSecret(
        machine('user-data-workers-0123456789abcdef'),
        config((c) => (c.status = kindlingConfigStatus(c, false, NOW))),
      ),
      'user-data-workers-0123456789abcdef',
    );
    assert.equal(machineDataSecret(machine(undefined), moved), undefined);
  });
});
