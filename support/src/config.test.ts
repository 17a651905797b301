import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ConfigError, formatHelp, parseCommandLine, parseConfig, parseDuration, tenantNamespaces } from './config.js';
import { COMPONENT_FLAGS } from './component.js';

const specs = {
  metricsAddress: { type: 'string', default: '127.0.0.1:8080', help: 'Where /metrics listens' },
  workers: { type: 'int', default: 4, help: 'Concurrent reconciles' },
  tokenTtl: { type: 'duration', default: 39_600_000, help: 'Token lifetime' },
  leaderElect: { type: 'bool', default: true, help: 'Use leader election' },
  zones: { type: 'list', default: [] as string[], help: 'Zones' },
} as const;

describe('parseConfig', () => {
  it('when nothing is given, it should return the defaults, frozen', () => {
    const cfg = parseConfig(specs, [], {});
    assert.deepEqual(
      { ...cfg },
      { metricsAddress: '127.0.0.1:8080', workers: 4, tokenTtl: 39_600_000, leaderElect: true, zones: [] },
    );
    assert.ok(Object.isFrozen(cfg));
  });

  it('when flags and environment both set a value, it should prefer the flag', () => {
    const cfg = parseConfig(specs, ['--workers=8', '--token-ttl', '30m', '--leader-elect=false'], {
      KINDLING_WORKERS: '2',
      KINDLING_ZONES: 'a, b',
    });
    assert.equal(cfg.workers, 8);
    assert.equal(cfg.tokenTtl, 1_800_000);
    assert.equal(cfg.leaderElect, false);
    assert.deepEqual(cfg.zones, ['a', 'b']);
  });

  it('when a flag is unknown or malformed, it should refuse it with a message naming the flag', () => {
    assert.throws(
      () => parseConfig(specs, ['--wrokers=2'], {}),
      (e: Error) => e instanceof ConfigError && /unknown flag "--wrokers=2"/.test(e.message),
    );
    assert.throws(() => parseConfig(specs, ['--workers=many'], {}), /--workers: "many" is not an integer/);
    assert.throws(() => parseConfig(specs, ['--token-ttl=soon'], {}), /--token-ttl: "soon" is not a duration/);
    assert.throws(() => parseConfig(specs, ['--workers'], {}), /--workers needs a value/);
  });

  it('when a component is given a positional argument, it should refuse it as an unknown flag', () => {
    assert.throws(() => parseConfig(specs, ['--workers=2', 'extra'], {}), /unknown flag "extra"/);
  });

  it('when a command line has one-letter aliases, a repeated list flag and positional arguments, it should read each', () => {
    const line = { flags: specs, short: { w: 'workers', z: 'zones' } };
    const argv = ['-w', '8', 'ns/p', '--zones', 'a', '-z', 'b,c', '--leader-elect', '--zones=d', 'more'];
    const { config, args } = parseCommandLine(line, argv, { KINDLING_ZONES: 'x' });
    assert.equal(config.workers, 8);
    assert.equal(config.leaderElect, true);
    assert.deepEqual(config.zones, ['a', 'b', 'c', 'd']);
    assert.deepEqual(args, ['ns/p', 'more']);
  });

  it('when help is formatted, it should document every flag with its default and environment variable', () => {
    const help = formatHelp('kindling x [flags]', 'Does x.', specs);
    for (const line of [
      '--metrics-address <string>',
      'default: "127.0.0.1:8080"',
      'env: KINDLING_TOKEN_TTL',
      'default: "11h"',
      '--leader-elect\n',
    ]) {
      assert.ok(help.includes(line), `help lacks ${line}:\n${help}`);
    }
  });
});

describe('parseDuration', () => {
  it('when given Go-style durations, it should return milliseconds', () => {
    assert.equal(parseDuration('1h30m'), 5_400_000);
    assert.equal(parseDuration('250ms'), 250);
    assert.equal(parseDuration('1.5s'), 1500);
  });

  it('when given trailing garbage, it should refuse it', () => {
    assert.throws(() => parseDuration('10m later'), ConfigError);
  });
});

describe('tenantNamespaces (--namespaces of every component)', () => {
  it('when namespaces are listed, it should keep each once, trimmed, in order', () => {
    assert.deepEqual(tenantNamespaces(['tenants', ' shop ', 'tenants']), ['tenants', 'shop']);
  });

  it('when "*" is said alone, it should serve every namespace; combined with names, it should refuse', () => {
    assert.equal(tenantNamespaces(['*']), 'all');
    assert.throws(() => tenantNamespaces(['*', 'tenants']), /cannot be combined with names/);
  });

  it('when nothing is listed, it should refuse and say what to give, never default to every namespace', () => {
    for (const names of [[], [''], [' ']])
      assert.throws(
        () => tenantNamespaces(names),
        (err: Error) => {
          assert.ok(err instanceof ConfigError);
          assert.match(err.message, /--namespaces is required/);
          return true;
        },
      );
  });

  it('when a name is not a namespace name, it should refuse and name it', () => {
    for (const bad of ['Tenants', 'a/b', '-a', 'a'.repeat(64), 'kube system'])
      assert.throws(
        () => tenantNamespaces([bad]),
        (err: Error) => err instanceof ConfigError && err.message.includes(bad),
      );
  });

  it('when given on the command line or as KINDLING_NAMESPACES, it should be one shared flag of every component', () => {
    assert.deepEqual(parseConfig(COMPONENT_FLAGS, ['--namespaces=a,b'], {}).namespaces, ['a', 'b']);
    assert.deepEqual(parseConfig(COMPONENT_FLAGS, [], { KINDLING_NAMESPACES: 'tenants' }).namespaces, ['tenants']);
  });
});
