import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import * as k8s from '#k8s';
import { startCluster, kubeconfigFor, FaultProxy, type Cluster } from '../../test/bed/src/index.js';
import {
  ResilientInformer,
  pagedList,
  type InformerEvent,
  type InformerOptions,
  type WatchFn,
  type WatchRequest,
} from './informer.js';
import { loadCertificateAuthority } from '../../test/bed/src/pki.js';
import { createLogger } from './logger.js';
import { flush, manualClock, type ManualClock } from '../testing/index.js';
import { sleep } from './timers.js';

const log = createLogger({ name: 'test', level: 'silent' });

async function until(what: string, check: () => boolean, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

function configMapInformer(
  kc: k8s.KubeConfig,
  events: [string, InformerEvent][],
  watchdogMs?: number,
  more: Partial<InformerOptions<k8s.V1ConfigMap>> = {},
): ResilientInformer<k8s.V1ConfigMap> {
  const core = kc.makeApiClient(k8s.CoreV1Api);
  return new ResilientInformer<k8s.V1ConfigMap>({
    kubeConfig: kc,
    path: '/api/v1/namespaces/default/configmaps',
    list: () => core.listNamespacedConfigMap({ namespace: 'default' }),
    log,
    onEvent: (o, e) => events.push([o.metadata?.name ?? '', e]),
    maxRestartDelayMs: 500,
    ...(watchdogMs === undefined ? {} : { watchdogMs }),
    ...more,
  });
}

describe('ResilientInformer on a real apiserver', () => {
  let cluster: Cluster;
  before(async () => {
    cluster = await startCluster({ name: 'informer', controllerManager: false });
  });
  after(async () => cluster?.stop());

  it('when objects are created, changed and deleted, it should emit each and keep its cache in step', async () => {
    const events: [string, InformerEvent][] = [];
    const informer = configMapInformer(cluster.kubeConfig, events);
    await informer.start();
    const core = cluster.kubeConfig.makeApiClient(k8s.CoreV1Api);
    await core.createNamespacedConfigMap({ namespace: 'default', body: { metadata: { name: 'a' }, data: { v: '1' } } });
    await until('the add', () => informer.get({ namespace: 'default', name: 'a' }) !== undefined);
    await core.replaceNamespacedConfigMap({
      name: 'a',
      namespace: 'default',
      body: { metadata: { name: 'a' }, data: { v: '2' } },
    });
    await until('the update', () => informer.get({ namespace: 'default', name: 'a' })?.data?.v === '2');
    await core.deleteNamespacedConfigMap({ name: 'a', namespace: 'default' });
    await until('the delete', () => informer.get({ namespace: 'default', name: 'a' }) === undefined);
    await informer.stop();
    assert.deepEqual(
      events.filter(([n]) => n === 'a').map(([, e]) => e),
      ['add', 'update', 'delete'],
    );
  });

  it('when listing is forbidden at first, it should keep restarting and sync once access is granted', async () => {
    const ca = await loadCertificateAuthority(cluster.ca);
    const user = await ca.issue({ commonName: 'limited', usage: 'client' });
    const kc = new k8s.KubeConfig();
    kc.loadFromString(kubeconfigFor('limited', cluster.server, cluster.ca.certPem, user));
    const events: [string, InformerEvent][] = [];
    const informer = configMapInformer(kc, events);
    const started = informer.start();
    await until('a few failed attempts', () => informer.restarts >= 2);
    assert.equal(informer.synced, false);

    const rbac = cluster.kubeConfig.makeApiClient(k8s.RbacAuthorizationV1Api);
    await rbac.createNamespacedRole({
      namespace: 'default',
      body: {
        metadata: { name: 'cm-reader' },
        rules: [{ apiGroups: [''], resources: ['configmaps'], verbs: ['list', 'watch'] }],
      },
    });
    await rbac.createNamespacedRoleBinding({
      namespace: 'default',
      body: {
        metadata: { name: 'cm-reader' },
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'cm-reader' },
        subjects: [{ kind: 'User', name: 'limited', apiGroup: 'rbac.authorization.k8s.io' }],
      },
    });
    await started;
    assert.equal(informer.synced, true);
    const core = cluster.kubeConfig.makeApiClient(k8s.CoreV1Api);
    await core.createNamespacedConfigMap({ namespace: 'default', body: { metadata: { name: 'after-grant' } } });
    await until(
      'the watch to deliver the new object',
      () => informer.get({ namespace: 'default', name: 'after-grant' }) !== undefined,
    );
    await informer.stop();
  });

  it('when listing in pages of 2 from the real apiserver, it should return every object', async () => {
    const core = cluster.kubeConfig.makeApiClient(k8s.CoreV1Api);
    for (let i = 0; i < 5; i++)
      await core.createNamespacedConfigMap({
        namespace: 'default',
        body: { metadata: { name: `paged-${i}`, labels: { paged: 'yes' } } },
      });
    let pages = 0;
    const list = pagedList<k8s.V1ConfigMap>((page) => {
      pages++;
      return core.listNamespacedConfigMap({ namespace: 'default', labelSelector: 'paged=yes', ...page });
    }, 2);
    const all = await list();
    assert.deepEqual(all.items.map((c) => c.metadata?.name).sort(), [
      'paged-0',
      'paged-1',
      'paged-2',
      'paged-3',
      'paged-4',
    ]);
    assert.equal(pages, 3);
    assert.ok(all.metadata?.resourceVersion);
  });

  it('when the watchdog fires, it should relist and emit a resync of every cached object', async () => {
    const core = cluster.kubeConfig.makeApiClient(k8s.CoreV1Api);
    await core.createNamespacedConfigMap({ namespace: 'default', body: { metadata: { name: 'steady' } } });
    const events: [string, InformerEvent][] = [];
    const informer = configMapInformer(cluster.kubeConfig, events, 300);
    await informer.start();
    await until(
      'two resyncs of the steady object',
      () => events.filter(([n, e]) => n === 'steady' && e === 'resync').length >= 2,
    );
    await informer.stop();
  });
});

