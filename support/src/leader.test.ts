import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startCluster, type Cluster } from '../../test/bed/src/index.js';
import { LeaderElector, nextLeaseSpec } from './leader.js';
import { createLogger } from './logger.js';

const log = createLogger({ name: 'test', level: 'silent' });

describe('nextLeaseSpec', () => {
  const now = 1_000_000;
  it('when another holder renewed within its lease, it should not take the lease', () => {
    assert.equal(nextLeaseSpec({ holderIdentity: 'b', renewTime: new Date(now - 1000), leaseDurationSeconds: 15 }, 'a', 15_000, now), undefined);
  });

  it('when another holder\'s lease expired, it should take it and count a transition', () => {
    const spec = nextLeaseSpec({ holderIdentity: 'b', renewTime: new Date(now - 16_000), leaseDurationSeconds: 15, leaseTransitions: 3 }, 'a', 15_000, now);
    assert.equal(spec?.holderIdentity, 'a');
    assert.equal(spec?.leaseTransitions, 4);
  });

  it('when it already holds the lease, it should renew it and keep the acquire time', () => {
    const acquired = new Date(now - 60_000);
    const spec = nextLeaseSpec({ holderIdentity: 'a', renewTime: new Date(now - 2000), acquireTime: acquired, leaseDurationSeconds: 15, leaseTransitions: 1 }, 'a', 15_000, now);
    assert.equal(spec?.acquireTime?.getTime(), acquired.getTime());
    assert.equal(spec?.renewTime?.getTime(), now);
    assert.equal(spec?.leaseTransitions, 1);
  });
});

describe('LeaderElector on a real apiserver', () => {
  let cluster: Cluster;
  before(async () => {
    cluster = await startCluster({ name: 'leader', controllerManager: false });
  });
  after(async () => cluster?.stop());

  it('when two replicas campaign and the leader stops, it should hand over without ever having two leaders', async () => {
    const leading = new Set<string>();
    let overlap = false;
    const elector = (identity: string): LeaderElector =>
      new LeaderElector({
        kubeConfig: cluster.kubeConfig,
        namespace: 'default',
        name: 'component',
        identity,
        log,
        leaseDurationMs: 2000,
        renewDeadlineMs: 1500,
        retryPeriodMs: 200,
        onStartedLeading: () => {
          leading.add(identity);
          if (leading.size > 1) overlap = true;
        },
        onStoppedLeading: () => leading.delete(identity),
      });
    const a = elector('a');
    const b = elector('b');
    a.start();
    b.start();
    const deadline = Date.now() + 10_000;
    while (leading.size === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    assert.equal(leading.size, 1);
    const [first] = [...leading];
    const [leader, follower] = first === 'a' ? [a, b] : [b, a];
    await leader.stop();
    while (!follower.isLeader && Date.now() < deadline + 5000) await new Promise((r) => setTimeout(r, 50));
    assert.equal(follower.isLeader, true);
    assert.equal(overlap, false);
    await follower.stop();
  });
});
