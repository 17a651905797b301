import { before, describe, it } from 'node:test';
import assert from 'node:assert/strict';

/** scripts/debian.js runs before `npm ci` and the build, so it is plain JavaScript: its shape, as used here. */
interface Host {
  isInstalled: (name: string) => boolean;
  isRoot: () => boolean;
  canSudo: () => boolean;
  exec: (argv: string[]) => number | null;
  print: (line: string) => void;
}
type Plan =
  { action: 'none' } | { action: 'install'; update: string[]; install: string[] } | { action: 'ask'; line: string };
interface Debian {
  PACKAGES: string[];
  packagesFor(args: string[]): string[];
  dpkgInstalled(
    name: string,
    run: (command: string, args: string[]) => { status: number | null; stdout: string; error?: Error },
  ): boolean;
  missingPackages(packages: string[], isInstalled: (name: string) => boolean): string[];
  installPlan(missing: string[], may: { root: boolean; sudo: boolean }): Plan;
  ensurePackages(packages: string[], host: Host): number;
}

const MODULE = new URL('../../../scripts/debian.js', import.meta.url).href;

/** A machine as ensurePackages sees it: which packages it has, who we are, and what apt-get does. */
function machine(opts: {
  has: string[];
  root?: boolean;
  sudo?: boolean;
  aptInstalls?: boolean;
  updateStatus?: number;
}): Host & { ran: string[][]; said: string[] } {
  const has = new Set(opts.has);
  const ran: string[][] = [];
  const said: string[] = [];
  return {
    ran,
    said,
    isInstalled: (name) => has.has(name),
    isRoot: () => opts.root ?? false,
    canSudo: () => opts.sudo ?? false,
    exec: (argv) => {
      ran.push(argv);
      if (argv.includes('update')) return opts.updateStatus ?? 0;
      if (opts.aptInstalls === false) return 100;
      for (const p of argv.slice(argv.indexOf('--no-install-recommends') + 1)) has.add(p);
      return 0;
    },
    print: (line) => void said.push(line),
  };
}

describe('scripts/debian.js', () => {
  let d: Debian;
  before(async () => (d = (await import(MODULE)) as Debian));

  it('when dpkg reports a package, it should count it installed only in the "install ok installed" state', () => {
    const run =
      (stdout: string, status = 0) =>
      () => ({ status, stdout });
    assert.equal(d.dpkgInstalled('ignition', run('install ok installed')), true);
    assert.equal(d.dpkgInstalled('ignition', run('deinstall ok config-files')), false, 'removed, configuration left');
    assert.equal(d.dpkgInstalled('ignition', run('', 1)), false, 'never installed: dpkg-query exits 1');
    const asked: string[][] = [];
    d.dpkgInstalled(
      'wrk',
      (command, args) => (asked.push([command, ...args]), { status: 0, stdout: 'install ok installed' }),
    );
    assert.deepEqual(asked, [['dpkg-query', '--show', '--showformat=${Status}', 'wrk']]);
    assert.throws(
      () =>
        d.dpkgInstalled('wrk', () => ({ status: null, stdout: '', error: new Error('spawnSync dpkg-query ENOENT') })),
      /Debian-based machine/,
    );
  });

  it('when packages are missing, it should plan one apt-get update then one install as root, the same through sudo -n, and otherwise the exact line to run', () => {
    assert.deepEqual(
      d.missingPackages(['ignition', 'docker-registry', 'wrk'], (p) => p === 'ignition'),
      ['docker-registry', 'wrk'],
    );
    assert.deepEqual(d.installPlan([], { root: false, sudo: false }), { action: 'none' });
    assert.deepEqual(d.installPlan(['docker-registry'], { root: true, sudo: false }), {
      action: 'install',
      update: ['apt-get', 'update', '-qq'],
      install: [
        'env',
        'DEBIAN_FRONTEND=noninteractive',
        'apt-get',
        'install',
        '--yes',
        '--no-install-recommends',
        'docker-registry',
      ],
    });
    assert.deepEqual(d.installPlan(['ignition', 'docker-registry'], { root: false, sudo: true }), {
      action: 'install',
      update: ['sudo', '-n', 'apt-get', 'update', '-qq'],
      install: [
        'sudo',
        '-n',
        'env',
        'DEBIAN_FRONTEND=noninteractive',
        'apt-get',
        'install',
        '--yes',
        '--no-install-recommends',
        'ignition',
        'docker-registry',
      ],
    });
    assert.deepEqual(d.installPlan(['ignition', 'docker-registry'], { root: false, sudo: false }), {
      action: 'ask',
      line: 'sudo apt-get update && sudo apt-get install --yes --no-install-recommends ignition docker-registry',
    });
  });

  it('when everything is there, it should run nothing and not even ask sudo', () => {
    const m = machine({ has: ['ignition', 'docker-registry'] });
    m.canSudo = () => assert.fail('sudo was probed with nothing to install');
    assert.equal(d.ensurePackages(['ignition', 'docker-registry'], m), 0);
    assert.deepEqual(m.ran, []);
    assert.deepEqual(m.said, []);
  });

  it('when running as root with packages missing, it should update once, install only the missing ones, and go on', () => {
    const m = machine({ has: ['ignition'], root: true });
    assert.equal(d.ensurePackages(['ignition', 'docker-registry'], m), 0);
    assert.deepEqual(
      m.ran.map((a) => a.join(' ')),
      [
        'apt-get update -qq',
        'env DEBIAN_FRONTEND=noninteractive apt-get install --yes --no-install-recommends docker-registry',
      ],
    );
    assert.equal(m.isInstalled('docker-registry'), true);
  });

  it('when the user may not install (no root, no passwordless sudo), it should stop at once with the exact apt-get line and run nothing', () => {
    const m = machine({ has: [] });
    assert.equal(d.ensurePackages(d.PACKAGES, m), 1);
    assert.deepEqual(m.ran, []);
    assert.ok(
      m.said.includes(
        `  sudo apt-get update && sudo apt-get install --yes --no-install-recommends ${d.PACKAGES.join(' ')}`,
      ),
      m.said.join('\n'),
    );
  });

  it('when apt-get update fails, it should still try the install; when the install fails, it should stop with its code and say what to install', () => {
    const flaky = machine({ has: [], sudo: true, updateStatus: 100 });
    assert.equal(d.ensurePackages(['wrk'], flaky), 0);
    assert.equal(flaky.ran.length, 2);
    assert.match(flaky.said.join('\n'), /update -qq` failed \(exit 100\); trying the install/);
    const broken = machine({ has: [], sudo: true, aptInstalls: false });
    assert.equal(d.ensurePackages(['wrk'], broken), 100);
    assert.match(broken.said.join('\n'), /failed \(exit 100\); install wrk and run this command again/);
  });

  it("when set-up is run with --bench, it should want the benchmarks' packages on top of the ones both commands need", () => {
    assert.deepEqual(d.packagesFor([]), ['ignition', 'docker-registry', 'libjemalloc2']);
    assert.deepEqual(d.packagesFor(['--bench']), ['ignition', 'docker-registry', 'libjemalloc2', 'nginx-light', 'wrk']);
  });
});
