import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { neverReachedServer } from './errors.js';

describe('neverReachedServer', () => {
  it('when the connection was refused or the name did not resolve, anywhere in the cause chain, it should say the request never reached the server', () => {
    for (const code of ['ECONNREFUSED', 'ENOTFOUND']) {
      const fetchFailed = new TypeError('fetch failed', { cause: Object.assign(new Error('connect'), { code }) });
      assert.equal(neverReachedServer(new Error('failed to patch', { cause: fetchFailed })), true, code);
    }
  });

  it('when the connection was reset, timed out or answered, it should not: the server may have acted', () => {
    for (const code of ['ECONNRESET', 'UND_ERR_SOCKET', 'ETIMEDOUT', 500, 409])
      assert.equal(neverReachedServer(new Error('failed', { cause: Object.assign(new Error('x'), { code }) })), false);
    assert.equal(neverReachedServer(new DOMException('timed out', 'TimeoutError')), false);
  });
});
