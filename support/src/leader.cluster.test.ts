import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type * as k8s from '#k8s';
import { startCluster, type Cluster } from '../../test/bed/src/index.js';
import { checkLeaderTimings, LeaderElector, nextLeaseSpec, type LeaseStore } from './leader.js';
import { createLogger } from './logger.js';
import { flush, manualClock, type ManualClock } from '../testing/index.js';

const log = createLogger({ name: 'test', level: 'silent' });
const conflict = (): Error => Object.assign(new Error('Conflict'), { code: 409 });

/** An in-memory Lease with the apiserver's optimistic concurrency; `hang` leaves requests unanswered until aborted. */
class FakeLeases implements LeaseStore {
  lease: k8s.V1Lease | undefined;
  hang = false;
  aborted: unknown[] = [];
  #rv = 0;

  async read(signal: AbortSignal): Promise<k8s.V1Lease | undefined> {
    await this.#answer(signal);
    return this.lease && structuredClone(this.lease);
  }

  async create(lease: k8s.V1Lease, signal: AbortSignal): Promise<void> {
    await this.#answer(signal);
    if (this.lease) throw conflict();
    this.#store(lease);
  }

  async replace(lease: k8s.V1Lease, signal: AbortSignal): Promise<void> {
    await this.#answer(signal);
    if (lease.metadata?.resourceVersion !== this.lease?.metadata?.resourceVersion) throw conflict();
    this.#store(lease);
  }

  /** Another replica's write: the holder and its own idea of the time. */
  writeAs(holder: string, renewTimeWall: number, leaseDurationSeconds = 15): void {
    this.#store({
      metadata: { name: 'c', namespace: 'n' },
      spec: { holderIdentity: holder, renewTime: new Date(renewTimeWall), leaseDurationSeconds },
    });
  }

  #store(lease: k8s.V1Lease): void {
    this.lease = { ...lease, metadata: { ...lease.metadata, resourceVersion: String(++this.#rv) } };
  }

  #answer(signal: AbortSignal): Promise<void> {
    if (!this.hang) return Promise.resolve();
    return new Promise((_resolve, reject) =>
      signal.addEventListener('abort', () => {
        this.aborted.push(signal.reason);
        reject(signal.reason as Error);
      }),
    );
  }
}

interface Candidate {
  elector: LeaderElector;
  started: number[];
  stopped: { at: number; reason: string }[];
}

function candidate(identity: string, store: LeaseStore, clock: ManualClock): Candidate {
  const c: Candidate = { started: [], stopped: [], elector: undefined as unknown as LeaderElector };
  c.elector = new LeaderElector({
    kubeConfig: undefined as unknown as k8s.KubeConfig,
    namespace: 'n',
    name: 'c',
    identity,
    log,
    clock,
    store,
    onStartedLeading: () => c.started.push(clock.now()),
    onStoppedLeading: (reason) => c.stopped.push({ at: clock.now(), reason }),
  });
  return c;
}

/** Advances the clock in small steps, letting the elector's requests complete between them. */
async function run(clock: ManualClock, ms: number, stepMs = 100): Promise<void> {
  for (let t = 0; t < ms; t += stepMs) {
    await flush();
    clock.advance(Math.min(stepMs, ms - t));
    await flush();
  }
}

