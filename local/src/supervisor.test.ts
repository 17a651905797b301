import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { flush, manualClock } from '../../support/testing/index.js';
import { eventually, ManagedProcess } from '../../test/bed/src/index.js';
import {
  describeExit,
  restartDelay,
  RESTART_BACKOFF,
  Supervisor,
  type BackoffPolicy,
  type Restart,
  type SupervisedProcess,
} from './supervisor.js';

const POLICY: BackoffPolicy = { initialMs: 1000, maxMs: 8000, resetAfterMs: 60_000 };

class FakeProcess implements SupervisedProcess {
  readonly exited: Promise<number | null>;
  stopped = false;
  #exit!: (code: number | null) => void;

  constructor(readonly run: number) {
    this.exited = new Promise((resolve) => (this.#exit = resolve));
  }

  exit(code: number | null): void {
    this.#exit(code);
  }

  stop(): Promise<void> {
    this.stopped = true;
    this.#exit(143);
    return Promise.resolve();
  }

  tail(): string {
    return `last line of run ${this.run}`;
  }
}

function fixture(policy: BackoffPolicy | undefined): {
  clock: ReturnType<typeof manualClock>;
  spawned: FakeProcess[];
  exits: Restart[];
  supervisor: Supervisor<FakeProcess>;
} {
  const clock = manualClock(0);
  const spawned: FakeProcess[] = [];
  const exits: Restart[] = [];
  const supervisor = new Supervisor({
    name: 'drainer-1',
    policy,
    clock,
    spawn: () => {
      const p = new FakeProcess(spawned.length);
      spawned.push(p);
      return p;
    },
    onExit: (r) => exits.push(r),
  });
  return { clock, spawned, exits, supervisor };
}

/** Lets the current process exit with `code` and the supervisor see it. */
async function exitNow(p: FakeProcess | undefined, code: number | null): Promise<void> {
  assert.ok(p, 'a process is running');
  p.exit(code);
  await flush();
}

describe('restart policy', () => {
  it('when restarts follow each other, it should double the delay from the initial one up to the cap', () => {
    assert.deepEqual(
      [1, 2, 3, 4, 5, 6].map((a) => restartDelay(a, POLICY)),
      [1000, 2000, 4000, 8000, 8000, 8000],
    );
  });

  it('when a guarded command was killed by a signal, it should name the signal', () => {
    assert.equal(describeExit(137), 'code 137 (SIGKILL)');
    assert.equal(describeExit(1), 'code 1');
    assert.equal(describeExit(null), 'killed by a signal');
  });
});

describe('Supervisor (injected clock, fake processes)', () => {
  it('when the process keeps exiting at once, it should restart it after 1, 2, 4, 8, 8 s, reporting each exit with its attempt and delay', async () => {
    const { clock, spawned, exits, supervisor } = fixture(POLICY);
    supervisor.start();
    assert.equal(spawned.length, 1);
    for (const delay of [1000, 2000, 4000, 8000, 8000]) {
      await exitNow(supervisor.current, 1);
      assert.equal(supervisor.current, undefined, 'nothing runs while the restart waits');
      assert.deepEqual(clock.pending(), [delay]);
      const count: number = spawned.length;
      clock.advance(delay - 1);
      assert.equal(spawned.length, count, `not restarted before ${delay} ms`);
      clock.advance(1);
      assert.equal(spawned.length, count + 1, `restarted at ${delay} ms`);
    }
    assert.deepEqual(
      exits.map((e) => [e.attempt, e.delayMs]),
      [
        [1, 1000],
        [2, 2000],
        [3, 4000],
        [4, 8000],
        [5, 8000],
      ],
    );
    assert.deepEqual(exits[0], {
      name: 'drainer-1',
      exit: 'code 1',
      ranForMs: 0,
      attempt: 1,
      delayMs: 1000,
      lastLines: 'last line of run 0',
    });
    assert.equal(supervisor.restarts, 5);
  });

  it('when a run lasted the reset time, it should wait the initial delay again; a shorter run should keep the backoff growing', async () => {
    const { clock, exits, supervisor } = fixture(POLICY);
    supervisor.start();
    await exitNow(supervisor.current, 137);
    clock.advance(1000);
    await exitNow(supervisor.current, 137);
    clock.advance(2000);
    // Healthy for the reset time: the backoff starts over.
    clock.advance(60_000);
    await exitNow(supervisor.current, 1);
    clock.advance(1000);
    // Just short of it: the backoff goes on from there.
    clock.advance(59_999);
    await exitNow(supervisor.current, 1);
    assert.deepEqual(
      exits.map((e) => [e.exit, e.ranForMs, e.attempt, e.delayMs]),
      [
        ['code 137 (SIGKILL)', 0, 1, 1000],
        ['code 137 (SIGKILL)', 0, 2, 2000],
        ['code 1', 60_000, 1, 1000],
        ['code 1', 59_999, 2, 2000],
      ],
    );
  });

  it('when no policy is given (or undefined), it should restart with RESTART_BACKOFF', async () => {
    const { clock, exits, supervisor } = fixture(undefined);
    supervisor.start();
    await exitNow(supervisor.current, 1);
    assert.deepEqual(clock.pending(), [RESTART_BACKOFF.initialMs]);
    assert.equal(exits[0]?.delayMs, RESTART_BACKOFF.initialMs);
  });

  it('when stopped while a restart is pending, it should start nothing again', async () => {
    const { clock, spawned, supervisor } = fixture(POLICY);
    supervisor.start();
    await exitNow(supervisor.current, 1);
    assert.deepEqual(clock.pending(), [1000]);
    await supervisor.stop();
    assert.deepEqual(clock.pending(), [], 'the pending restart is cancelled');
    clock.advance(60_000);
    supervisor.start();
    assert.equal(spawned.length, 1, 'never started again, not even by start()');
  });

  it('when stopped while the process runs, it should stop the process and neither report nor restart its exit', async () => {
    const { clock, spawned, exits, supervisor } = fixture(POLICY);
    supervisor.start();
    await supervisor.stop();
    await flush();
    assert.equal(spawned[0]?.stopped, true);
    assert.equal(supervisor.current, undefined);
    assert.deepEqual(exits, []);
    assert.deepEqual(clock.pending(), []);
  });
});

describe('Supervisor (real processes)', () => {
  it('when one child is SIGKILLed, it should come back as a new process while the others keep running, and stop() should leave none', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'kindling-supervisor-'));
    after(() => rm(dir, { recursive: true, force: true }));
    const exits: Restart[] = [];
    const supervisors = ['a', 'b', 'c'].map(
      (name) =>
        new Supervisor({
          name,
          policy: { initialMs: 200, maxMs: 1000, resetAfterMs: 10_000 },
          spawn: () =>
            new ManagedProcess({
              name,
              command: process.execPath,
              args: ['-e', `console.log('${name} up', process.pid); setInterval(() => {}, 1000)`],
              logFile: join(dir, `${name}.log`),
            }),
          onExit: (r) => exits.push(r),
        }),
    );
    after(() => Promise.all(supervisors.map((s) => s.stop())));
    for (const s of supervisors) s.start();
    const pidOf = (s: Supervisor<ManagedProcess>): Promise<number> =>
      eventually(`${s.name}'s pid`, () => Promise.resolve(s.current?.commandPid()), 10_000, 20);
    const [a, b, c] = supervisors as [
      Supervisor<ManagedProcess>,
      Supervisor<ManagedProcess>,
      Supervisor<ManagedProcess>,
    ];
    const before = { a: await pidOf(a), b: await pidOf(b), c: await pidOf(c) };
    await eventually('a to log', () => Promise.resolve(a.current?.tail(1).includes('a up')), 10_000, 20);

    process.kill(before.a, 'SIGKILL');
    const again = await eventually(
      'a to run again as a new process',
      async () => {
        const pid = await pidOf(a);
        return pid !== before.a ? pid : undefined;
      },
      15_000,
      50,
    );
    assert.deepEqual(
      exits.map((e) => [e.name, e.exit, e.attempt, e.delayMs]),
      [['a', 'code 137 (SIGKILL)', 1, 200]],
    );
    assert.match(
      exits[0]?.lastLines ?? '',
      new RegExp(`a up ${before.a}`),
      "the report carries the dead process's last log line",
    );
    assert.equal(a.restarts, 1);
    assert.deepEqual([await pidOf(b), await pidOf(c)], [before.b, before.c], 'b and c are the same processes');
    for (const pid of [again, before.b, before.c]) assert.doesNotThrow(() => process.kill(pid, 0), `${pid} runs`);

    await Promise.all(supervisors.map((s) => s.stop()));
    // Under load the kernel may take a moment to reap a stopped process; none may outlive that moment.
    const gone = (pid: number): boolean => {
      try {
        process.kill(pid, 0);
        return false;
      } catch (err) {
        return (err as NodeJS.ErrnoException).code === 'ESRCH';
      }
    };
    for (const pid of [again, before.b, before.c])
      await eventually(`${pid} to be gone`, () => Promise.resolve(gone(pid) || undefined), 15_000, 20);
    assert.equal(exits.length, 1, 'stopping is not an exit to report');
  });
});