describe('pagedList', () => {
  it("when the apiserver answers in pages, it should follow the continue tokens and keep the first page's resourceVersion", async () => {
    const asked: (string | undefined)[] = [];
    const pages: Record<string, k8s.KubernetesListObject<k8s.V1ConfigMap>> = {
      start: {
        items: [{ metadata: { name: 'a' } }, { metadata: { name: 'b' } }],
        metadata: { resourceVersion: '42', _continue: 'p2' },
      },
      p2: { items: [{ metadata: { name: 'c' } }], metadata: { resourceVersion: '42', _continue: 'p3' } },
      p3: { items: [{ metadata: { name: 'd' } }], metadata: { resourceVersion: '42' } },
    };
    const list = pagedList<k8s.V1ConfigMap>(async ({ limit, _continue }) => {
      assert.equal(limit, 2);
      asked.push(_continue);
      return pages[_continue ?? 'start'] as k8s.KubernetesListObject<k8s.V1ConfigMap>;
    }, 2);
    const all = await list();
    assert.deepEqual(
      all.items.map((i) => i.metadata?.name),
      ['a', 'b', 'c', 'd'],
    );
    assert.equal(all.metadata?.resourceVersion, '42');
    assert.equal(all.metadata?._continue, undefined);
    assert.deepEqual(asked, [undefined, 'p2', 'p3']);
  });
});

describe('ResilientInformer on a real apiserver behind a faulty link', () => {
  let cluster: Cluster;
  let proxy: FaultProxy;
  before(async () => {
    cluster = await startCluster({ name: 'informer-faults', controllerManager: false, audit: true });
    proxy = await FaultProxy.start(cluster.server);
  });
  after(async () => {
    await proxy?.close();
    await cluster?.stop();
  });

  it('when the watch connects and breaks at once, again and again, it should back off instead of reconnecting every 250 ms', async () => {
    proxy.mode = { kind: 'pass' };
    const informer = configMapInformer(proxy.kubeConfigFor(cluster), [], undefined, { maxRestartDelayMs: 30_000 });
    await informer.start();
    proxy.mode = { kind: 'flap', cutAfterMs: 200 };
    const before = proxy.accepted;
    await sleep(10_000);
    const connections = proxy.accepted - before;
    await informer.stop();
    // Backing off 250, 500, 1000, 2000, 4000 ms after each 200 ms life: about 5 connections in 10 s, not 20.
    assert.ok(connections <= 8, `${connections} connections in 10 s`);
    assert.ok(connections >= 3, `${connections} connections in 10 s: the informer gave up`);
  });

  it('when the apiserver is unreachable for longer than staleAfterMs, it should turn unsynced, and synced again once a relist succeeded', async () => {
    proxy.mode = { kind: 'pass' };
    const informer = configMapInformer(proxy.kubeConfigFor(cluster), [], undefined, { staleAfterMs: 1500 });
    await informer.start();
    assert.equal(informer.synced, true);
    proxy.mode = { kind: 'down' };
    const core = cluster.kubeConfig.makeApiClient(k8s.CoreV1Api);
    await core.createNamespacedConfigMap({ namespace: 'default', body: { metadata: { name: 'made-during-outage' } } });
    await until('the informer to report its cache as stale', () => !informer.synced, 10_000);
    assert.equal(informer.get({ namespace: 'default', name: 'made-during-outage' }), undefined);
    proxy.mode = { kind: 'pass' };
    await until('the informer to be synced again', () => informer.synced, 15_000);
    assert.notEqual(
      informer.get({ namespace: 'default', name: 'made-during-outage' }),
      undefined,
      'synced again without the relist',
    );
    await informer.stop();
  });

  it('when the watchdog and errors both keep restarting the watch, the apiserver should never hold two of its watches at once, nor any after stop()', async () => {
    proxy.mode = { kind: 'pass' };
    const informer = configMapInformer(proxy.kubeConfigFor(cluster), [], 150, {
      maxRestartDelayMs: 300,
      fieldSelector: 'metadata.name!=overlap-probe',
    });
    await informer.start();
    let flapping = false;
    const flip = setInterval(() => {
      flapping = !flapping;
      proxy.mode = flapping ? { kind: 'flap', cutAfterMs: 100 + Math.floor(Math.random() * 300) } : { kind: 'pass' };
    }, 700);
    await sleep(10_000);
    clearInterval(flip);
    proxy.mode = { kind: 'pass' };
    await sleep(1_000);
    await informer.stop();
    const stoppedAt = Date.now();
    await sleep(1_000);
    // This informer's watches as the apiserver saw them (its field selector tells them from any other watch).
    const watches = await watchIntervals(cluster.auditLogPath ?? '', (uri) => uri.includes('overlap-probe'));
    assert.ok(watches.length >= 10, `only ${watches.length} watches: nothing was restarted`);
    const overlaps = watches
      .flatMap((a, i) => watches.slice(i + 1).map((b) => Math.min(a.end, b.end) - b.start))
      .filter((ms) => ms > 20);
    assert.deepEqual(overlaps, [], 'two watches of one informer were open at once (ms)');
    assert.deepEqual(
      watches.filter((w) => w.end > stoppedAt + 500),
      [],
      'a watch outlived stop()',
    );
  });
});

