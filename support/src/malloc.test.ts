import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { MALLOC_TUNABLES, missingMallocTunables, withMallocTunables } from './malloc.js';

describe('malloc tunables', () => {
  it('when the environment has none, it should add them all', () => {
    assert.equal(withMallocTunables({ HOME: '/root' }).GLIBC_TUNABLES, MALLOC_TUNABLES);
    assert.deepEqual(missingMallocTunables({}), ['glibc.malloc.mmap_threshold', 'glibc.malloc.arena_max']);
  });

  it('when the environment tunes other names or the same ones, it should keep the others and set ours once', () => {
    const env = withMallocTunables({ GLIBC_TUNABLES: 'glibc.pthread.rseq=0:glibc.malloc.arena_max=8' });
    assert.equal(env.GLIBC_TUNABLES, `glibc.pthread.rseq=0:${MALLOC_TUNABLES}`);
    assert.deepEqual(missingMallocTunables(env), []);
  });

  it('when an operator set a value of their own, it should count as set', () => {
    assert.deepEqual(missingMallocTunables({ GLIBC_TUNABLES: 'glibc.malloc.arena_max=4' }), ['glibc.malloc.mmap_threshold']);
  });

  it('when the image is built, it should set the same tunables', () => {
    const dockerfile = readFileSync(new URL('../../../Dockerfile', import.meta.url), 'utf8');
    assert.match(dockerfile, new RegExp(`^ENV GLIBC_TUNABLES=${MALLOC_TUNABLES.replace(/\./g, '\\.')}$`, 'm'));
  });
});
