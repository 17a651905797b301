/**
 * How the agent reboots its host, and how it knows a reboot happened: the boot ID changes; and how it runs
 * the unit actions of a change that needs no reboot (`systemctl daemon-reload|reload|restart`, the same way:
 * in the host's namespaces; simulated, each command is recorded in HOST_PATHS.simulatedSystemctl, where the
 * local environment's host reads it). Real: the
 * host's systemd (through the host's namespaces: the agent runs with hostPID). Simulated (tests, the local
 * environment): a new boot ID where the kernel keeps it (HOST_PATHS.bootId, in the host root), then the agent
 * process exits; whatever runs it (kubelet's restart, the test's fleet) starts it again, and it resumes from
 * the annotations and its journal. The host's simulated kubelet reports that boot ID in its Node's status,
 * as a real one does, which is what the health gate waits for.
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { appendFile, mkdir, readFile, rename, rm } from 'node:fs/promises';
import { dirname } from 'node:path';
import { HOST_PATHS } from '../../api/src/host-paths.js';
import type { Host } from './host.js';
import { createFile } from './root.js';

export interface RebootAction {
  bootId(): Promise<string>;
  /** Does not return on success (the host goes down, or the process exits). */
  reboot(): Promise<void>;
  /** Runs `systemctl <args>` on the host; rejects when it fails. */
  systemctl(args: readonly string[]): Promise<void>;
}

/** Runs a command in the host's namespaces (the agent runs with hostPID). */
function inHost(command: readonly string[]): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const child = spawn('nsenter', ['--target', '1', '--mount', '--uts', '--ipc', '--net', '--pid', '--', ...command], {
      stdio: 'inherit',
    });
    child.once('error', reject);
    child.once('exit', (code) =>
      code === 0 ? resolve() : reject(new Error(`${command.join(' ')} exited with ${code}`)),
    );
  });
}

export class SystemdReboot implements RebootAction {
  async bootId(): Promise<string> {
    return (await readFile(HOST_PATHS.bootId, 'utf8')).trim();
  }

  async reboot(): Promise<void> {
    await inHost(['systemctl', 'reboot']);
    // The host is going down; wait for it rather than carry on.
    await new Promise(() => undefined);
  }

  systemctl(args: readonly string[]): Promise<void> {
    return inHost(['systemctl', ...args]);
  }
}

export class SimulatedReboot implements RebootAction {
  #host: Host;
  #exit: () => void;

  constructor(host: Host, exit: () => void) {
    this.#host = host;
    this.#exit = exit;
  }

  async bootId(): Promise<string> {
    try {
      return (await readFile((await this.#host.resolve(HOST_PATHS.bootId)).local, 'utf8')).trim();
    } catch {
      await this.#write(randomUUID());
      return this.bootId();
    }
  }

  async reboot(): Promise<void> {
    await this.#write(randomUUID());
    this.#exit();
    await new Promise(() => undefined);
  }

  async systemctl(args: readonly string[]): Promise<void> {
    const file = (await this.#host.resolve(HOST_PATHS.simulatedSystemctl)).local;
    await mkdir(dirname(file), { recursive: true });
    await appendFile(file, `${args.join(' ')}\n`);
  }

  async #write(id: string): Promise<void> {
    const file = (await this.#host.resolve(HOST_PATHS.bootId)).local;
    await mkdir(dirname(file), { recursive: true });
    await rm(`${file}.tmp`, { force: true });
    await createFile(`${file}.tmp`, id, 0o644);
    await rename(`${file}.tmp`, file);
  }
}
