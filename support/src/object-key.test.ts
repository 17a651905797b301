import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { keyOf, keyString, parseKey } from './object-key.js';

describe('object keys', () => {
  it('when a key is written and read back, it should give the same namespace and name', () => {
    const key = { namespace: 'tenant-a', name: 'inplace' };
    assert.equal(keyString(key), 'tenant-a/inplace');
    assert.deepEqual(parseKey(keyString(key)), key);
  });

  it('when the string has no namespace, it should be a cluster-scoped name', () => {
    assert.deepEqual(parseKey('node-1'), { namespace: '', name: 'node-1' });
  });

  it('when an object has metadata, it should key it by its namespace and name', () => {
    assert.deepEqual(keyOf({ metadata: { namespace: 'ns', name: 'n' } }), { namespace: 'ns', name: 'n' });
    assert.deepEqual(keyOf({}), { namespace: '', name: '' });
  });
});
