import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Registry } from 'prom-client';
import { pino } from 'pino';
import {
  BUSY_CORES,
  MemorySaverGovernor,
  QUIET_CORES,
  INITIAL_SAVER_STATE,
  MAX_QUIET_MS,
  QUIET_MS,
  saverStep,
  type SaverState,
  startedWithSaver,
} from './memory-saver.js';

describe('saverStep', () => {
  const off = (over: Partial<SaverState> = {}): SaverState => ({ on: false, quietNeededMs: QUIET_MS, ...over });

  it('when the process is busy with the saver on, it should turn it off', () => {
    assert.deepEqual(saverStep(INITIAL_SAVER_STATE, BUSY_CORES, 0), { state: off(), change: 'off' });
  });

  it('when the process stays busy with the saver off, it should change nothing', () => {
    assert.deepEqual(saverStep(off(), 1.8, 500), { state: off(), change: undefined });
  });

  it('when the process is quiet for less than the quiet needed, it should keep the saver off', () => {
    let step = saverStep(off(), 0, 1000);
    step = saverStep(step.state, QUIET_CORES / 2, 1000 + QUIET_MS - 1);
    assert.deepEqual(step, { state: off({ quietSinceMs: 1000 }), change: undefined });
  });

  it('when the process has been quiet for the quiet needed, it should turn the saver back on', () => {
    const step = saverStep(off({ quietSinceMs: 1000 }), 0, 1000 + QUIET_MS);
    assert.deepEqual(step, { state: { on: true, quietNeededMs: QUIET_MS, onSinceMs: 1000 + QUIET_MS }, change: 'on' });
  });

  it('when a sample between the thresholds interrupts the quiet, it should start counting again', () => {
    let step = saverStep(off({ quietSinceMs: 0 }), QUIET_CORES, QUIET_MS - 1);
    assert.deepEqual(step, { state: off(), change: undefined });
    step = saverStep(step.state, 0, QUIET_MS);
    step = saverStep(step.state, 0, 2 * QUIET_MS - 1);
    assert.equal(step.change, undefined);
    assert.equal(saverStep(step.state, 0, 2 * QUIET_MS).change, 'on');
  });

  it('when the process is quiet with the saver on, it should change nothing', () => {
    assert.equal(saverStep({ ...INITIAL_SAVER_STATE, quietSinceMs: 0 }, 0, 10 * QUIET_MS).change, undefined);
  });

  it('when bursts come back soon after the saver went on, it should ask for twice the quiet each time, up to MAX_QUIET_MS', () => {
    let state = INITIAL_SAVER_STATE;
    let now = 0;
    const needed: number[] = [];
    for (let i = 0; i < 8; i++) {
      state = saverStep(state, 1, (now += 500)).state;
      needed.push(state.quietNeededMs);
      state = saverStep(state, 0, (now += 500)).state;
      const step = saverStep(state, 0, (now += state.quietNeededMs));
      assert.equal(step.change, 'on');
      state = step.state;
    }
    assert.deepEqual(needed, [
      QUIET_MS,
      2 * QUIET_MS,
      4 * QUIET_MS,
      8 * QUIET_MS,
      16 * QUIET_MS,
      MAX_QUIET_MS,
      MAX_QUIET_MS,
      MAX_QUIET_MS,
    ]);
  });

  it('when a burst comes long after the saver went on, it should ask for the shortest quiet again', () => {
    const state: SaverState = { on: true, quietNeededMs: MAX_QUIET_MS, onSinceMs: 0 };
    assert.deepEqual(saverStep(state, 1, MAX_QUIET_MS), { state: off(), change: 'off' });
  });
});

