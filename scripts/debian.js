// The Debian packages Kindling's environment and tests run for real, and how setup.js gets them onto a machine:
// installed by apt-get when this process may (root, or passwordless sudo), otherwise the exact command for the
// person to run. The decisions are pure functions over injected probes, so they are tested without touching
// the machine's packages. Node built-ins only: this runs before `npm ci`.
import { spawnSync } from 'node:child_process';

/**
 * What `npm start` and `npm test` run: the real Ignition client and ignition-validate, a real OCI registry,
 * and the allocator the image runs every process on (support/src/malloc.ts).
 */
export const PACKAGES = ['ignition', 'docker-registry', 'libjemalloc2'];
/** The ignition-server benchmark's reference server and load generator (`node scripts/setup.js --bench`). */
export const BENCH_PACKAGES = ['nginx-light', 'wrk'];

/**
 * The packages a set-up run needs, from its arguments.
 * @param {string[]} args
 */
export function packagesFor(args) {
  return args.includes('--bench') ? [...PACKAGES, ...BENCH_PACKAGES] : PACKAGES;
}

/**
 * Whether dpkg has `name` installed. `run(command, args)` returns `{ status, stdout, error }` as spawnSync
 * does; a machine without dpkg-query throws, since nothing can be decided there.
 * @param {string} name
 * @param {(command: string, args: string[]) => { status: number | null, stdout: string, error?: Error }} run
 */
export function dpkgInstalled(name, run) {
  const r = run('dpkg-query', ['--show', '--showformat=${Status}', name]);
  if (r.error)
    throw new Error(
      `cannot ask dpkg whether ${name} is installed (${r.error.message}): Kindling's set-up needs a Debian-based machine`,
    );
  return r.status === 0 && r.stdout.trim() === 'install ok installed';
}

/**
 * @param {string[]} packages
 * @param {(name: string) => boolean} isInstalled
 */
export function missingPackages(packages, isInstalled) {
  return packages.filter((p) => !isInstalled(p));
}

/**
 * What to do about missing packages: nothing; run apt-get update once, then one install; or stop and tell
 * the person the exact line.
 * @param {string[]} missing
 * @param {{ root: boolean, sudo: boolean }} may  root: this process is root; sudo: `sudo -n true` succeeds
 * @returns {{ action: 'none' } | { action: 'install', update: string[], install: string[] } | { action: 'ask', line: string }}
 */
export function installPlan(missing, may) {
  if (missing.length === 0) return { action: 'none' };
  const install = ['apt-get', 'install', '--yes', '--no-install-recommends', ...missing];
  if (may.root || may.sudo) {
    // sudo drops the environment, so the non-interactive front end goes through env(1).
    const as = may.root ? [] : ['sudo', '-n'];
    return {
      action: 'install',
      update: [...as, 'apt-get', 'update', '-qq'],
      install: [...as, 'env', 'DEBIAN_FRONTEND=noninteractive', ...install],
    };
  }
  return { action: 'ask', line: `sudo apt-get update && sudo ${install.join(' ')}` };
}

/**
 * Installs what is missing of `packages`, or explains why it cannot. Returns the process exit code to stop
 * with, or 0 to go on.
 * @param {string[]} packages
 * @param {{
 *   isInstalled: (name: string) => boolean,
 *   isRoot: () => boolean,
 *   canSudo: () => boolean,
 *   exec: (argv: string[]) => number | null,
 *   print: (line: string) => void,
 * }} host
 */
export function ensurePackages(packages, host) {
  const missing = missingPackages(packages, host.isInstalled);
  const root = host.isRoot();
  const plan = installPlan(missing, { root, sudo: !root && missing.length > 0 && host.canSudo() });
  if (plan.action === 'none') return 0;
  if (plan.action === 'ask') {
    host.print(
      `Kindling needs the Debian packages ${missing.join(', ')}, and this user may not install them (not root, no passwordless sudo). Run:`,
    );
    host.print(`  ${plan.line}`);
    host.print('then run this command again.');
    return 1;
  }
  host.print(`Installing Debian packages: ${missing.join(' ')}`);
  // A stale or unreachable extra source fails the update, yet the lists there are may still hold the packages.
  const updated = host.exec(plan.update);
  if (updated !== 0)
    host.print(
      `\`${plan.update.join(' ')}\` failed (exit ${updated}); trying the install with the package lists there are.`,
    );
  const status = host.exec(plan.install);
  if (status !== 0) {
    host.print(
      `\`${plan.install.join(' ')}\` failed (exit ${status}); install ${missing.join(' ')} and run this command again.`,
    );
    return status || 1;
  }
  const still = missingPackages(missing, host.isInstalled);
  if (still.length > 0) {
    host.print(`apt-get finished but ${still.join(' ')} is still not installed.`);
    return 1;
  }
  return 0;
}

const utf8 = (command, args) => {
  const r = spawnSync(command, args, { encoding: 'utf8' });
  return { status: r.status, stdout: r.stdout ?? '', error: r.error };
};

/** This machine, for ensurePackages. */
export const realHost = {
  isInstalled: (name) => dpkgInstalled(name, utf8),
  isRoot: () => process.getuid?.() === 0,
  canSudo: () => spawnSync('sudo', ['-n', 'true'], { stdio: 'ignore' }).status === 0,
  exec: (argv) => spawnSync(argv[0], argv.slice(1), { stdio: 'inherit' }).status,
  print: (line) => console.error(line),
};