/** Start and end (ms) of the watch requests in an audit log whose URI matches; an unfinished one ends at +∞. */
async function watchIntervals(
  auditLog: string,
  match: (uri: string) => boolean,
): Promise<{ start: number; end: number }[]> {
  const events = (await readFile(auditLog, 'utf8'))
    .split('\n')
    .filter(Boolean)
    .map(
      (line) =>
        JSON.parse(line) as {
          auditID: string;
          verb: string;
          stage: string;
          requestURI: string;
          requestReceivedTimestamp: string;
          stageTimestamp: string;
        },
    )
    .filter((e) => e.verb === 'watch' && match(e.requestURI));
  const byId = new Map<string, { start: number; end: number }>();
  for (const e of events) {
    const w = byId.get(e.auditID) ?? { start: Date.parse(e.requestReceivedTimestamp), end: Infinity };
    if (e.stage === 'ResponseComplete') w.end = Date.parse(e.stageTimestamp);
    byId.set(e.auditID, w);
  }
  return [...byId.values()].sort((a, b) => a.start - b.start);
}

/** A fake watch the test drives: each request stays open until the test ends it or the informer aborts it. */
class FakeWatches {
  requests: (WatchRequest & { end: (err?: Error) => void; ended: boolean })[] = [];
  maxOpen = 0;
  /** Requests begun while an earlier one had not ended yet. */
  overlaps = 0;

  readonly watch: WatchFn = (req) =>
    new Promise<void>((resolve, reject) => {
      if (this.open().length > 0) this.overlaps++;
      const entry = {
        ...req,
        ended: false,
        end: (err?: Error) => {
          if (entry.ended) return;
          entry.ended = true;
          if (err) reject(err);
          else resolve();
        },
      };
      this.requests.push(entry);
      this.maxOpen = Math.max(this.maxOpen, this.open().length);
      req.signal.addEventListener('abort', () => entry.end());
    });

  open(): FakeWatches['requests'] {
    return this.requests.filter((r) => !r.ended);
  }

  /** The newest request: connects it, and optionally ends it at once with an error. */
  last(): FakeWatches['requests'][number] {
    const r = this.requests.at(-1);
    assert.ok(r, 'no watch request was made');
    return r;
  }
}

interface Harness {
  clock: ManualClock;
  watches: FakeWatches;
  informer: ResilientInformer<k8s.V1ConfigMap>;
  lists: number;
  listFails: boolean;
  items: k8s.V1ConfigMap[];
}

function harness(opts: Partial<InformerOptions<k8s.V1ConfigMap>> = {}): Harness {
  const h = {
    clock: manualClock(),
    watches: new FakeWatches(),
    lists: 0,
    listFails: false,
    items: [],
  } as unknown as Harness;
  h.informer = new ResilientInformer<k8s.V1ConfigMap>({
    kubeConfig: undefined as unknown as k8s.KubeConfig,
    path: '/api/v1/configmaps',
    list: async () => {
      h.lists++;
      if (h.listFails) throw new Error('connection refused');
      return { items: h.items, metadata: { resourceVersion: String(100 + h.lists) } };
    },
    log,
    onEvent: () => undefined,
    clock: h.clock,
    watch: h.watches.watch,
    healthyAfterMs: 5_000,
    staleAfterMs: 10_000,
    maxRestartDelayMs: 8_000,
    ...opts,
  });
  return h;
}

