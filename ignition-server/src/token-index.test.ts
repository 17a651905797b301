import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type * as k8s from '#k8s';
import { ANNOTATIONS, LABELS, SECRET_KEYS } from '../../api/src/keys.js';
import { NODEPOOL_API_VERSION, NODEPOOL_KIND } from '../../api/src/nodepool.js';
import {
  applyChange,
  joinFor,
  KeysByPool,
  readTokenSecret,
  slimTokenSecret,
  TokenIndex,
  type CachedTokenSecret,
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

const b64 = (text: string): string => Buffer.from(text).toString('base64');
/** Of the form of a minted token (a compact JWS); only the form matters here. */
const JWT = 'eyJhbGciOiJFUzI1NiJ9.eyJwb29sIjoibnMvcCJ9.c2lnbmF0dXJl';
const CA = '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n';
const JOIN = { bootstrapToken: 'abcdef.0123456789abcdef', joinServer: 'https://guest:6443', joinCa: CA };

/** A token Secret as the apiserver holds it once the leader minted: what a tenant may then write over. */
function apiSecret(over: { data?: Record<string, string>; annotations?: Record<string, string> } = {}): k8s.V1Secret {
  const data: Record<string, string> = {
    [SECRET_KEYS.release]: 'quay.io/example/release:1.0',
    [SECRET_KEYS.config]: '[]',
    [SECRET_KEYS.pool]: 'ns/p',
    [SECRET_KEYS.token]: JWT,
    [SECRET_KEYS.bootstrapToken]: JOIN.bootstrapToken,
    [SECRET_KEYS.joinServer]: JOIN.joinServer,
    [SECRET_KEYS.joinCa]: JOIN.joinCa,
    ...over.data,
  };
  return {
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: {
      name: 'token-p-h1',
      namespace: 'ns',
      uid: 'su',
      resourceVersion: '7',
      labels: { [LABELS.tokenSecret]: 'true', [LABELS.nodePool]: 'p', [LABELS.configHash]: 'h1' },
      annotations: { [ANNOTATIONS.tokenIssuedAt]: '2026-11-27T19:00:00Z', ...over.annotations },
      ownerReferences: [{ apiVersion: NODEPOOL_API_VERSION, kind: NODEPOOL_KIND, name: 'p', uid: 'pu' }],
    },
    data: Object.fromEntries(Object.entries(data).map(([k, v]) => [k, b64(v)])),
  };
}

/** The Secret as the informer keeps it, and as the index reads it from there and straight from the apiserver. */
function readBothWays(secret: k8s.V1Secret): { slim: CachedTokenSecret; read?: TokenSecret } {
  const slim = slimTokenSecret(secret);
  const read = readTokenSecret(slim);
  assert.deepEqual(readTokenSecret(secret), read, 'the same whether read from the informer or the apiserver');
  return { slim, read };
}

describe('token Secret bounds', () => {
  it('when a tenant adds data keys, labels, annotations and owners the index does not read, the informer should keep none of them', () => {
    const secret = apiSecret({
      data: { junk: 'x'.repeat(1024 * 1024) },
      annotations: { 'tenant.example/junk': 'x'.repeat(200 * 1024) },
    });
    const meta = secret.metadata as k8s.V1ObjectMeta;
    meta.labels = { ...meta.labels, 'tenant.example/junk': 'x' };
    meta.finalizers = ['tenant.example/junk'];
    meta.managedFields = [{ manager: 'kubectl', operation: 'Update' }];
    meta.ownerReferences = [
      { apiVersion: 'v1', kind: 'ConfigMap', name: 'junk', uid: 'cu' },
      ...(meta.ownerReferences ?? []),
      { apiVersion: NODEPOOL_API_VERSION, kind: NODEPOOL_KIND, name: 'other', uid: 'ou' },
    ];
    const { slim, read } = readBothWays(secret);
    assert.deepEqual(Object.keys(slim.data ?? {}).sort(), [
      'bootstrap-token',
      'join-ca',
      'join-server',
      'pool',
      'release',
      'token',
    ]);
    assert.deepEqual(slim.metadata, {
      name: 'token-p-h1',
      namespace: 'ns',
      uid: 'su',
      resourceVersion: '7',
      labels: { [LABELS.tokenSecret]: 'true', [LABELS.nodePool]: 'p', [LABELS.configHash]: 'h1' },
      annotations: { [ANNOTATIONS.tokenIssuedAt]: '2026-11-27T19:00:00Z' },
      ownerReferences: [{ apiVersion: NODEPOOL_API_VERSION, kind: NODEPOOL_KIND, name: 'p', uid: 'pu' }],
    });
    assert.deepEqual(read?.owner, { name: 'p', uid: 'pu' }, 'the owner the decision reads');
    assert.deepEqual(
      [read?.token, read?.bootstrapToken, read?.joinServer, read?.joinCa],
      [JWT, ...Object.values(JOIN)],
    );
    const metadataOnly = slimTokenSecret({ ...secret, kind: 'PartialObjectMetadata', data: undefined });
    assert.deepEqual(metadataOnly.metadata, slim.metadata, 'a metadata list is slimmed alike');
  });

  it('when join-ca is past 64 KiB, it should be absent: the token still works, with no join files, and no thread holds the CA', () => {
    const { slim, read } = readBothWays(apiSecret({ data: { [SECRET_KEYS.joinCa]: CA.repeat(20_000) } }));
    assert.equal(slim.data?.[SECRET_KEYS.joinCa], undefined, 'the informer does not hold it');
    assert.equal(read?.joinCa, undefined);
    const index = new TokenIndex();
    const copies: IndexChange[] = [];
    index.observe((c) => void copies.push(c));
    index.upsert(read as TokenSecret);
    assert.ok(JSON.stringify(copies).length < 4096, 'what is copied to each serving thread is small');
    assert.equal(joinFor(index.lookup(JWT, 0) as TokenRef), undefined, 'no join files until the leader writes them');
    const bound = readTokenSecret(apiSecret({ data: { [SECRET_KEYS.joinCa]: 'x'.repeat(64 * 1024) } }));
    assert.equal(bound?.joinCa?.length, 64 * 1024, 'a CA of 64 KiB is kept');
  });

  it('when a bootstrap token is not of the form the guest takes, it should be absent, and so should the join files of its token', () => {
    for (const bad of [
      'abcdef.0123456789abcdeF',
      'abcdef.0123456789abcde',
      'abcdef0123456789abcdefg',
      ' abcdef.0123456789abcdef',
    ]) {
      const { slim, read } = readBothWays(
        apiSecret({ data: { [SECRET_KEYS.bootstrapToken]: bad, [SECRET_KEYS.rotatedBootstrapToken]: bad } }),
      );
      assert.equal(slim.data?.[SECRET_KEYS.bootstrapToken], undefined, bad);
      assert.deepEqual([read?.bootstrapToken, read?.rotatedBootstrapToken], [undefined, undefined], bad);
      const index = new TokenIndex();
      index.upsert(read as TokenSecret);
      assert.equal(joinFor(index.lookup(JWT, 0) as TokenRef), undefined, bad);
    }
  });

  it('when join-server is not an https URL or longer than 2 KiB, it should be absent', () => {
    for (const bad of ['http://guest:6443', 'guest:6443', `https://guest/${'x'.repeat(2048)}`]) {
      const { read } = readBothWays(apiSecret({ data: { [SECRET_KEYS.joinServer]: bad } }));
      assert.equal(read?.joinServer, undefined, bad);
    }
  });

  it('when a token is longer than any minted one or not a compact JWS, it should be absent, so that the leader mints another', () => {
    const long = `${JWT}${'A'.repeat(2048)}`;
    for (const bad of [long, 'not a token', `${JWT} `]) {
      const { slim, read } = readBothWays(
        apiSecret({ data: { [SECRET_KEYS.token]: bad, [SECRET_KEYS.rotatedToken]: bad } }),
      );
      assert.equal(slim.data?.[SECRET_KEYS.token], undefined, bad.slice(0, 20));
      assert.ok(read, 'the Secret stays a token Secret');
      assert.deepEqual([read.token, read.rotatedToken], [undefined, undefined], bad.slice(0, 20));
      const index = new TokenIndex();
      index.upsert(read);
      assert.equal(index.liveTokens, 0);
    }
  });

  it('when an annotation the index reads is longer than any its writers write, it should be absent, so that the leader writes its own', () => {
    const { slim, read } = readBothWays(
      apiSecret({
        annotations: {
          [ANNOTATIONS.payloadMessage]: 'x'.repeat(200 * 1024),
          [ANNOTATIONS.ignitionReachedAt]: 'x'.repeat(1024),
          [ANNOTATIONS.payloadReason]: 'AsExpected',
        },
      }),
    );
    assert.deepEqual(Object.keys(slim.metadata?.annotations ?? {}).sort(), [
      ANNOTATIONS.payloadReason,
      ANNOTATIONS.tokenIssuedAt,
    ]);
    assert.deepEqual(
      [read?.payloadMessage, read?.reachedAt, read?.payloadReason],
      [undefined, undefined, 'AsExpected'],
    );
  });

  it('when release is longer than a NodePool may name, it should not be a token Secret', () => {
    const { read } = readBothWays(apiSecret({ data: { [SECRET_KEYS.release]: `quay.io/x:${'1'.repeat(4096)}` } }));
    assert.equal(read, undefined);
  });
});