describe('LeaderElector (default timings: lease 15 s, renew deadline 10 s, retry 2 s)', () => {
  it("when another holder's renewTime is an hour old by this machine's clock, it should still wait a lease duration from when it first saw the record", async () => {
    const clock = manualClock();
    const leases = new FakeLeases();
    leases.writeAs('b', Date.now() - 3_600_000);
    const a = candidate('a', leases, clock);
    a.elector.start();
    await run(clock, 14_500);
    assert.deepEqual(a.started, [], 'took the Lease before the holder could have missed a renewal');
    await run(clock, 3_000);
    assert.equal(a.started.length, 1);
    assert.equal(leases.lease?.spec?.holderIdentity, 'a');
  });

  it("when the holder's clock runs an hour ahead and it stopped renewing, it should take over once the record stayed unchanged for the lease duration", async () => {
    const clock = manualClock();
    const leases = new FakeLeases();
    leases.writeAs('b', Date.now() + 3_600_000);
    const a = candidate('a', leases, clock);
    a.elector.start();
    await run(clock, 18_000);
    assert.equal(a.started.length, 1, "waited on the holder's clock instead of its own observation");
  });

  it('when the holder keeps renewing, it should never take over', async () => {
    const clock = manualClock();
    const leases = new FakeLeases();
    const a = candidate('a', leases, clock);
    a.elector.start();
    for (let i = 0; i < 30; i++) {
      leases.writeAs('b', Date.now() - 3_600_000 + i);
      await run(clock, 2_000);
    }
    assert.deepEqual(a.started, []);
  });

  it('when renewals hang, it should stop leading when the renew deadline passes, before a peer could take over, and abort the hung request', async () => {
    const clock = manualClock();
    const leases = new FakeLeases();
    const a = candidate('a', leases, clock);
    a.elector.start();
    await run(clock, 100);
    assert.equal(a.started.length, 1);
    await run(clock, 4_000);
    const lastRenewal = leases.lease?.spec?.renewTime;
    // The round that last succeeded began at 4 000 (retry period 2 s): it lets `a` act until 14 000.
    leases.hang = true;
    await run(clock, 30_000);
    assert.deepEqual(
      a.stopped.map((s) => s.at),
      [14_000],
    );
    assert.match(a.stopped[0]?.reason ?? '', /renew deadline/);
    assert.equal(a.elector.isLeader, false);
    assert.ok(leases.aborted.length > 0, 'the hung renewal was never aborted');
    assert.equal(leases.lease?.spec?.renewTime, lastRenewal);
    // A peer that saw that renewal (at 4 000 at the earliest) may take the Lease only after 19 000.
    assert.ok(a.stopped[0] && a.stopped[0].at < 4_000 + 15_000);
  });

  it('when the process was paused past its renew deadline, it should count as lapsed before any of its timers has run', async () => {
    const clock = manualClock();
    const leases = new FakeLeases();
    const a = candidate('a', leases, clock);
    a.elector.start();
    await run(clock, 100);
    assert.equal(a.elector.isLeader, true);
    assert.equal(a.elector.lapsed, false);
    clock.jump(30_000);
    assert.equal(a.elector.lapsed, true, 'a resumed process would act until its timers run');
    assert.equal(a.elector.isLeader, false);
    await run(clock, 100);
    assert.equal(a.stopped.length, 1);
    assert.equal(a.elector.lapsed, true);
  });

  it('when another replica took the Lease, the leader should stop on its next round without waiting for the deadline', async () => {
    const clock = manualClock();
    const leases = new FakeLeases();
    const a = candidate('a', leases, clock);
    a.elector.start();
    await run(clock, 100);
    leases.writeAs('b', Date.now());
    await run(clock, 2_000);
    assert.equal(a.stopped.length, 1);
    assert.match(a.stopped[0]?.reason ?? '', /held by b/);
  });

  it('when the leader stops, it should release the Lease and a peer should take it at once', async () => {
    const clock = manualClock();
    const leases = new FakeLeases();
    const a = candidate('a', leases, clock);
    const b = candidate('b', leases, clock);
    a.elector.start();
    await run(clock, 100);
    b.elector.start();
    await run(clock, 100);
    await a.elector.stop();
    assert.equal(leases.lease?.spec?.holderIdentity, undefined);
    await run(clock, 2_100);
    assert.equal(b.started.length, 1);
    assert.deepEqual(a.stopped, [], 'a graceful stop is not a lost leadership');
    assert.equal(a.elector.lapsed, false);
  });

  it('when timings would let a leader act after a peer took over, it should refuse them', () => {
    assert.match(
      checkLeaderTimings({ leaseDurationMs: 10_000, renewDeadlineMs: 10_000, retryPeriodMs: 2_000 }) ?? '',
      /renew deadline must be shorter/,
    );
    assert.match(
      checkLeaderTimings({ leaseDurationMs: 15_000, renewDeadlineMs: 2_000, retryPeriodMs: 2_000 }) ?? '',
      /retry period/,
    );
    assert.equal(
      checkLeaderTimings({ leaseDurationMs: 15_000, renewDeadlineMs: 10_000, retryPeriodMs: 2_000 }),
      undefined,
    );
  });
});

describe('nextLeaseSpec', () => {
  const now = 1_000_000;
  it("when it takes another holder's lease, it should count a transition and start a new acquire time", () => {
    const spec = nextLeaseSpec(
      { holderIdentity: 'b', acquireTime: new Date(now - 60_000), leaseTransitions: 3 },
      'a',
      15_000,
      now,
    );
    assert.equal(spec.holderIdentity, 'a');
    assert.equal(spec.leaseTransitions, 4);
    assert.equal(spec.acquireTime?.getTime(), now);
  });

  it('when it already holds the lease, it should renew it and keep the acquire time', () => {
    const acquired = new Date(now - 60_000);
    const spec = nextLeaseSpec(
      {
        holderIdentity: 'a',
        renewTime: new Date(now - 2000),
        acquireTime: acquired,
        leaseDurationSeconds: 15,
        leaseTransitions: 1,
      },
      'a',
      15_000,
      now,
    );
    assert.equal(spec.acquireTime?.getTime(), acquired.getTime());
    assert.equal(spec.renewTime?.getTime(), now);
    assert.equal(spec.leaseTransitions, 1);
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
    leading.delete(first ?? '');
    await leader.stop();
    while (!follower.isLeader && Date.now() < deadline + 5000) await new Promise((r) => setTimeout(r, 50));
    assert.equal(follower.isLeader, true);
    assert.equal(overlap, false);
    await follower.stop();
  });
});