async function advance(h: Harness, ms: number): Promise<void> {
  await flush();
  h.clock.advance(ms);
  await flush();
  await flush();
}

describe('ResilientInformer (fake watch, manual clock)', () => {
  it('when a watch keeps connecting and failing at once, it should wait 250, 500, 1000… ms, and start from 250 ms again only after a watch stayed connected long enough', async () => {
    const h = harness();
    await h.informer.start();
    const delays: number[] = [];
    for (let i = 0; i < 5; i++) {
      await flush();
      const r = h.watches.last();
      r.onConnected();
      r.end(new Error('connection reset'));
      await flush();
      delays.push(h.clock.pending()[0] ?? -1);
      await advance(h, delays.at(-1) ?? 0);
    }
    assert.deepEqual(delays, [250, 500, 1000, 2000, 4000]);
    const r = h.watches.last();
    r.onConnected();
    await advance(h, 5_000);
    r.end(new Error('connection reset'));
    await flush();
    assert.equal(h.clock.pending()[0], 250, 'a healthy watch did not reset the backoff');
    await h.informer.stop();
  });

  it('when the server ends a watch that had just connected, it should back off too, not reconnect at once', async () => {
    const h = harness();
    await h.informer.start();
    for (let i = 0; i < 3; i++) {
      await flush();
      h.watches.last().onConnected();
      h.watches.last().end();
      await flush();
      await advance(h, h.clock.pending()[0] ?? 0);
    }
    assert.equal(h.watches.requests.length, 4);
    const healthy = h.watches.last();
    healthy.onConnected();
    await advance(h, 6_000);
    healthy.end();
    await flush();
    await flush();
    assert.equal(h.watches.requests.length, 5, 'an ordinary end of a healthy watch should reconnect at once');
    await h.informer.stop();
  });

  it('when the watchdog fires while a restart after an error is pending, it should hold one watch at a time and abort each before the next', async () => {
    const h = harness({ watchdogMs: 1_000 });
    await h.informer.start();
    for (let i = 0; i < 20; i++) {
      await flush();
      const r = h.watches.last();
      if (i % 2 === 0) r.end(new Error('boom'));
      await advance(h, 300);
    }
    assert.equal(h.watches.maxOpen, 1);
    assert.equal(h.watches.overlaps, 0);
    assert.ok(h.lists >= 3, `the watchdog relisted ${h.lists - 1} times`);
    await h.informer.stop();
    assert.equal(h.watches.open().length, 0, 'a watch outlived stop()');
  });

  it('when an aborted watch still delivers an event, it should not reach the cache', async () => {
    const h = harness({ watchdogMs: 1_000 });
    await h.informer.start();
    await flush();
    const old = h.watches.last();
    old.onConnected();
    await advance(h, 1_000);
    assert.equal(old.signal.aborted, true);
    old.onEvent('ADDED', { metadata: { name: 'late', namespace: 'default', resourceVersion: '999' } });
    assert.equal(h.informer.get({ namespace: 'default', name: 'late' }), undefined);
    await h.informer.stop();
  });

  it('when the watch has been down longer than staleAfterMs, it should be unsynced until a relist succeeds', async () => {
    const h = harness();
    await h.informer.start();
    await flush();
    h.watches.last().onConnected();
    assert.equal(h.informer.synced, true);
    h.listFails = true;
    h.watches.last().end(new Error('connection refused'));
    for (let t = 0; t < 9_000; t += 500) {
      await advance(h, 500);
      h.watches.open().forEach((r) => r.end(new Error('connection refused')));
    }
    assert.equal(h.informer.synced, true, 'unsynced before the bound');
    await advance(h, 1_500);
    assert.equal(h.informer.synced, false);
    h.listFails = false;
    h.items = [{ metadata: { name: 'fresh', namespace: 'default', resourceVersion: '7' } }];
    await advance(h, 8_000);
    assert.equal(h.informer.synced, true);
    assert.notEqual(h.informer.get({ namespace: 'default', name: 'fresh' }), undefined);
    await h.informer.stop();
  });

  it('when the watch reports 410 Gone, it should relist and watch from the new resourceVersion', async () => {
    const h = harness();
    await h.informer.start();
    await flush();
    h.watches.last().onConnected();
    h.watches
      .last()
      .onEvent('ERROR', { kind: 'Status', code: 410, reason: 'Expired', message: 'too old resource version' });
    await flush();
    await flush();
    assert.equal(h.lists, 2);
    assert.equal(h.watches.last().query.resourceVersion, '102');
    await h.informer.stop();
  });
});
