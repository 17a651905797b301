import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { imageRepository } from './registry-tags.js';

describe('the repository of a release image', () => {
  it('when the reference names its registry, with or without docker://, a tag or a digest, it should give host and repository', () => {
    const want = { host: 'registry.local:5000', repository: 'kindling/release' };
    assert.deepEqual(imageRepository('registry.local:5000/kindling/release:1.36.3'), want);
    assert.deepEqual(imageRepository(`docker://registry.local:5000/kindling/release@sha256:${'a'.repeat(64)}`), want);
  });

  it('when the reference is an OCI layout or names no registry, it should refuse it, and read its first name as the host, as the ignition server does', () => {
    assert.throws(() => imageRepository('oci:/releases/layout:1.36.3'), /an OCI layout, not a registry/);
    assert.throws(() => imageRepository('release:1.36'), /names no registry host/);
    assert.deepEqual(imageRepository('kindling/release:1.36'), { host: 'kindling', repository: 'release' });
  });
});
