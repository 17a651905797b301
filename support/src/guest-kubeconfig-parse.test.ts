import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { stringify } from 'yaml';
import {
  GuestKubeconfigRefusedError,
  GUEST_KUBECONFIG_REFUSED,
  guestKubeConfig,
  parseGuestKubeconfig,
} from './guest-kubeconfig-parse.js';

const CA = Buffer.from('-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n').toString('base64');
const CERT = Buffer.from('client cert').toString('base64');
const KEY = Buffer.from('client key').toString('base64');

type Fields = Record<string, unknown>;

/** A kubeconfig as CAPI writes it (one cluster, user and context), with extra or replaced fields. */
function kubeconfig(opts: { top?: Fields; cluster?: Fields; user?: Fields; context?: Fields } = {}): string {
  return stringify({
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [
      {
        name: 'guest',
        cluster: { server: 'https://10.0.0.1:6443', 'certificate-authority-data': CA, ...opts.cluster },
      },
    ],
    users: [{ name: 'guest-admin', user: { token: 'abc.def', ...opts.user } }],
    contexts: [{ name: 'guest', context: { cluster: 'guest', user: 'guest-admin', ...opts.context } }],
    'current-context': 'guest',
    preferences: {},
    ...opts.top,
  });
}

const refusal = (yaml: string): GuestKubeconfigRefusedError => {
  try {
    parseGuestKubeconfig(yaml);
  } catch (err) {
    assert.ok(err instanceof GuestKubeconfigRefusedError, String(err));
    return err;
  }
  assert.fail('the kubeconfig was accepted');
};

