import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { secondsWithout, type CpuUse, type Processes } from './controller-cpu.js';

const none = (): undefined => undefined;
const processes: Processes = [
  ['management apiserver', none],
  ['controller process', none],
  ['ignition server', none],
  ['benchmark process', none],
];
const window: CpuUse = new Map([
  ['management apiserver', 42.8],
  ['controller process', 12.4],
  ['ignition server', 8.0],
  ['benchmark process', 3.2],
  ['the rest of the machine', 4.0],
  ['the machine, all', 70.4],
]);
const near = (actual: number, expected: number): void => assert.ok(Math.abs(actual - expected) < 1e-9, `${actual}`);

describe('secondsWithout', () => {
  it("when two processes are left out, it should give the benchmark's other processes' CPU over the cores, not the rest of the machine's", () => {
    near(secondsWithout(window, processes, ['controller process', 'ignition server'], 2), 23);
  });

  it('when a name left out is none of the processes, it should still count every other process', () => {
    near(secondsWithout(window, processes, ['controller process', 'no such process'], 2), 27);
  });
});
