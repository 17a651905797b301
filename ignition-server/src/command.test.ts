import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ConfigError } from '../../support/src/config.js';
import { main } from '../../cli/src/main.js';
import type { Logger } from '../../support/src/logger.js';
import { ignitionServerCommand, releasePolicy, warnAtStart, watchedNamespaces } from './command.js';

const FILES = [
  '--tls-cert-file',
  '/nonexistent/tls.crt',
  '--tls-key-file',
  '/nonexistent/tls.key',
  '--signing-key-file',
  '/nonexistent/key.pem',
];

async function run(
  args: string[],
  node?: { execArgv: string[]; restart: (flags: string[]) => number },
): Promise<{ code: number; err: string }> {
  let err = '';
  const code = await main(
    ['ignition-server', ...FILES, ...args],
    { out: () => undefined, err: (t) => void (err += t), env: {}, node },
    [ignitionServerCommand],
  );
  return { code, err };
}

describe('ignition-server flags', () => {
  it('when no namespace is given, it should refuse to start (exit 2) and name --namespaces, before touching any file or apiserver', async () => {
    const { code, err } = await run([]);
    assert.equal(code, 2);
    assert.match(err, /--namespaces is required/);
  });

  it('when namespaces are listed, it should watch exactly those, with --namespace adding one (the older spelling)', () => {
    assert.deepEqual(watchedNamespaces({ namespaces: ['tenants', ' clusters ', 'tenants'], namespace: '' }), [
      'tenants',
      'clusters',
    ]);
    assert.deepEqual(watchedNamespaces({ namespaces: [], namespace: 'clusters' }), ['clusters']);
    assert.deepEqual(watchedNamespaces({ namespaces: ['a'], namespace: 'b' }), ['a', 'b']);
  });

  it('when "*" is given, it should watch every namespace, and only when "*" stands alone', () => {
    assert.equal(watchedNamespaces({ namespaces: ['*'], namespace: '' }), 'all');
    assert.throws(() => watchedNamespaces({ namespaces: ['*', 'tenants'], namespace: '' }), ConfigError);
  });

  it('when a listed name is not a namespace name, it should refuse it', () => {
    for (const bad of ['Tenants', 'a/b', '-x', 'x'.repeat(64)])
      assert.throws(() => watchedNamespaces({ namespaces: [bad], namespace: '' }), ConfigError, bad);
  });

  it('when the memory saver is turned off, it should start without restarting and accept the flag; a deployment still passing --favour-memory should start too', async () => {
    const restarts: string[][] = [];
    const node = { execArgv: [], restart: (flags: string[]) => (restarts.push(flags), 0) };
    for (const args of [['--memory-saver=false'], ['--memory-saver=false', '--favour-memory=false']]) {
      const { code, err } = await run(args, node);
      assert.equal(code, 2);
      assert.match(err, /--namespaces is required/, 'the flags were read, and only the missing namespace refused');
    }
    assert.deepEqual(restarts, []);
    const restarted = { execArgv: ['--memory-saver-mode', '--no-memory-reducer'], restart: node.restart };
    assert.match((await run(['--favour-memory'], restarted)).err, /--namespaces is required/);
    assert.deepEqual(restarts, []);
  });

  it('when --favour-memory is given false, it should warn that it has no effect and name --memory-saver', () => {
    const warnings: string[] = [];
    const log = { warn: (...a: unknown[]) => void warnings.push(String(a.at(-1))) } as unknown as Logger;
    const deprecation = /favour-memory.*deprecated and has no effect.*--memory-saver=false/;
    warnAtStart({ favourMemory: true }, log);
    assert.equal(warnings.filter((w) => deprecation.test(w)).length, 0);
    warnAtStart({ favourMemory: false }, log);
    assert.equal(warnings.filter((w) => deprecation.test(w)).length, 1);
  });

  it('when the registry list is malformed, it should refuse to start (exit 2) naming the flag', async () => {
    const { code, err } = await run(['--namespaces', 'tenants', '--allowed-registries', 'https://quay.io']);
    assert.equal(code, 2);
    assert.match(err, /--allowed-registries: "https:\/\/quay.io" is not a registry host/);
  });

  it('when no release flag is given, the policy should allow nothing: no local layout, no registry', () => {
    const policy = releasePolicy({ allowedRegistries: [], allowLocalReleases: false });
    assert.equal(policy.allowLocal, false);
    assert.deepEqual(policy.registries, new Set());
    assert.ok(Object.isFrozen(policy));
  });
});
