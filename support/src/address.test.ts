import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { splitAddress } from './address.js';

describe('splitAddress', () => {
  it('when given host:port, :port or a bare port, it should split them', () => {
    assert.deepEqual(splitAddress('127.0.0.1:8080'), ['127.0.0.1', 8080]);
    assert.deepEqual(splitAddress(':9090'), [undefined, 9090]);
    assert.deepEqual(splitAddress('7070'), [undefined, 7070]);
  });
});
