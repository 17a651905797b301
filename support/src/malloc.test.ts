import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { allocator, JEMALLOC_LIBRARY, MALLOC_CONF, withJemalloc } from './malloc.js';

describe('allocator', () => {
  it('when the machine has jemalloc, it should preload it with our settings and keep other preloads', () => {
    const env = withJemalloc({ HOME: '/root', LD_PRELOAD: '/opt/x.so' }, true);
    assert.equal(env.LD_PRELOAD, `/opt/x.so:${JEMALLOC_LIBRARY}`);
    assert.equal(env.MALLOC_CONF, MALLOC_CONF);
    assert.equal(env.HOME, '/root');
    assert.equal(withJemalloc(env, true).LD_PRELOAD, env.LD_PRELOAD);
  });

  it('when an operator set MALLOC_CONF, it should keep theirs', () => {
    assert.equal(withJemalloc({ MALLOC_CONF: 'narenas:4' }, true).MALLOC_CONF, 'narenas:4');
  });

  it('when the machine lacks jemalloc, it should leave the environment as it is', () => {
    const env = { HOME: '/root' };
    assert.equal(withJemalloc(env, false), env);
  });

  it('when the library is mapped, it should name jemalloc; else the C library', () => {
    assert.equal(
      allocator(() => `7f00-7f10 r-xp 0 08:01 42 /usr/lib/x86_64-linux-gnu/${JEMALLOC_LIBRARY}\n`),
      'jemalloc',
    );
    assert.equal(
      allocator(() => '7f00-7f10 r-xp 0 08:01 42 /usr/lib/x86_64-linux-gnu/libc.so.6\n'),
      'libc',
    );
    assert.equal(
      allocator(() => {
        throw new Error('no /proc');
      }),
      'libc',
    );
  });

  it('when the image is built, it should install and preload jemalloc with the same settings', () => {
    const dockerfile = readFileSync(new URL('../../../Dockerfile', import.meta.url), 'utf8');
    assert.match(dockerfile, /apt-get install[^\n]*\blibjemalloc2\b/);
    assert.match(
      dockerfile,
      new RegExp(`^ENV LD_PRELOAD=${JEMALLOC_LIBRARY.replace(/\./g, '\\.')} MALLOC_CONF=${MALLOC_CONF}$`, 'm'),
    );
  });
});
