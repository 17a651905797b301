import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CAPI_API_VERSION, type Machine } from '../../api/src/capi.js';
import { ANNOTATIONS } from '../../api/src/keys.js';
import { clusterApiFailure, clusterApiProgress, clusterApiWaiting } from './capi-progress.js';

interface MachineOpts {
  updating?: boolean;
  deleting?: boolean;
  failure?: string;
  waiting?: string;
}

const machine = (name: string, opts: MachineOpts = {}): Machine => ({
  apiVersion: CAPI_API_VERSION,
  kind: 'Machine',
  metadata: {
    name,
    annotations: {
      ...(opts.updating ? { [ANNOTATIONS.capiUpdateInProgress]: '' } : {}),
      ...(opts.failure === undefined ? {} : { [ANNOTATIONS.inPlaceFailure]: opts.failure }),
      ...(opts.waiting === undefined ? {} : { [ANNOTATIONS.inPlaceWaiting]: opts.waiting }),
    },
    ...(opts.deleting ? { deletionTimestamp: new Date('2026-11-24T00:00:00Z') } : {}),
  },
  spec: {
    clusterName: 'guest',
    bootstrap: { configRef: { apiGroup: 'bootstrap.kindling.dev', kind: 'KindlingConfig', name: `${name}-config` } },
    infrastructureRef: { apiGroup: 'infrastructure.kindling.dev', kind: 'LocalMachine', name },
  },
});

/** m1 is at the target, m2 is being updated to it (its config already rewritten), m3 has not been handed it. */
const HASHES: Record<string, string> = { 'm1-config': 'new', 'm2-config': 'new', 'm3-config': 'old' };
const input = {
  machines: [machine('m1'), machine('m2', { updating: true }), machine('m3')],
  configHashOf: (c: string): string | undefined => HASHES[c],
  target: 'new',
};

describe('the progress of a rollout on the ClusterAPI engine', () => {
  it('when a Machine is done, one is updating and one waits, it should count only the done one as updated', () => {
    assert.equal(clusterApiProgress({ ...input, paused: false }), '1 of 3 updated');
  });

  it('when the pool is paused, it should say where the rollout stopped and how many Machines still finish, as the MachineSet engine does', () => {
    assert.equal(
      clusterApiProgress({ ...input, paused: true }),
      '1 of 3 updated; paused at 1 of 3 by spec.pausedUntil: no node is handed out until it clears, 1 node(s) handed out before the pause still finishing',
    );
  });

  it('when a Machine is being deleted or its KindlingConfig is unknown, it should leave the deleted one out and count the unknown one as not updated', () => {
    const machines = [machine('m1'), machine('gone', { deleting: true }), machine('m4')];
    assert.equal(
      clusterApiProgress({ machines, configHashOf: (c) => HASHES[c], target: 'new', paused: false }),
      '1 of 2 updated',
    );
  });
});

describe('where a rollout on the ClusterAPI engine halted', () => {
  it('when the extension found the nodes of two updating Machines Degraded, it should name the first by Machine name with its reason', () => {
    const machines = [
      machine('m3', { updating: true, failure: 'n3: health check failed: kubelet not Ready' }),
      machine('m1'),
      machine('m2', { updating: true, failure: 'n2: health check failed: kubelet not Ready after 30s' }),
    ];
    assert.equal(clusterApiFailure(machines), 'n2: health check failed: kubelet not Ready after 30s');
  });

  it('when no updating Machine carries a failure, it should say none (a failure left on a Machine no longer updating, or being deleted, is over)', () => {
    const machines = [
      machine('m1', { failure: 'n1: old' }),
      machine('m2', { updating: true }),
      machine('m3', { updating: true, deleting: true, failure: 'n3: gone' }),
    ];
    assert.equal(clusterApiFailure(machines), undefined);
  });

  it('when the node of an updating Machine only waits for the maintenance window, it should say so apart from a failure', () => {
    const waits = 'n2: the update needs a reboot; waiting for the maintenance window (opens 2026-12-01T02:00Z)';
    const machines = [
      machine('m3', { updating: true, waiting: 'n3: later' }),
      machine('m2', { updating: true, waiting: waits }),
    ];
    assert.deepEqual([clusterApiFailure(machines), clusterApiWaiting(machines)], [undefined, waits]);
    assert.equal(clusterApiWaiting([machine('m1', { waiting: waits })]), undefined);
  });
});
