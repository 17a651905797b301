import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import * as k8s from '#k8s';
import { flush, manualClock } from '../testing/index.js';
import type { Namespaces } from './config.js';
import type { InformerEvent, WatchFn, WatchRequest } from './informer.js';
import { createLogger } from './logger.js';
import { NamespacedInformer, namespacedPath } from './namespaced-informer.js';

const log = createLogger({ name: 'test', level: 'silent' });

const cm = (namespace: string, name: string, rv = '1'): k8s.V1ConfigMap => ({
  metadata: { namespace, name, resourceVersion: rv },
});

/** Fake watches by path: each request stays open until ended or aborted. */
class PathWatches {
  readonly requests: (WatchRequest & { path: string; end: (err?: Error) => void })[] = [];

  readonly of =
    (path: string): WatchFn =>
    (req) =>
      new Promise<void>((resolve, reject) => {
        const end = (err?: Error): void => (err ? reject(err) : resolve());
        this.requests.push({ ...req, path, end });
        req.signal.addEventListener('abort', () => end());
      });

  open(path: string): (WatchRequest & { end: (err?: Error) => void }) | undefined {
    return this.requests.filter((r) => r.path === path && !r.signal.aborted).at(-1);
  }
}

interface Fake {
  informer: NamespacedInformer<k8s.V1ConfigMap>;
  watches: PathWatches;
  lists: (string | undefined)[];
  events: [string, InformerEvent][];
}

/** An informer over fake lists and watches; `objects` is what the apiserver holds, in every namespace. */
function fake(namespaces: Namespaces, objects: k8s.V1ConfigMap[], indexLabel?: string): Fake {
  const watches = new PathWatches();
  const lists: (string | undefined)[] = [];
  const events: [string, InformerEvent][] = [];
  const informer = new NamespacedInformer<k8s.V1ConfigMap>({
    kubeConfig: undefined as unknown as k8s.KubeConfig,
    namespaces,
    path: '/api/v1/configmaps',
    list: async (namespace) => {
      lists.push(namespace);
      const items = objects.filter((o) => namespace === undefined || o.metadata?.namespace === namespace);
      return { items, metadata: { resourceVersion: '10' } };
    },
    log,
    onEvent: (o, e) => events.push([`${o.metadata?.namespace}/${o.metadata?.name}`, e]),
    clock: manualClock(),
    watch: watches.of,
    indexLabel,
  });
  return { informer, watches, lists, events };
}

const EVERYWHERE = [cm('a', 'one'), cm('b', 'two'), cm('kube-system', 'secret-ish')];

describe('namespacedPath', () => {
  it('when given a core or a group collection, it should put the namespace before the resource', () => {
    assert.equal(namespacedPath('/api/v1/secrets', 'a'), '/api/v1/namespaces/a/secrets');
    assert.equal(
      namespacedPath('/apis/cluster.x-k8s.io/v1beta2/machines', 'tenant-1'),
      '/apis/cluster.x-k8s.io/v1beta2/namespaces/tenant-1/machines',
    );
  });
});

