import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { secondsWithout, type CpuUse } from './controller-cpu.js';

const window: CpuUse = new Map([
  ['management apiserver', 42.8],
  ['controller process', 12.4],
  ['ignition server', 8.0],
  ['the machine, all', 85.0],
]);

describe('the CPU of a stretch', () => {
  it("when two processes are left out, it should give the rest of the machine's CPU over the cores", () => {
    assert.ok(Math.abs(secondsWithout(window, ['controller process', 'ignition server'], 2) - 32.3) < 1e-9);
  });

  it('when a named process did not run, it should count it as nothing', () => {
    assert.ok(Math.abs(secondsWithout(window, ['controller process', 'no such process'], 2) - 36.3) < 1e-9);
  });
});
