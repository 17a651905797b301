import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ConfigError } from '../../../support/src/config.js';
import { admitRelease, parseAllowedRegistries, ReleaseRefusedError, type ReleasePolicy } from './policy.js';
import { InvalidReleaseError } from './types.js';

const DIGEST = `sha256:${'a'.repeat(64)}`;
const policy = (registries: string[], allowLocal = false): ReleasePolicy => ({
  allowLocal,
  registries: parseAllowedRegistries(registries),
});

describe('release policy', () => {
  it('when no registry is listed and local releases are not allowed, it should refuse every reference', () => {
    const none = policy([]);
    for (const ref of [
      'quay.io/k/release:4.18',
      `docker://127.0.0.1:5000/r@${DIGEST}`,
      '10.0.0.1/x/y',
      'oci:/srv/layout:v1',
      'oci-archive:/etc/passwd',
    ]) {
      assert.throws(() => admitRelease(ref, none), ReleaseRefusedError, ref);
    }
  });

  it('when registries are listed, it should admit exactly those hosts (port included, case aside) and name the refused host', () => {
    const listed = policy(['quay.io', '127.0.0.1:5000', 'Registry.Example:8443']);
    for (const ref of [
      'quay.io/k/release:4.18',
      `docker://127.0.0.1:5000/r@${DIGEST}`,
      'registry.example:8443/k/r',
      'REGISTRY.example:8443/k/r',
    ])
      admitRelease(ref, listed);
    for (const [ref, host] of [
      ['quay.io:443/k/r', 'quay.io:443'],
      ['127.0.0.1:5001/r', '127.0.0.1:5001'],
      ['169.254.169.254/latest/meta-data', '169.254.169.254'],
      ['evil.quay.io/k/r', 'evil.quay.io'],
    ]) {
      assert.throws(
        () => admitRelease(ref as string, listed),
        (err: Error) => err instanceof ReleaseRefusedError && err.message.includes(`registry ${host} is not in`),
        ref,
      );
    }
  });

  it('when local releases are allowed, it should admit oci: and oci-archive: and still check registries', () => {
    const local = policy([], true);
    admitRelease('oci:/srv/layout:v1', local);
    admitRelease(`oci-archive:/srv/r.tar@${DIGEST}`, local);
    assert.throws(() => admitRelease('quay.io/k/r', local), ReleaseRefusedError);
    assert.throws(() => admitRelease('oci:/srv/layout', policy(['*'])), /--allow-local-releases/);
  });

  it('when "*" is given, it should admit any registry, and refuse "*" mixed with hosts', () => {
    assert.equal(parseAllowedRegistries(['*']), 'any');
    admitRelease('anything.example:1234/k/r:v1', policy(['*']));
    assert.throws(() => parseAllowedRegistries(['*', 'quay.io']), ConfigError);
  });

  it('when an entry is not a host[:port], it should refuse the flag at start', () => {
    for (const bad of ['https://quay.io', 'quay.io/k', 'quay.io:', 'quay .io', '-quay.io'])
      assert.throws(() => parseAllowedRegistries([bad]), ConfigError, bad);
    assert.deepEqual(
      [...(parseAllowedRegistries(['quay.io', ' ', '[::1]:5000']) as Set<string>)],
      ['quay.io', '[::1]:5000'],
    );
  });

  it('when a refused reference reaches the store, it should be an invalid release (a terminal InvalidConfig, not a retry)', () => {
    assert.throws(() => admitRelease('oci:/x', policy([])), InvalidReleaseError);
    assert.throws(() => admitRelease('not a reference', policy(['*'])), InvalidReleaseError);
  });
});