describe('NamespacedInformer (fake lists and watches)', () => {
  it('when namespaces a and b are served, it should list and watch each of them only, and never hold an object of another', async () => {
    const f = fake(['a', 'b'], EVERYWHERE);
    await f.informer.start();
    await flush();
    assert.deepEqual([...f.lists].sort(), ['a', 'b']);
    assert.deepEqual(f.watches.requests.map((r) => r.path).sort(), [
      '/api/v1/namespaces/a/configmaps',
      '/api/v1/namespaces/b/configmaps',
    ]);
    assert.deepEqual(
      f.informer
        .list()
        .map((o) => o.metadata?.name)
        .sort(),
      ['one', 'two'],
    );
    assert.equal(f.informer.get({ namespace: 'a', name: 'one' })?.metadata?.name, 'one');
    assert.equal(f.informer.get({ namespace: 'b', name: 'one' }), undefined);
    assert.equal(f.informer.get({ namespace: 'kube-system', name: 'secret-ish' }), undefined);
    assert.deepEqual(f.informer.list('kube-system'), []);
    assert.ok(!f.events.some(([key]) => key.startsWith('kube-system/')), 'no event for another namespace');
    assert.equal(f.informer.synced, true);
    await f.informer.stop();
  });

  it("when one namespace's watch fails, it should restart that one alone and keep the other's watch and objects", async () => {
    const f = fake(['a', 'b'], EVERYWHERE);
    await f.informer.start();
    await flush();
    const b = f.watches.open('/api/v1/namespaces/b/configmaps');
    f.watches.open('/api/v1/namespaces/a/configmaps')?.end(new Error('connection reset'));
    await flush();
    assert.equal(f.informer.restarts, 1);
    assert.equal(f.watches.open('/api/v1/namespaces/b/configmaps'), b, "b's watch is untouched");
    assert.equal(f.informer.get({ namespace: 'b', name: 'two' })?.metadata?.name, 'two');
    assert.equal(
      f.informer.get({ namespace: 'a', name: 'one' })?.metadata?.name,
      'one',
      "a's cache is kept while it restarts",
    );
    await f.informer.stop();
  });

  it('when a watched namespace gets an object, it should emit it and cache it under its namespace', async () => {
    const f = fake(['a', 'b'], EVERYWHERE);
    await f.informer.start();
    await flush();
    f.watches.open('/api/v1/namespaces/b/configmaps')?.onEvent('ADDED', cm('b', 'three', '11'));
    assert.deepEqual(f.events.at(-1), ['b/three', 'add']);
    assert.deepEqual(
      f.informer
        .list('b')
        .map((o) => o.metadata?.name)
        .sort(),
      ['three', 'two'],
    );
    await f.informer.stop();
  });

  it('when every namespace is served ("*"), it should run one cluster-wide informer on the collection path', async () => {
    const f = fake('all', EVERYWHERE);
    await f.informer.start();
    await flush();
    assert.deepEqual(f.lists, [undefined]);
    assert.deepEqual(
      f.watches.requests.map((r) => r.path),
      ['/api/v1/configmaps'],
    );
    assert.equal(f.informer.get({ namespace: 'kube-system', name: 'secret-ish' })?.metadata?.name, 'secret-ish');
    assert.equal(f.informer.list().length, 3);
    await f.informer.stop();
  });

  it("when objects are indexed by a label, it should list one value's objects, following relabels, deletes and relists", async () => {
    const labelled = (namespace: string, name: string, pool: string, rv = '1'): k8s.V1ConfigMap => ({
      metadata: { namespace, name, resourceVersion: rv, labels: { pool } },
    });
    const objects = [
      labelled('a', 'one', 'p'),
      labelled('a', 'two', 'q'),
      labelled('b', 'three', 'p'),
      cm('a', 'bare'),
    ];
    const f = fake(['a', 'b'], objects, 'pool');
    await f.informer.start();
    await flush();
    const names = (value: string, namespace?: string): string[] =>
      f.informer
        .listIndexed(value, namespace)
        .map((o) => o.metadata?.name ?? '')
        .sort();
    assert.deepEqual(names('p', 'a'), ['one']);
    assert.deepEqual(names('p'), ['one', 'three']);
    const watch = f.watches.open('/api/v1/namespaces/a/configmaps');
    watch?.onEvent('MODIFIED', labelled('a', 'two', 'p', '11'));
    watch?.onEvent('DELETED', labelled('a', 'one', 'p', '12'));
    assert.deepEqual(names('p', 'a'), ['two']);
    assert.deepEqual(names('q', 'a'), []);
    objects.push(labelled('a', 'four', 'p'));
    watch?.end(Object.assign(new Error('gone'), { code: 410 }));
    await flush();
    assert.deepEqual(names('p', 'a'), ['four', 'one']);
    await f.informer.stop();
  });
});
