import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { gzipSync } from 'node:zlib';
import { BlockersThread } from './blockers.js';

const MIB = 1024 * 1024;
const payload = (source: string): string =>
  JSON.stringify({
    ignition: { version: '3.4.0' },
    storage: { files: [{ path: '/etc/a', contents: { source, compression: 'gzip' } }] },
  });

describe('BlockersThread', () => {
  it('when a payload is a gzip bomb, it should refuse it on its own thread while the main thread keeps ticking', async () => {
    const member = gzipSync(Buffer.alloc(64 * MIB));
    const bomb = Buffer.concat(Array.from({ length: 11 }, () => member)).toString('base64');
    const inspector = new BlockersThread(64 * MIB);
    let ticks = 0;
    let longest = 0;
    let last = performance.now();
    const timer = setInterval(() => {
      ticks++;
      longest = Math.max(longest, performance.now() - last);
      last = performance.now();
    }, 10);
    try {
      await assert.rejects(inspector.blockers(payload(`data:;base64,${bomb}`)), (err: Error) => {
        assert.match(err.message, /storage\.files\[\/etc\/a\] inflates past the limit of 64 MiB/);
        return true;
      });
    } finally {
      clearInterval(timer);
    }
    assert.ok(ticks > 0 && longest < 250, `the main thread stalled ${Math.round(longest)} ms`);
    assert.deepEqual(await inspector.blockers(payload(`data:;base64,${gzipSync('a').toString('base64')}`)), []);
    await inspector.stop();
  });

  it('when the payload holds what the agent cannot apply in place, it should name it', async () => {
    const inspector = new BlockersThread();
    const got = await inspector.blockers(
      JSON.stringify({ ignition: { version: '3.4.0' }, kernelArguments: { shouldExist: ['quiet'] } }),
    );
    assert.deepEqual(got, ['kernelArguments']);
    await inspector.stop();
  });
});
