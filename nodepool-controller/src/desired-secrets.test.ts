import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { hashOfUserData } from '../../api/src/keys.js';
import { desiredTokenSecret, desiredUserDataSecret, ignitionStub } from './desired-secrets.js';
import { goldenIn } from '../../support/testing/golden.js';
import { samplePool } from '../../api/testing/nodepool.js';
import { ignitionValidate } from '../testing/ignition-validate.js';

const assertGolden = goldenIn('nodepool-controller/src/testdata');

const CA = '-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n';
const inputs = {
  release: 'registry.local:5000/kindling/release:1.36.3',
  config: '[{"kind":"KubeletConfig","metadata":{"name":"max-pods"}}]',
};
const stubOptions = {
  pool: samplePool(),
  hash: '0123456789abcdef',
  token: 'eyJhbGciOiJFUzI1NiJ9.eyJwb29sIjoidyJ9.c2ln',
  endpoint: 'ignition.kindling.local:9443',
  caPem: CA,
};

describe('desiredTokenSecret', () => {
  it('when a pool is at a hash, it should carry the pool, release and config and the three labels (golden)', () => {
    assertGolden('token-secret.json', desiredTokenSecret(samplePool(), { hash: '0123456789abcdef', inputs }));
  });

  it('when the hash moved on, it should add the expiry annotation and nothing else', () => {
    const fresh = desiredTokenSecret(samplePool(), { hash: 'h', inputs });
    const expiring = desiredTokenSecret(samplePool(), { hash: 'h', inputs, expiresAt: '2026-11-23T10:00:00Z' });
    assert.deepEqual(expiring.metadata?.annotations, { 'kindling.dev/token-expires-at': '2026-11-23T10:00:00Z' });
    assert.deepEqual(
      { ...expiring, metadata: { ...expiring.metadata, annotations: undefined } },
      { ...fresh, metadata: { ...fresh.metadata, annotations: undefined } },
    );
  });

  it('when built, it should never hold a token key: the ignition server owns it', () => {
    assert.deepEqual(Object.keys(desiredTokenSecret(samplePool(), { hash: 'h', inputs }).data ?? {}).sort(), [
      'config',
      'pool',
      'release',
    ]);
  });
});

describe('desiredUserDataSecret', () => {
  it('when given a token, it should hold the Ignition stub as value and format ignition (golden)', () => {
    const secret = desiredUserDataSecret(stubOptions);
    assertGolden('user-data-secret.json', secret);
    assertGolden('ignition-stub.json', JSON.parse(Buffer.from(secret.data?.value ?? '', 'base64').toString()));
    assert.equal(Buffer.from(secret.data?.format ?? '', 'base64').toString(), 'ignition');
  });

  it('when the stub is checked by ignition-validate, it should pass', async () => {
    const result = await ignitionValidate(JSON.stringify(ignitionStub(stubOptions)));
    assert.ok(result.ok, result.output);
  });

  it('when the stub is broken on purpose, ignition-validate should refuse it (the check can fail)', async () => {
    const stub = ignitionStub(stubOptions) as { ignition: { config: { merge: { source: string }[] } } };
    (stub.ignition.config.merge[0] as { source: string }).source = 'https://[bad/ignition';
    assert.equal((await ignitionValidate(JSON.stringify(stub))).ok, false);
  });

  it('when reading a user-data name back, it should give the hash only for this pool', () => {
    assert.equal(hashOfUserData('workers', 'user-data-workers-0123456789abcdef'), '0123456789abcdef');
    assert.equal(hashOfUserData('workers', 'user-data-other-0123456789abcdef'), undefined);
    assert.equal(hashOfUserData('workers', undefined), undefined);
  });
});
