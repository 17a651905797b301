/**
 * Boots a host folder with the real Ignition client (Debian `ignition`), exactly as a machine's initramfs
 * would: the fetch stage reads the user-data stub and fetches the payload over HTTPS with the bearer token,
 * then the files stage writes it under the host root. Ignition's own state stays in <root>/run/ignition.
 */
import { randomUUID } from 'node:crypto';
import { execFile } from 'node:child_process';
import { mkdir, writeFile, access, rm } from 'node:fs/promises';
import { STATUS_CODES } from 'node:http';
import { dirname, join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { HOST_PATHS } from '../../../api/src/host-paths.js';

const run = promisify(execFile);
const IGNITION_CLIENT = '/usr/lib/dracut/modules.d/30ignition/ignition';

class BootError extends Error {
  override readonly name = 'BootError';
}

export interface BootOptions {
  root: string;
  /** The Ignition config the machine boots with (the user-data Secret's value). */
  userData: string;
  /** How long the fetch stage retries before giving up (Ignition retries 5xx and connection errors). */
  fetchTimeoutMs?: number;
}

/** The client's own account of the failure: its CRITICAL line, else its last error line. */
export function reason(output: string): string {
  const lines = output.split('\n');
  const line =
    lines.find((l) => l.startsWith('CRITICAL')) ??
    lines.filter((l) => /^(ERROR|WARNING)\b/.test(l)).at(-1) ??
    lines.filter(Boolean).at(-1) ??
    '';
  const message = line.replace(/^(CRITICAL|ERROR|WARNING)\s*:\s*/, '').trim();
  // The client's verdict alone ("failed to fetch resource") hides why; the server's last answer says it.
  const answer = lines
    .filter((l) => l.includes('GET result:'))
    .at(-1)
    ?.replace(/^.*GET result:\s*/, '')
    .trim();
  if (!answer || answer === 'OK') return message;
  const code = Object.entries(STATUS_CODES).find(([, text]) => text === answer)?.[0];
  return `${message} (last answer: ${code ? `${code} ` : ''}${answer})`;
}

/**
 * The little of an OS image the files stage needs. Debian's Ignition relabels every file it writes with
 * SELinux's `setfiles` whatever /etc/selinux/config says; a simulated host has no SELinux, so its `setfiles`
 * only drains its input.
 */
async function layOsImage(root: string, state: string): Promise<void> {
  await mkdir(join(root, 'etc', 'selinux'), { recursive: true });
  await writeFile(join(root, 'etc', 'selinux', 'config'), 'SELINUX=disabled\nSELINUXTYPE=targeted\n');
  await mkdir(join(state, 'bin'), { recursive: true });
  await writeFile(join(state, 'bin', 'setfiles'), '#!/bin/sh\ncat >/dev/null\n', { mode: 0o755 });
}

async function requireClient(): Promise<void> {
  try {
    await access(IGNITION_CLIENT);
  } catch {
    throw new BootError(`the Ignition client ${IGNITION_CLIENT} is missing: install the Debian package "ignition"`);
  }
}

/**
 * Boots the host once: a host that completed both stages keeps its root (a marker in run/ignition says so);
 * one whose boot failed half-way starts again from a clean disk, as a reprovisioned machine would.
 */
export async function bootHost(input: BootOptions): Promise<void> {
  await requireClient();
  const opts = { ...input, root: resolve(input.root) };
  const booted = join(opts.root, 'run', 'ignition', 'booted');
  if (
    await access(booted).then(
      () => true,
      () => false,
    )
  )
    return;
  await rm(opts.root, { recursive: true, force: true });
  const fetchTimeoutMs = opts.fetchTimeoutMs ?? 30_000;
  const state = join(opts.root, 'run', 'ignition');
  await layOsImage(opts.root, state);
  const stub = join(state, 'user-data.ign');
  await writeFile(stub, opts.userData, { mode: 0o600 });
  const common = [
    '-platform',
    'file',
    '-root',
    opts.root,
    '-log-to-stdout',
    '-config-cache',
    join(state, 'config.json'),
    '-state-file',
    join(state, 'state'),
    '-neednet',
    join(state, 'neednet'),
  ];
  const env = { ...process.env, IGNITION_CONFIG_FILE: stub, PATH: `${join(state, 'bin')}:${process.env.PATH ?? ''}` };
  for (const stage of ['fetch', 'files']) {
    const args = [...common, '-stage', stage, '-fetch-timeout', `${Math.round(fetchTimeoutMs / 1000)}s`];
    try {
      await run(IGNITION_CLIENT, args, { env, timeout: fetchTimeoutMs + 30_000, maxBuffer: 16 << 20 });
    } catch (err) {
      const e = err as { stdout?: string; stderr?: string; message: string };
      throw new BootError(
        `ignition ${stage} stage failed: ${reason(`${e.stdout ?? ''}\n${e.stderr ?? ''}`) || e.message}`,
        { cause: err },
      );
    }
  }
  // The kernel writes this boot's ID at every boot; later ones are the agent's simulated reboots (reboot.ts).
  const bootId = join(opts.root, HOST_PATHS.bootId);
  await mkdir(dirname(bootId), { recursive: true });
  await writeFile(bootId, randomUUID());
  await writeFile(booted, new Date().toISOString());
}
