import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { forEachLimited } from './limited.js';

const tick = (): Promise<void> => new Promise((r) => setImmediate(r));

describe('forEachLimited', () => {
  it('when there are more items than the limit, it should run every item and never more than the limit at once', async () => {
    let inFlight = 0;
    let most = 0;
    const done: number[] = [];
    await forEachLimited([...Array(20).keys()], 3, async (i) => {
      most = Math.max(most, ++inFlight);
      for (let t = 0; t < i % 4; t++) await tick();
      inFlight--;
      done.push(i);
    });
    assert.equal(most, 3);
    assert.deepEqual(
      done.sort((a, b) => a - b),
      [...Array(20).keys()],
    );
  });

  it('when items fail, it should still run the others and throw the first failure once all have settled', async () => {
    const ran: number[] = [];
    let settled = 0;
    await assert.rejects(
      forEachLimited([0, 1, 2, 3, 4, 5], 2, async (i) => {
        await tick();
        ran.push(i);
        settled++;
        if (i === 1 || i === 4) throw new Error(`item ${i}`);
      }),
      (err: Error) => {
        assert.equal(err.message, 'item 1');
        assert.equal(settled, 6, 'thrown before every item had settled');
        return true;
      },
    );
    assert.deepEqual(ran.sort(), [0, 1, 2, 3, 4, 5]);
  });

  it('when there are no items, it should resolve at once', async () => {
    await forEachLimited([], 8, () => Promise.reject(new Error('never called')));
  });
});
