import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type * as k8s from '#k8s';
import { OverlayCache, type CacheSource } from './store.js';

const secret = (name: string, rv: number, pool = 'a', namespace = 'ns'): k8s.V1Secret => ({
  metadata: { name, namespace, resourceVersion: String(rv), labels: { pool } },
});

/** An informer's view that the test moves by hand. */
function source(
  ...objs: k8s.V1Secret[]
): CacheSource<k8s.V1Secret> & { set: (o: k8s.V1Secret) => void; drop: (name: string) => void } {
  const byName = new Map(objs.map((o) => [o.metadata?.name ?? '', o]));
  return {
    get: ({ name }) => byName.get(name),
    list: (namespace) =>
      [...byName.values()].filter(
        (o) => namespace === undefined || namespace === '' || o.metadata?.namespace === namespace,
      ),
    set: (o) => void byName.set(o.metadata?.name ?? '', o),
    drop: (name) => void byName.delete(name),
  };
}

const names = (objs: k8s.V1Secret[]): string[] => objs.map((o) => o.metadata?.name ?? '').sort();
const ofPool =
  (pool: string) =>
  (o: k8s.V1Secret): boolean =>
    o.metadata?.labels?.pool === pool;

describe('OverlayCache', () => {
  it('when a write is newer than the informer, it should list and get the written object until the informer catches up', () => {
    const src = source(secret('s1', 5), secret('s2', 5, 'b'));
    const cache = new OverlayCache(src);
    cache.remember(secret('s3', 7));
    cache.remember({ ...secret('s1', 8), data: { k: 'new' } });
    assert.deepEqual(names(cache.list('ns', ofPool('a'))), ['s1', 's3']);
    assert.deepEqual(cache.get({ namespace: 'ns', name: 's1' })?.data, { k: 'new' });
    src.set(secret('s1', 9));
    assert.equal(
      cache.get({ namespace: 'ns', name: 's1' })?.metadata?.resourceVersion,
      '9',
      'the informer caught up: its object wins',
    );
  });

  it("when a written object no longer passes the filter, it should leave it out although the informer's copy passes", () => {
    const cache = new OverlayCache(source(secret('s1', 5, 'a')));
    cache.remember(secret('s1', 6, 'b'));
    assert.deepEqual(names(cache.list('ns', ofPool('a'))), []);
    assert.deepEqual(names(cache.list('ns', ofPool('b'))), ['s1']);
  });

  it('when an object was deleted, it should hide it until the informer drops it', () => {
    const src = source(secret('s1', 5), secret('s2', 5));
    const cache = new OverlayCache(src);
    cache.rememberDeleted(secret('s1', 5));
    assert.deepEqual(names(cache.list('ns', ofPool('a'))), ['s2']);
    assert.equal(cache.get({ namespace: 'ns', name: 's1' }), undefined);
    src.drop('s1');
    src.set(secret('s1', 9));
    assert.deepEqual(names(cache.list('ns', ofPool('a'))), ['s1', 's2'], 'recreated later: the newer object shows');
  });

  it('when writes are in another namespace, it should not list them', () => {
    const cache = new OverlayCache(source(secret('s1', 5)));
    cache.remember(secret('s9', 6, 'a', 'other'));
    assert.deepEqual(names(cache.list('ns', ofPool('a'))), ['s1']);
    assert.deepEqual(names(cache.list('other', ofPool('a'))), ['s9']);
  });

  it("when the source indexes the pool label, it should read only that pool's objects and still overlay the writes", () => {
    const src = source(secret('s1', 5), secret('s2', 5, 'b'));
    let indexedReads = 0;
    const indexed: CacheSource<k8s.V1Secret> = {
      ...src,
      list: () => assert.fail('an indexed list must not scan the namespace'),
      listIndexed: (value, namespace) => {
        indexedReads++;
        return src.list(namespace).filter(ofPool(value));
      },
    };
    const cache = new OverlayCache(indexed);
    cache.remember(secret('s3', 7));
    cache.remember(secret('s2', 8, 'a'));
    assert.deepEqual(names(cache.list('ns', ofPool('a'), 'a')), ['s1', 's2', 's3']);
    assert.equal(indexedReads, 1);
  });
});