describe('MemorySaverGovernor', () => {
  /** A governor on a fake clock and CPU: `run(cores, ms)` spends that many cores for that long, then samples. */
  function governor(): {
    g: MemorySaverGovernor;
    run: (cores: number, ms: number) => void;
    spend: (cores: number, ms: number) => void;
    calls: string[];
    registry: Registry;
  } {
    let cpu = 0;
    let now = 0;
    const calls: string[] = [];
    const registry = new Registry();
    const g = new MemorySaverGovernor({
      log: pino({ level: 'silent' }),
      registry,
      cpuMicros: () => cpu,
      nowMs: () => now,
      setSaver: (on) => calls.push(on ? 'saver on' : 'saver off'),
      collect: () => calls.push('collect'),
    });
    const spend = (cores: number, ms: number): void => {
      cpu += cores * ms * 1000;
      now += ms;
    };
    const run = (cores: number, ms: number): void => {
      spend(cores, ms);
      g.sample();
    };
    return { g, run, spend, calls, registry };
  }

  it('when a burst ends and the process stays quiet, it should turn the saver off, then on and collect every heap', async () => {
    const { g, run, calls, registry } = governor();
    g.onCollect(async () => void calls.push('threads collect'));
    run(0.05, 500);
    assert.deepEqual(calls, [], 'quiet with the saver on: nothing');
    run(1.5, 500);
    run(1.2, 500);
    assert.deepEqual(calls, ['saver off']);
    for (let t = 0; t < QUIET_MS; t += 500) run(0.02, 500);
    assert.deepEqual(calls, ['saver off']);
    run(0.02, 500);
    await g.settled();
    assert.deepEqual(calls, ['saver off', 'saver on', 'collect', 'threads collect']);
    const metrics = await registry.metrics();
    assert.match(metrics, /kindling_memory_saver_switches_total\{to="off"\} 1/);
    assert.match(metrics, /kindling_memory_saver_switches_total\{to="on"\} 1/);
    assert.match(metrics, /kindling_memory_saver_on 1/);
  });

  it('when two 100 ms samples read half a core, it should turn the saver off', () => {
    const { run, calls } = governor();
    run(0, 100);
    run(BUSY_CORES, 100);
    assert.deepEqual(calls, [], 'one sample is not enough');
    run(BUSY_CORES, 100);
    assert.deepEqual(calls, ['saver off']);
  });

  it('when the samples come a little early, it should still judge two of them', () => {
    const { run, calls } = governor();
    run(0, 99);
    run(BUSY_CORES, 99.5);
    run(BUSY_CORES, 99.5);
    assert.deepEqual(calls, ['saver off']);
  });

  it('when a quiet process has a 60 ms spell of work (a relist, a scrape), it should leave the saver on', () => {
    const { run, calls } = governor();
    for (let i = 0; i < 5; i++) run(0, 100);
    run(0.6, 100);
    for (let i = 0; i < 5; i++) run(0, 100);
    run(0.3, 100);
    run(0.3, 100);
    for (let i = 0; i < 5; i++) run(0, 100);
    assert.deepEqual(calls, []);
  });

  it('when a quiet spell carries a short spell of work in some samples, it should judge it on its mean over half a second', async () => {
    const { g, run, calls } = governor();
    run(1, 200);
    // 30 ms in one sample of five: 0.3 of a core in that sample, 0.06 over the half second.
    for (let t = 0; t <= QUIET_MS + 500; t += 500) {
      for (let i = 0; i < 4; i++) run(0, 100);
      run(0.3, 100);
    }
    await g.settled();
    assert.deepEqual(calls, ['saver off', 'saver on', 'collect']);
  });

  it('when a sample comes a few ms after the heaps were collected, it should not read that as a burst', async () => {
    const { g, run, calls } = governor();
    run(1, 200);
    run(0, 500);
    run(0, QUIET_MS);
    await g.settled();
    run(1, 3);
    run(0.02, 100);
    assert.deepEqual(calls, ['saver off', 'saver on', 'collect']);
  });

  it('when the collection itself spends CPU, it should not read it as a burst', async () => {
    const { g, run, calls, spend } = governor();
    g.onCollect(() => spend(2, 500));
    run(1, 500);
    run(0, 500);
    run(0, QUIET_MS);
    await g.settled();
    run(0.02, 500);
    assert.deepEqual(calls, ['saver off', 'saver on', 'collect']);
  });

  it('when a sample comes while the heaps are being collected, it should be skipped', async () => {
    const { g, run, calls } = governor();
    let finish = (): void => undefined;
    g.onCollect(() => new Promise<void>((resolve) => (finish = resolve)));
    run(1, 500);
    run(0, 500);
    run(0, QUIET_MS);
    await new Promise(setImmediate);
    run(3, 500);
    finish();
    await g.settled();
    run(0.02, 500);
    assert.deepEqual(calls, ['saver off', 'saver on', 'collect']);
  });

  it('when a thread fails to collect, it should still collect the others', async () => {
    const { g, run, calls } = governor();
    g.onCollect(() => {
      throw new Error('gone');
    });
    g.onCollect(() => void calls.push('second'));
    run(1, 500);
    run(0, 500);
    run(0, QUIET_MS);
    await g.settled();
    assert.deepEqual(calls, ['saver off', 'saver on', 'collect', 'second']);
  });
});

describe('startedWithSaver', () => {
  it('when Node was given the saver, the last of its two spellings should win', () => {
    assert.equal(startedWithSaver(['--max-semi-space-size=8', '--memory-saver-mode']), true);
    assert.equal(startedWithSaver(['--memory_saver_mode']), true);
    assert.equal(startedWithSaver(['--memory-saver-mode', '--no-memory-saver-mode']), false);
    assert.equal(startedWithSaver([]), false);
  });

  it('when Node was given --optimize-for-size, it should leave the saver alone (V8 saves memory whatever the flag)', () => {
    assert.equal(startedWithSaver(['--optimize_for_size', '--memory-saver-mode']), false);
    assert.equal(startedWithSaver(['--no-optimize-for-size', '--memory-saver-mode']), true);
  });
});
