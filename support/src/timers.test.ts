import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { MAX_TIMER_MS, realClock } from './timers.js';

describe('realClock', () => {
  it("when a timer is set further out than Node's longest, it should wait instead of firing at once", async () => {
    const warnings: string[] = [];
    const onWarning = (w: Error): void => void warnings.push(w.name);
    process.on('warning', onWarning);
    let fired = 0;
    const handle = realClock.setTimeout(() => fired++, MAX_TIMER_MS + 60_000);
    await new Promise((r) => setTimeout(r, 50));
    realClock.clearTimeout(handle);
    process.off('warning', onWarning);
    assert.equal(fired, 0);
    assert.deepEqual(warnings, []);
  });
});
