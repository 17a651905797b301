import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { reason } from './boot.js';

describe('reason', () => {
  it("when the client gave up after the server refused it, it should name the server's last answer with its code", () => {
    const output = [
      'INFO     : GET https://127.0.0.1:1/ignition: attempt #1',
      'INFO     : GET result: Unauthorized',
      'CRITICAL : failed to acquire config: failed to fetch resource',
    ].join('\n');
    assert.equal(reason(output), 'failed to acquire config: failed to fetch resource (last answer: 401 Unauthorized)');
  });

  it('when the fetch succeeded and a later step failed, it should give that failure alone', () => {
    assert.equal(
      reason('INFO     : GET result: OK\nERROR    : invalid config: unknown field'),
      'invalid config: unknown field',
    );
  });
});
