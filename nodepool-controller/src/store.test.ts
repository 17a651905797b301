import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type * as k8s from '#k8s';
import type { NodePool } from '../../api/src/nodepool.js';
import { Caches } from './caches.js';
import { OverlayCache, caughtUp, type CacheSource } from './store.js';

const secret = (name: string, rv: number, pool = 'a', namespace = 'ns'): k8s.V1Secret => ({
  metadata: { name, namespace, resourceVersion: String(rv), labels: { pool } },
});

/** An informer's view that the test moves by hand. */
function source<T extends k8s.KubernetesObject = k8s.V1Secret>(
  ...objs: T[]
): CacheSource<T> & { set: (o: T) => void; drop: (name: string) => void } {
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

/** The source with an index of the `pool` label, as the informers keep one of LABELS.nodePool. */
const indexed = (src: CacheSource<k8s.V1Secret>): CacheSource<k8s.V1Secret> => ({
  ...src,
  listIndexed: (value, namespace) => src.list(namespace).filter(ofPool(value)),
});

/** What an informer does on a watch event: applies it to its cache, then hands it on. */
function deliver(
  src: ReturnType<typeof source>,
  cache: OverlayCache<k8s.V1Secret>,
  [obj, event]: [k8s.V1Secret, 'add' | 'update' | 'delete'],
): void {
  if (event === 'delete') src.drop(obj.metadata?.name ?? '');
  else src.set(obj);
  cache.observe(obj, event);
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

  it('when someone else deletes an object we wrote, it should read it as absent once its delete arrives', () => {
    const src = source(secret('s1', 5), secret('s2', 5));
    const cache = new OverlayCache(indexed(src));
    cache.remember(secret('s1', 8));
    deliver(src, cache, [secret('s1', 8), 'update']);
    cache.remember(secret('s1', 11));
    deliver(src, cache, [secret('s1', 12), 'delete']);
    assert.equal(cache.get({ namespace: 'ns', name: 's1' }), undefined);
    assert.deepEqual(names(cache.list('ns', ofPool('a'))), ['s2']);
    assert.deepEqual(names(cache.list('ns', ofPool('a'), 'a')), ['s2']);
    assert.equal(cache.pending, 0);
  });

  it("when a write's echo has not arrived, it should still serve the write although older events arrive", () => {
    const src = source(secret('s2', 5));
    const cache = new OverlayCache(src);
    cache.remember(secret('s1', 8));
    deliver(src, cache, [secret('s2', 7), 'update']);
    deliver(src, cache, [secret('s3', 7), 'delete']);
    assert.equal(cache.get({ namespace: 'ns', name: 's1' })?.metadata?.resourceVersion, '8');
    assert.deepEqual(names(cache.list('ns', ofPool('a'))), ['s1', 's2']);
    assert.equal(cache.pending, 1);
    deliver(src, cache, [secret('s1', 8), 'add']);
    assert.equal(cache.pending, 0, 'the echo settles the write without a read');
  });

  it('when events of another namespace move past a write, it should still serve the write', () => {
    const src = source<k8s.V1Secret>();
    const cache = new OverlayCache(src);
    cache.remember(secret('s1', 8));
    deliver(src, cache, [secret('s9', 20, 'a', 'other'), 'add']);
    assert.equal(cache.get({ namespace: 'ns', name: 's1' })?.metadata?.resourceVersion, '8');
  });

  it('when the informer moved past a write it does not hold (a delete missed in a relist), it should forget it', () => {
    const src = source(secret('s2', 5));
    const cache = new OverlayCache(src);
    cache.remember(secret('s1', 8));
    src.set(secret('s2', 10));
    cache.observe(secret('s2', 10), 'resync');
    assert.equal(cache.pending, 0);
    assert.equal(cache.get({ namespace: 'ns', name: 's1' }), undefined);
  });

  it('when the delete arrives before the answer to the write, it should not remember the write', () => {
    const src = source(secret('s1', 5));
    const cache = new OverlayCache(src);
    deliver(src, cache, [secret('s1', 9), 'delete']);
    cache.remember(secret('s1', 8));
    assert.equal(cache.pending, 0);
    assert.equal(cache.get({ namespace: 'ns', name: 's1' }), undefined);
  });

  it('when resourceVersions are no numbers, it should forget a write only on its own delete', () => {
    const opaque = (name: string): k8s.V1Secret => ({ metadata: { name, namespace: 'ns', resourceVersion: 'x' } });
    const src = source<k8s.V1Secret>();
    const cache = new OverlayCache(src);
    cache.remember(opaque('s1'));
    deliver(src, cache, [opaque('s2'), 'delete']);
    assert.equal(cache.pending, 1);
    deliver(src, cache, [opaque('s1'), 'delete']);
    assert.equal(cache.pending, 0);
  });

  it('when pools are created and deleted in a loop, it should list none of them and remember nothing', () => {
    const pool = (name: string, rv: number): NodePool =>
      ({ metadata: { name, namespace: 'ns', resourceVersion: String(rv) } }) as NodePool;
    const pools = source<NodePool>();
    const empty = source<never>();
    const caches = new Caches({
      nodePools: pools,
      configMaps: empty,
      secrets: empty,
      machineSets: empty,
      machineDeployments: empty,
      healthChecks: empty,
      machines: empty,
    });
    for (let i = 0; i < 100; i++) {
      pools.set(pool(`p${i}`, 10 * i));
      caches.observe('nodePools', pool(`p${i}`, 10 * i), 'add');
      // The finalizer's removal is the last write; its answer can come before or after the delete's event.
      if (i % 2 === 0) caches.nodePools.remember(pool(`p${i}`, 10 * i + 1));
      pools.drop(`p${i}`);
      caches.observe('nodePools', pool(`p${i}`, 10 * i + 2), 'delete');
      if (i % 2 === 1) caches.nodePools.remember(pool(`p${i}`, 10 * i + 1));
    }
    assert.deepEqual(
      caches.nodePools.list('ns', () => true),
      [],
    );
    assert.equal(caches.nodePools.get({ namespace: 'ns', name: 'p0' }), undefined);
    assert.equal(caches.nodePools.pending, 0);
  });
});

describe('caughtUp', () => {
  it('when the informer holds a copy at or past the write, it should be caught up', () => {
    assert.equal(caughtUp({ obj: {}, rv: 8 }, 8, 0), true);
    assert.equal(caughtUp({ obj: {}, rv: 8 }, 7, 100), false, 'it still holds an older copy');
  });

  it('when the informer holds no copy, it should be caught up only once its events moved past the write', () => {
    assert.equal(caughtUp({ obj: {}, rv: 8 }, undefined, 7), false);
    assert.equal(caughtUp({ obj: {}, rv: 8 }, undefined, 8), true);
    assert.equal(caughtUp({ obj: {}, rv: 0 }, undefined, 100), false, 'an opaque resourceVersion proves nothing');
  });

  it('when the write was a delete, it should be caught up once the object is gone or newer', () => {
    assert.equal(caughtUp({ obj: null, rv: 8 }, 8, 100), false);
    assert.equal(caughtUp({ obj: null, rv: 8 }, undefined, 0), true);
    assert.equal(caughtUp({ obj: null, rv: 8 }, 9, 0), true);
  });
});
