// The container engine `npm run image` builds with: Debian's docker.io, installed through debian.js when it is
// missing, and its daemon started when it is not running (only when this process is root), then stopped again by
// whoever started it. The daemon gets no bridge and touches no iptables: every container runs with
// `--network host`, so nothing a build or a check does leaves loopback except what the host itself may reach.
// The decision is a pure function over probes; the rest is thin I/O. Node built-ins only.
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, openSync } from 'node:fs';
import { join } from 'node:path';
import { ensurePackages, realHost } from './debian.js';

/** The Debian package of the container engine (debootstrap, for a base assembled here, is image-base.js's). */
export const ENGINE_PACKAGES = ['docker.io'];
/** dockerd without its default bridge or any firewall rule (see the comment at the top). */
export const DOCKERD_ARGS = ['--bridge=none', '--iptables=false', '--ip-masq=false'];

/**
 * What to do to get a usable engine.
 * @param {{ daemonAnswers: boolean, daemonInstalled: boolean, root: boolean }} probe
 * @returns {{ action: 'use' } | { action: 'start' } | { action: 'install-then-start' } | { action: 'refuse', reason: string }}
 */
export function enginePlan(probe) {
  if (probe.daemonAnswers) return { action: 'use' };
  if (!probe.root)
    return {
      action: 'refuse',
      reason:
        'no container engine answers (`docker info` failed) and only root may install or start one here: start dockerd, or run this as root',
    };
  return probe.daemonInstalled ? { action: 'start' } : { action: 'install-then-start' };
}

/** Runs `docker <args>`; returns spawnSync's result with text output. */
export function docker(args, opts = {}) {
  return spawnSync('docker', args, { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024, ...opts });
}

const daemonAnswers = () => docker(['info', '--format', '{{.ServerVersion}}']).status === 0;
const onPath = (name) => spawnSync('sh', ['-c', `command -v ${name}`], { stdio: 'ignore' }).status === 0;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * Starts dockerd in the background, its log in `logDir`, and waits until it answers.
 * @returns {Promise<() => Promise<void>>} how to stop it
 */
async function startDaemon(logDir, print) {
  mkdirSync(logDir, { recursive: true });
  const logFile = join(logDir, 'dockerd.log');
  const out = openSync(logFile, 'a');
  const daemon = spawn('dockerd', DOCKERD_ARGS, { stdio: ['ignore', out, out], detached: true });
  const exited = new Promise((r) => daemon.once('exit', r));
  // A daemon left running (--keep-engine) must not keep this process waiting for it.
  daemon.unref();
  print(`Started dockerd ${DOCKERD_ARGS.join(' ')} (pid ${daemon.pid}, log ${logFile})`);
  for (const deadline = Date.now() + 60_000; !daemonAnswers(); await sleep(500)) {
    if (daemon.exitCode !== null || Date.now() > deadline) {
      daemon.kill('SIGTERM');
      throw new Error(`dockerd did not come up within 60 s (exit ${daemon.exitCode}); see ${logFile}`);
    }
  }
  return async () => {
    daemon.kill('SIGTERM');
    await Promise.race([exited, sleep(30_000)]);
    print(`Stopped dockerd (pid ${daemon.pid})`);
  };
}

/**
 * Makes sure a container engine answers. Returns how to stop what this call started (nothing when the engine
 * was already running).
 * @param {{ logDir: string, print: (line: string) => void }} opts
 * @returns {Promise<() => Promise<void>>}
 */
export async function ensureEngine({ logDir, print }) {
  const plan = enginePlan({
    daemonAnswers: daemonAnswers(),
    daemonInstalled: onPath('dockerd'),
    root: realHost.isRoot(),
  });
  if (plan.action === 'use') return async () => {};
  if (plan.action === 'refuse') throw new Error(plan.reason);
  if (plan.action === 'install-then-start' && ensurePackages(ENGINE_PACKAGES, realHost) !== 0)
    throw new Error(`could not install ${ENGINE_PACKAGES.join(', ')}`);
  return startDaemon(logDir, print);
}
