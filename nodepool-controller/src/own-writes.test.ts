import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type * as k8s from '#k8s';
import type { InformerEvent } from '../../support/src/informer.js';
import { OwnWrites } from './own-writes.js';

const secret = (rv: number, name = 'pool-a-token'): k8s.V1Secret => ({
  kind: 'Secret',
  metadata: { name, namespace: 'tenant', resourceVersion: String(rv) },
});

/** A write whose answer the test gives when it likes (the watch may be faster than the answer). */
function pendingWrite(): {
  write: () => Promise<k8s.V1Secret>;
  answer: (rv: number) => Promise<void>;
  fail: () => Promise<void>;
} {
  let settle: { resolve: (s: k8s.V1Secret) => void; reject: (e: Error) => void } | undefined;
  const write = (): Promise<k8s.V1Secret> =>
    new Promise<k8s.V1Secret>((resolve, reject) => (settle = { resolve, reject }));
  const tick = (): Promise<void> => new Promise((r) => setImmediate(r));
  return {
    write,
    answer: async (rv) => (settle?.resolve(secret(rv)), tick()),
    fail: async () => (settle?.reject(new Error('conflict')), tick()),
  };
}

/** Routes an event; returns how the pool was woken: now, later (counted in `woken`), or not at all. */
function events(own: OwnWrites): { send: (rv: number, event?: InformerEvent) => boolean; later: () => number } {
  let later = 0;
  return {
    send: (rv, event = 'update') => own.route('Secret', secret(rv), event, () => later++),
    later: () => later,
  };
}

describe('OwnWrites', () => {
  it('when the echo of our own write arrives after its answer, it should wake nothing', async () => {
    const own = new OwnWrites();
    await own.track('Secret', secret(0), () => Promise.resolve(secret(7)));
    const e = events(own);
    assert.equal(e.send(7, 'add'), false);
    assert.equal(own.size, 0);
  });

  it('when someone else changes the object after our write, it should wake the pool', async () => {
    const own = new OwnWrites();
    await own.track('Secret', secret(0), () => Promise.resolve(secret(7)));
    const e = events(own);
    assert.equal(e.send(7), false);
    assert.equal(e.send(8), true);
  });

  it('when our echo arrives before the write answers, it should hold it and then wake nothing', async () => {
    const own = new OwnWrites();
    const w = pendingWrite();
    const done = own.track('Secret', secret(0), w.write);
    const e = events(own);
    assert.equal(e.send(7), false);
    await w.answer(7);
    await done;
    assert.equal(e.later(), 0);
    assert.equal(own.size, 0);
  });

  it("when someone else's change and our write land together, it should wake for theirs and skip ours", async () => {
    const own = new OwnWrites();
    const w = pendingWrite();
    const done = own.track('Secret', secret(0), w.write);
    const e = events(own);
    // The ignition server's mint lands first (rv 7) while our apply is on its way; ours lands after it (rv 8).
    assert.equal(e.send(7), false);
    await w.answer(8);
    await done;
    assert.equal(e.later(), 1, 'the mint wakes the pool once our write answered');
    assert.equal(e.send(8), false, 'our own echo');
    assert.equal(own.size, 0);
  });

  it('when someone else writes just after us, before either event arrives, it should wake for theirs', async () => {
    const own = new OwnWrites();
    const w = pendingWrite();
    const done = own.track('Secret', secret(0), w.write);
    const e = events(own);
    assert.equal(e.send(7), false);
    assert.equal(e.send(8), false);
    await w.answer(7);
    await done;
    assert.equal(e.later(), 1);
  });

  it('when the write fails, it should wake for every event held meanwhile', async () => {
    const own = new OwnWrites();
    const w = pendingWrite();
    const done = assert.rejects(own.track('Secret', secret(0), w.write));
    const e = events(own);
    e.send(7);
    await w.fail();
    await done;
    assert.equal(e.later(), 1);
  });

  it("when a write failed, the retry's answer should not be taken for an echo (it may be someone else's version)", async () => {
    const own = new OwnWrites();
    await assert.rejects(own.track('Secret', secret(0), () => Promise.reject(new Error('timeout'))));
    const e = events(own);
    assert.equal(e.send(7), true, 'the failed write was applied after all: its event wakes');
    // Someone else's change at 8 is on its way; the retry changes nothing and answers with 8.
    await own.track('Secret', secret(7), () => Promise.resolve(secret(8)));
    assert.equal(e.send(8), true);
    await own.track('Secret', secret(8), () => Promise.resolve(secret(9)));
    assert.equal(e.send(9), false, 'a write after one that answered is trusted again');
    assert.equal(own.size, 0);
  });

  it('when writes change nothing again and again, it should keep a few versions, not one per write', async () => {
    const own = new OwnWrites();
    for (let i = 0; i < 10; i++) await own.track('Secret', secret(0), () => Promise.resolve(secret(7)));
    for (let v = 1; v <= 10; v++) await own.track('Secret', secret(0), () => Promise.resolve(secret(10 + v)));
    const e = events(own);
    assert.equal(e.send(16), true, 'older than the last four of ours');
    assert.equal(e.send(20), false);
    assert.equal(own.size, 0);
  });

  it('when a reconcile writes the object twice (finalizer, then status), it should skip both echoes', async () => {
    const own = new OwnWrites();
    await own.track('Secret', secret(0), () => Promise.resolve(secret(7)));
    await own.track('Secret', secret(0), () => Promise.resolve(secret(9)));
    const e = events(own);
    assert.equal(e.send(7), false);
    assert.equal(e.send(8), true, 'a change of someone else between them');
    assert.equal(e.send(9), false);
    assert.equal(own.size, 0);
  });

  it('when the write asks its echo to wake (a status the next reconcile reads back), it should wake', async () => {
    const own = new OwnWrites();
    await own.track('Secret', secret(0), () => Promise.resolve(secret(7)), true);
    assert.equal(events(own).send(7), true);
  });

  it('when a relist or a delete carries our version, it should wake', async () => {
    const own = new OwnWrites();
    await own.track('Secret', secret(0), () => Promise.resolve(secret(7)));
    assert.equal(events(own).send(7, 'resync'), true);
    assert.equal(events(own).send(7, 'delete'), true);
    assert.equal(own.size, 0);
  });

  it('when a write changed nothing and brings no echo, it should forget it once the watch goes past', async () => {
    const own = new OwnWrites();
    await own.track('Secret', secret(0), () => Promise.resolve(secret(7)));
    const e = events(own);
    assert.equal(e.send(9), true);
    assert.equal(own.size, 0);
    assert.equal(e.send(7), true, 'an old version is no longer taken for ours');
  });

  it('when the same name is written as another kind, it should not take that echo for this one', async () => {
    const own = new OwnWrites();
    await own.track('MachineSet', secret(0), () => Promise.resolve(secret(7)));
    assert.equal(events(own).send(7), true);
  });
});
