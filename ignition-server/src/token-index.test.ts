import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { TokenIndex, type IndexChange, type TokenSecret } from './token-index.js';

const secret = (name: string, over: Partial<TokenSecret> = {}): TokenSecret => ({
  key: `ns/${name}`,
  namespace: 'ns',
  name,
  uid: name,
  pool: 'ns/p',
  hash: 'h1',
  release: 'r',
  configSha256: 'c',
  inputsHash: 'h',
  token: `token-${name}`,
  resourceVersion: '1',
  ...over,
});

describe('token index', () => {
  it('when a copy follows the index, it should be told of every entry held first, then of every change in order', () => {
    const index = new TokenIndex();
    index.upsert(secret('a'));
    index.markUnloaded({ key: 'ns/b', pool: 'ns/p', hash: 'h2' });
    const changes: IndexChange[] = [];
    index.observe((c) => void changes.push(c));
    assert.deepEqual(
      changes.map((c) => c.type),
      ['unloaded', 'upsert'],
    );
    const copy = new TokenIndex();
    const apply = (c: IndexChange): void => {
      if (c.type === 'upsert') copy.upsert(c.secret, c.payload);
      else if (c.type === 'remove') copy.remove(c.key);
      else if (c.type === 'unloaded') copy.markUnloaded(c);
      else copy.setPayload(copy.get(c.key) as NonNullable<ReturnType<TokenIndex['get']>>, c.payload);
    };
    changes.forEach(apply);
    index.observe(apply);
    index.setPayload(index.get('ns/a') as NonNullable<ReturnType<TokenIndex['get']>>, { state: 'ready', key: 'k' });
    index.upsert(secret('b', { hash: 'h2' }));
    index.remove('ns/a');
    assert.equal(copy.find('token-a', 0), undefined, 'removed on the copy too');
    assert.equal(copy.find('token-b', 0)?.secret.key, 'ns/b');
    assert.deepEqual(copy.unloadedFor('ns/p', 'h2'), [], 'loaded since');
  });

  it('when a Secret is known by metadata only, it should be found by pool and hash until its data is indexed, and never by a token', () => {
    const index = new TokenIndex();
    index.markUnloaded({ key: 'ns/a', pool: 'ns/p', hash: 'h1' });
    index.markUnloaded({ key: 'ns/b', pool: 'ns/p', hash: 'h1' });
    assert.deepEqual(index.unloadedFor('ns/p', 'h1').sort(), ['ns/a', 'ns/b']);
    assert.deepEqual(index.unloadedFor('ns/p', 'h2'), []);
    assert.equal(index.find('token-a', 0), undefined);
    assert.equal(index.liveTokens, 0);
    index.upsert(secret('a'));
    assert.deepEqual(index.unloadedFor('ns/p', 'h1'), ['ns/b']);
    assert.equal(index.isUnloaded('ns/a'), false);
    index.remove('ns/b');
    assert.deepEqual(index.unloadedFor('ns/p', 'h1'), []);
    index.markUnloaded({ key: 'ns/a', pool: 'ns/p', hash: 'h1' });
    assert.equal(index.find('token-a', 0)?.secret.key, 'ns/a', 'a Secret known with its data stays so');
  });

  it('when a second Secret carries the same token, it should not take the token over, and removing it should leave the first working', () => {
    const index = new TokenIndex();
    index.upsert(secret('victim', { token: 'shared' }));
    index.upsert(secret('planted', { namespace: 'other', key: 'other/planted', pool: 'other/p', token: 'shared' }));
    assert.equal(index.find('shared', 0)?.secret.key, 'ns/victim', 'the first holder keeps it');
    index.upsert(
      secret('planted', {
        namespace: 'other',
        key: 'other/planted',
        pool: 'other/p',
        token: 'shared',
        resourceVersion: '2',
      }),
    );
    assert.equal(index.find('shared', 0)?.secret.key, 'ns/victim', 'an update of the copy does not take it either');
    index.remove('other/planted');
    assert.equal(index.find('shared', 0)?.secret.key, 'ns/victim', 'nor does its removal drop it');
  });
});
