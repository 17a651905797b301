import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  applyChange,
  joinFor,
  KeysByPool,
  TokenIndex,
  type IndexChange,
  type TokenRef,
  type TokenSecret,
} from './token-index.js';

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
    const apply = (c: IndexChange): void => applyChange(copy, c);
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

  it('when a Secret changes only in its bookkeeping (first-fetch stamp, outcome, resourceVersion), it should not tell a copy, which keeps serving it', () => {
    const index = new TokenIndex();
    const changes: IndexChange[] = [];
    index.observe((c) => void changes.push(c));
    index.upsert(secret('a', { owner: { name: 'p', uid: 'u' } }));
    const stamps = { reachedAt: '2026-11-27T19:00:00Z', payloadReason: 'AsExpected', resourceVersion: '2' };
    index.upsert(secret('a', { owner: { name: 'p', uid: 'u' }, ...stamps }));
    assert.equal(changes.length, 1, 'the stamps alone: no change told');
    assert.equal(index.get('ns/a')?.secret.reachedAt, stamps.reachedAt, 'the index itself holds the stamp');
    index.upsert(secret('a', { owner: { name: 'p', uid: 'u2' }, ...stamps, resourceVersion: '3' }));
    index.upsert(secret('a', { owner: { name: 'p', uid: 'u2' }, ...stamps, token: 'next', resourceVersion: '4' }));
    assert.equal(changes.length, 3, 'another owner, another token: each told');
  });

  it('when a token is verified, a copy should learn its claims; they should outlive updates of its Secret, and a new token should have none', () => {
    const index = new TokenIndex();
    const copy = new TokenIndex();
    index.observe((c) => applyChange(copy, c));
    const join = { bootstrapToken: 'abcdef.0123456789abcdef', joinServer: 'https://g:6443', joinCa: 'CA' };
    index.upsert(secret('a', join));
    const claims = { pool: 'ns/p', hash: 'h1', issuedAtMs: 0, expiresAtMs: 10, id: 'j' };
    index.verified('token-a', claims);
    index.verified('forged', claims);
    assert.equal(copy.lookup('token-a', 0)?.claims, claims);
    assert.equal(copy.lookup('forged', 0), undefined, 'a token no Secret holds gets no slot');
    (copy.lookup('token-a', 0) as TokenRef).entry.served = true;
    const rendered = joinFor(copy.lookup('token-a', 0) as TokenRef);
    copy.upsert(secret('a', { ...join, reachedAt: 'now', resourceVersion: '2' }));
    assert.equal(copy.lookup('token-a', 0)?.claims, claims, 'claims outlive an update');
    assert.equal(joinFor(copy.lookup('token-a', 0) as TokenRef), rendered, 'the join files too, rendered once');
    copy.upsert(secret('a', { ...join, bootstrapToken: 'ghijkl.0123456789abcdef', resourceVersion: '3' }));
    assert.notEqual(joinFor(copy.lookup('token-a', 0) as TokenRef), rendered, 'new join material: rendered again');
    copy.upsert(secret('a', { token: 'token-b', rotatedToken: 'token-a', resourceVersion: '4' }));
    assert.equal(copy.lookup('token-a', 0)?.claims, claims, 'a rotated token keeps its claims');
    assert.equal(copy.lookup('token-b', 0)?.claims, undefined, 'a new token is verified on its own');
  });

  it("when a token's Secret was not served before, it should render its join files without keeping them, and keep them from its second fetch on", () => {
    const index = new TokenIndex();
    index.upsert(
      secret('a', { bootstrapToken: 'abcdef.0123456789abcdef', joinServer: 'https://g:6443', joinCa: 'CA' }),
    );
    const ref = index.lookup('token-a', 0) as TokenRef;
    const first = joinFor(ref);
    assert.ok(first, 'a first fetch gets its join files');
    assert.equal(ref.join, undefined, 'a first fetch keeps nothing: a booting host fetches once');
    ref.entry.served = true;
    const second = joinFor(ref);
    assert.deepEqual(second, first, 'the same files');
    assert.equal(joinFor(ref), second, 'kept from the second fetch on');
  });

  it('when asked for a pool, it should give the entries its label or owner names, and none once relabelled or removed', () => {
    const index = new TokenIndex();
    index.upsert(secret('a'));
    index.upsert(secret('b', { pool: 'ns/q', owner: { name: 'p', uid: 'u' } }));
    index.upsert(secret('c', { pool: 'ns/q' }));
    const keys = (pool: string): string[] =>
      index
        .ofPool('ns', pool)
        .map((e) => e.secret.key)
        .sort();
    assert.deepEqual(keys('p'), ['ns/a', 'ns/b'], 'by label, and by owner');
    assert.deepEqual(keys('q'), ['ns/b', 'ns/c']);
    index.upsert(secret('a', { pool: 'ns/q' }));
    index.remove('ns/b');
    assert.deepEqual(keys('p'), [], 'relabelled and removed');
    assert.deepEqual(keys('q'), ['ns/a', 'ns/c']);
    assert.throws(() => new TokenIndex({ byPool: false }).ofPool('ns', 'p'), /no entries by pool/, 'a served copy');
  });
});

describe('keys by pool', () => {
  it('when a Secret is filed again, it should be under its new pools only, and under none once deleted', () => {
    const byPool = new KeysByPool();
    byPool.set(secret('a', { owner: { name: 'o', uid: 'u' } }));
    assert.deepEqual([byPool.get('ns', 'p'), byPool.get('ns', 'o')], [['ns/a'], ['ns/a']]);
    byPool.set(secret('a', { pool: 'ns/q' }));
    assert.deepEqual([byPool.get('ns', 'p'), byPool.get('ns', 'o'), byPool.get('ns', 'q')], [[], [], ['ns/a']]);
    byPool.delete('ns/a');
    byPool.delete('ns/a');
    assert.deepEqual(byPool.get('ns', 'q'), []);
  });
});
