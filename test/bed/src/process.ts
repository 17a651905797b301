/**
 * Child processes of the test bed: each runs under guard.sh, which stops it when this process dies, and
 * logs to its own file. stop() is idempotent and waits until the process is gone.
 */
import { spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { openSync, closeSync, readFileSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const GUARD = fileURLToPath(new URL('../../../../test/bed/guard.sh', import.meta.url));

/** Every guarded process this Node process started and has not stopped yet. */
const running = new Set<ManagedProcess>();
let exitHookInstalled = false;

function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  // A synchronous last resort: the guards notice our death within half a second anyway.
  process.on('exit', () => {
    for (const p of running) p.kill('SIGTERM');
  });
}

/**
 * Spawns `command` under guard.sh, so it stops when this process dies even by SIGKILL (a test file the runner
 * cancels), with the stdio the caller asks for. The ChildProcess is the guard's: it exits with the command's code.
 */
export function spawnGuarded(command: string, args: string[], opts: SpawnOptions): ChildProcess {
  return spawn(GUARD, [String(process.pid), command, ...args], opts);
}

/** The children of a process, from every thread of it (Linux /proc); none once it is gone. */
export function childPids(pid: number): number[] {
  try {
    return readdirSync(`/proc/${pid}/task`).flatMap((tid) =>
      readFileSync(`/proc/${pid}/task/${tid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number),
    );
  } catch {
    return [];
  }
}

/** PID of the command a guard runs (its child whose argv[0] is `command`; the guard also runs short `sleep`s). */
export function guardedPid(guard: ChildProcess, command: string): number | undefined {
  if (guard.pid === undefined || guard.exitCode !== null || guard.signalCode !== null) return undefined;
  return childPids(guard.pid).find((pid) => {
    try {
      return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0')[0] === command;
    } catch {
      return false;
    }
  });
}

export interface ProcessOptions {
  name: string;
  command: string;
  args: string[];
  logFile: string;
  env?: NodeJS.ProcessEnv;
  cwd?: string;
}

export class ManagedProcess {
  readonly name: string;
  readonly logFile: string;
  readonly exited: Promise<number | null>;
  #child: ChildProcess;
  #command: string;
  #exitCode: number | null | undefined;

  constructor(opts: ProcessOptions) {
    installExitHook();
    this.name = opts.name;
    this.logFile = opts.logFile;
    this.#command = opts.command;
    const fd = openSync(opts.logFile, 'a');
    this.#child = spawnGuarded(opts.command, opts.args, {
      stdio: ['ignore', fd, fd],
      env: opts.env ?? process.env,
      cwd: opts.cwd,
    });
    closeSync(fd);
    running.add(this);
    this.exited = new Promise((resolve) => {
      this.#child.once('exit', (code) => {
        this.#exitCode = code;
        running.delete(this);
        resolve(code);
      });
    });
  }

  /** PID of the guarded command (the guard's only child), for memory figures. */
  get guardPid(): number | undefined {
    return this.#child.pid;
  }

  get alive(): boolean {
    return this.#exitCode === undefined;
  }

  kill(signal: NodeJS.Signals): void {
    if (this.alive) this.#child.kill(signal);
  }

  /**
   * Sends a signal to the guarded command itself rather than to its guard (which forwards only TERM and INT):
   * SIGSTOP/SIGCONT pause and resume it as a stalled machine or a long GC pause would.
   */
  signalCommand(signal: NodeJS.Signals): void {
    const pid = this.commandPid();
    if (pid === undefined) throw new Error(`${this.name} is not running`);
    process.kill(pid, signal);
  }

  /** PID of the guarded command: the guard's child running `command` (the guard also runs short `sleep`s). */
  commandPid(): number | undefined {
    return this.alive ? guardedPid(this.#child, this.#command) : undefined;
  }

  async stop(): Promise<void> {
    this.kill('SIGTERM');
    await this.exited;
  }

  /** The last lines of its log, for error messages. */
  tail(lines = 20): string {
    try {
      return readFileSync(this.logFile, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
    } catch {
      return '';
    }
  }
}
