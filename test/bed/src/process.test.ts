import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { execFileSync } from 'node:child_process';
import { spawnGuarded } from './process.js';

describe('guard.sh', () => {
  it('when told to stop the moment its command starts, it should stop the command too', async () => {
    // The command itself sends the TERM, so it lands as early as it can: right after the guard started it. A
    // guard that set its trap only after starting the command died alone about once in 100 runs (more under
    // load) and left the command running; a supervisor's stop() then returned with the process still alive.
    const marker = `kindling-guard-test-${process.pid}`;
    for (let i = 0; i < 100; i++) {
      const guard = spawnGuarded('bash', ['-c', `kill -TERM $PPID; exec -a ${marker} sleep 30`], { stdio: 'ignore' });
      await once(guard, 'exit');
    }
    const left = (): string[] => {
      try {
        return execFileSync('pgrep', ['-f', marker], { encoding: 'utf8' }).trim().split('\n');
      } catch {
        return []; // pgrep exits 1 when nothing matches
      }
    };
    const orphans = left();
    if (orphans.length) execFileSync('pkill', ['-f', marker]);
    assert.deepEqual(orphans, []);
  });
});
