/**
 * Child processes of the test bed: each runs under guard.sh, which stops it when this process dies, and
 * logs to its own file. stop() is idempotent and waits until the process is gone.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { openSync, closeSync, readFileSync } from 'node:fs';
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
  #exitCode: number | null | undefined;

  constructor(opts: ProcessOptions) {
    installExitHook();
    this.name = opts.name;
    this.logFile = opts.logFile;
    const fd = openSync(opts.logFile, 'a');
    this.#child = spawn(GUARD, [String(process.pid), opts.command, ...opts.args], {
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