describe('parseGuestKubeconfig', () => {
  const accepted: [string, string, object][] = [
    ['a token', kubeconfig(), { server: 'https://10.0.0.1:6443', caData: CA, token: 'abc.def' }],
    [
      'a client certificate and key',
      kubeconfig({ user: { token: undefined, 'client-certificate-data': CERT, 'client-key-data': KEY } }),
      { server: 'https://10.0.0.1:6443', caData: CA, certData: CERT, keyData: KEY },
    ],
    [
      'a tls-server-name and a trailing slash on the server',
      kubeconfig({ cluster: { server: 'https://10.0.0.1:6443/', 'tls-server-name': 'kubernetes.default' } }),
      { server: 'https://10.0.0.1:6443', caData: CA, tlsServerName: 'kubernetes.default', token: 'abc.def' },
    ],
    [
      'a context namespace',
      kubeconfig({ context: { namespace: 'kube-system' } }),
      { server: 'https://10.0.0.1:6443', caData: CA, token: 'abc.def' },
    ],
  ];
  for (const [what, yaml, want] of accepted) {
    it(`when the kubeconfig holds ${what}, it should accept it with exactly those values`, () => {
      const got = Object.fromEntries(Object.entries(parseGuestKubeconfig(yaml)).filter(([, v]) => v !== undefined));
      assert.deepEqual(got, want);
    });
  }

  const FILE = /names a file of the reading machine/;
  const refused: [string, string, string, RegExp][] = [
    [
      'an exec plugin',
      kubeconfig({ user: { exec: { apiVersion: 'client.authentication.k8s.io/v1', command: '/bin/sh' } } }),
      'users[0].user.exec',
      /would run a command/,
    ],
    [
      'an auth-provider',
      kubeconfig({ user: { 'auth-provider': { name: 'oidc', config: {} } } }),
      'users[0].user.auth-provider',
      /authentication plugin/,
    ],
    ['a token-file', kubeconfig({ user: { 'token-file': '/etc/passwd' } }), 'users[0].user.token-file', FILE],
    ['a tokenFile', kubeconfig({ user: { tokenFile: '/etc/passwd' } }), 'users[0].user.tokenFile', FILE],
    [
      'a client-certificate path',
      kubeconfig({ user: { 'client-certificate': '/tmp/c' } }),
      'users[0].user.client-certificate',
      FILE,
    ],
    ['a client-key path', kubeconfig({ user: { 'client-key': '/tmp/k' } }), 'users[0].user.client-key', FILE],
    [
      'a certificate-authority path',
      kubeconfig({ cluster: { 'certificate-authority': '/tmp/ca' } }),
      'clusters[0].cluster.certificate-authority',
      FILE,
    ],
    [
      'another *-file field',
      kubeconfig({ cluster: { 'server-file': '/tmp/s' } }),
      'clusters[0].cluster.server-file',
      FILE,
    ],
    [
      'a proxy-url',
      kubeconfig({ cluster: { 'proxy-url': 'http://10.0.0.9:3128' } }),
      'clusters[0].cluster.proxy-url',
      /another host/,
    ],
    [
      'insecure-skip-tls-verify',
      kubeconfig({ cluster: { 'insecure-skip-tls-verify': true } }),
      'clusters[0].cluster.insecure-skip-tls-verify',
      /check of the server's certificate/,
    ],
    ['a username', kubeconfig({ user: { username: 'admin' } }), 'users[0].user.username', /basic authentication/],
    ['a password', kubeconfig({ user: { password: 'pw' } }), 'users[0].user.password', /basic authentication/],
    ['an impersonated user', kubeconfig({ user: { as: 'system:admin' } }), 'users[0].user.as', /impersonation/],
    [
      'impersonated groups',
      kubeconfig({ user: { 'as-groups': ['system:masters'] } }),
      'users[0].user.as-groups',
      /impersonation/,
    ],
    [
      'an impersonate field',
      kubeconfig({ user: { impersonate: 'system:admin' } }),
      'users[0].user.impersonate',
      /impersonation/,
    ],
    [
      'an unknown user field',
      kubeconfig({ user: { extensions: [] } }),
      'users[0].user.extensions',
      /not a field Kindling accepts here \(only token, client-certificate-data, client-key-data\)/,
    ],
    [
      'an unknown cluster field',
      kubeconfig({ cluster: { 'disable-compression': true } }),
      'clusters[0].cluster.disable-compression',
      /not a field/,
    ],
    ['an unknown top-level field', kubeconfig({ top: { extensions: [] } }), 'extensions', /not a field/],
    [
      'an exec plugin on a user the current context does not use',
      kubeconfig({
        top: {
          users: [
            { name: 'guest-admin', user: { token: 't' } },
            { name: 'x', user: { exec: {} } },
          ],
        },
      }),
      'users[1].user.exec',
      /would run a command/,
    ],
    [
      'an http server',
      kubeconfig({ cluster: { server: 'http://10.0.0.1:6443' } }),
      'clusters[0].cluster.server',
      /not an https URL/,
    ],
    [
      'credentials in the server URL',
      kubeconfig({ cluster: { server: 'https://u:p@10.0.0.1:6443' } }),
      'clusters[0].cluster.server',
      /credentials/,
    ],
    ['no server', kubeconfig({ cluster: { server: undefined } }), 'clusters[0].cluster.server', /is missing/],
    [
      'a token with a line break',
      kubeconfig({ user: { token: 'a\r\nX-Evil: 1' } }),
      'users[0].user.token',
      /characters a bearer token cannot/,
    ],
    [
      'a client certificate without its key',
      kubeconfig({ user: { 'client-certificate-data': CERT } }),
      'users[0].user',
      /only one of/,
    ],
    [
      'a current-context naming no context',
      kubeconfig({ top: { 'current-context': 'other' } }),
      'current-context',
      /names no entry/,
    ],
    [
      'a context naming no cluster',
      kubeconfig({ context: { cluster: 'other' } }),
      'contexts[0].context.cluster',
      /names no entry/,
    ],
    ['a list that is a mapping', kubeconfig({ top: { users: { a: 1 } } }), 'users', /is not a list/],
  ];
  for (const [what, yaml, field, why] of refused) {
    it(`when the kubeconfig holds ${what}, it should refuse it naming ${field}`, () => {
      const err = refusal(yaml);
      assert.equal(err.field, field);
      assert.equal(err.reason, GUEST_KUBECONFIG_REFUSED);
      assert.match(err.message, why);
      assert.ok(err.message.startsWith(`the guest kubeconfig is refused: ${field} `), err.message);
    });
  }

  it('when a key is repeated to hide a second value, it should refuse the text without quoting it', () => {
    const err = refusal(`${kubeconfig()}current-context: secret-looking-value\n`);
    assert.match(err.message, /is not valid YAML \(DUPLICATE_KEY at line \d+\)/);
    assert.doesNotMatch(err.message, /secret-looking-value/);
  });

  it('when the text is not YAML at all, it should refuse it', () => {
    assert.match(refusal('{').message, /is not valid YAML/);
    assert.match(refusal('just text').message, /the kubeconfig is not a mapping/);
  });
});

describe('guestKubeConfig', () => {
  it('when the kubeconfig is accepted, it should build a client config from the vetted values only', () => {
    const kc = guestKubeConfig(kubeconfig({ cluster: { 'tls-server-name': 'api' } }));
    assert.deepEqual(kc.getCurrentCluster(), {
      name: 'guest',
      server: 'https://10.0.0.1:6443',
      caData: CA,
      tlsServerName: 'api',
      skipTLSVerify: false,
    });
    assert.deepEqual(kc.getCurrentUser(), {
      name: 'guest',
      token: 'abc.def',
      certData: undefined,
      keyData: undefined,
    });
  });
});
