import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import * as k8s from '#k8s';
import { createController, createKeyQueue, type Controller, type Part } from './controller.js';
import type { WatchFn } from './informer.js';
import type { Informer } from './namespaced-informer.js';
import { createLogger } from './logger.js';
import type { QueueMetrics } from './metrics.js';
import type { Outcome } from './queue.js';
import { flush, manualClock } from '../testing/index.js';

const log = createLogger({ name: 'test', level: 'silent' });
const kubeConfig = new k8s.KubeConfig();

interface Obj extends k8s.KubernetesObject {
  metadata: { name: string; namespace: string; resourceVersion: string; labels?: Record<string, string> };
}

const obj = (name: string, rv = '1', pool?: string): Obj => ({
  metadata: { name, namespace: 'ns', resourceVersion: rv, ...(pool ? { labels: { pool } } : {}) },
});
const keyOf = (o: Obj): string => `${o.metadata.namespace}/${o.metadata.name}`;
const poolOf = (o: Obj): string[] => (o.metadata.labels?.pool ? [`ns/${o.metadata.labels.pool}`] : []);

/** A fake apiserver resource: a list answered when the test says so, and a watch whose events the test sends. */
function fakeResource(
  name: string,
  items: Obj[],
  journal: string[],
): {
  path: string;
  list: () => Promise<k8s.KubernetesListObject<Obj>>;
  watch: WatchFn;
  send: (type: string, o: Obj) => void;
  answerList: () => void;
} {
  let onEvent: ((type: string, o: unknown) => void) | undefined;
  let answer!: () => void;
  const answered = new Promise<void>((r) => (answer = r));
  return {
    path: `/fake/${name}`,
    list: async () => {
      journal.push(`list ${name}`);
      await answered;
      return { apiVersion: 'v1', kind: 'List', items, metadata: { resourceVersion: '1' } };
    },
    watch: (req) => {
      onEvent = req.onEvent;
      req.onConnected();
      return new Promise<void>((r) =>
        req.signal.addEventListener('abort', () => (journal.push(`unwatch ${name}`), r()), { once: true }),
      );
    },
    send: (type, o) => onEvent?.(type, o),
    answerList: answer,
  };
}

/** A part that records its start and stop in the journal. */
function fakePart(name: string, journal: string[], synced?: () => boolean): Part {
  return {
    start: async () => void journal.push(`start ${name}`),
    stop: async () => void journal.push(`stop ${name}`),
    get synced() {
      return synced?.();
    },
  };
}

function recordingMetrics(): QueueMetrics & { observed: [string, Outcome][]; watched: string[] } {
  const observed: [string, Outcome][] = [];
  const watched: string[] = [];
  return { observed, watched, observe: (q, o) => observed.push([q, o]), watch: (q) => watched.push(q.name) };
}

interface PoolController {
  controller: Controller;
  pools: ReturnType<typeof fakeResource>;
  machines: ReturnType<typeof fakeResource>;
  poolInformer: Informer<Obj>;
}

/** A controller of pools (primary) and their machines (a child mapped by its `pool` label). */
function poolController(
  journal: string[],
  reconcile: (key: string) => Promise<void>,
  parts: Part[] = [],
): PoolController {
  const controller = createController({ name: 'pools', log, workers: 2, reconcile, parts });
  const pools = fakeResource('pools', [obj('a'), obj('b')], journal);
  const machines = fakeResource('machines', [obj('m1', '1', 'a')], journal);
  const poolInformer = controller.watch<Obj>({
    kubeConfig,
    path: pools.path,
    list: pools.list,
    namespaces: 'all',
    watch: () => pools.watch,
    toKeys: (o) => [keyOf(o)],
    primary: true,
  });
  controller.watch<Obj>({
    kubeConfig,
    path: machines.path,
    list: machines.list,
    namespaces: 'all',
    watch: () => machines.watch,
    toKeys: poolOf,
  });
  return { controller, pools, machines, poolInformer };
}

async function started(
  journal: string[],
  reconcile: (key: string) => Promise<void>,
  parts: Part[] = [],
): Promise<PoolController> {
  const c = poolController(journal, reconcile, parts);
  c.pools.answerList();
  c.machines.answerList();
  await c.controller.start();
  await c.controller.queue.drained();
  return c;
}

describe('createController', () => {
  it('when started, it should start the children, then the primary once they are synced, then the parts in order', async () => {
    const journal: string[] = [];
    const { controller, pools, machines } = poolController(journal, async () => undefined, [
      fakePart('sessions', journal),
      fakePart('approver', journal),
    ]);
    const starting = controller.start();
    await flush();
    assert.deepEqual(journal, ['list machines'], 'the primary waits for its children');
    pools.answerList();
    machines.answerList();
    await starting;
    assert.deepEqual(journal, ['list machines', 'list pools', 'start sessions', 'start approver']);
    await controller.stop();
  });

  it('when the informers list their objects, it should reconcile the keys they map to', async () => {
    const journal: string[] = [];
    const seen: string[] = [];
    const { controller } = await started(journal, async (key) => void seen.push(key));
    assert.deepEqual([...new Set(seen)].sort(), ['ns/a', 'ns/b']);
    await controller.stop();
  });

  it('when a child changes or goes, it should reconcile its primary object again', async () => {
    const journal: string[] = [];
    const seen: string[] = [];
    const { controller, machines } = await started(journal, async (key) => void seen.push(key));
    seen.length = 0;
    machines.send('MODIFIED', obj('m1', '2', 'a'));
    await controller.queue.drained();
    machines.send('DELETED', obj('m1', '2', 'a'));
    await controller.queue.drained();
    assert.deepEqual(seen, ['ns/a', 'ns/a']);
    await controller.stop();
  });

  it('when a primary object is deleted, it should forget its key instead of reconciling it', async () => {
    const journal: string[] = [];
    const seen: string[] = [];
    const { controller, pools, poolInformer } = await started(journal, async (key) => void seen.push(key));
    seen.length = 0;
    pools.send('DELETED', obj('a'));
    await controller.queue.drained();
    assert.deepEqual(seen, []);
    assert.equal(poolInformer.get({ namespace: 'ns', name: 'a' }), undefined);
    await controller.stop();
  });

  it('when resyncAll is called, it should reconcile every primary object and not the children', async () => {
    const journal: string[] = [];
    const seen: string[] = [];
    const { controller } = await started(journal, async (key) => void seen.push(key), []);
    seen.length = 0;
    controller.resyncAll();
    await controller.queue.drained();
    assert.deepEqual(seen.sort(), ['ns/a', 'ns/b']);
    await controller.stop();
  });

  it('when an informer or a part is not synced, it should not report synced', async () => {
    const journal: string[] = [];
    let partSynced = false;
    const { controller, pools, machines } = poolController(journal, async () => undefined, [
      fakePart('approver', journal, () => partSynced),
    ]);
    assert.equal(controller.synced, false);
    pools.answerList();
    machines.answerList();
    await controller.start();
    assert.equal(controller.synced, false, 'the part is not synced');
    partSynced = true;
    assert.equal(controller.synced, true);
    await controller.stop();
  });

  it('when stopped, it should wait for the reconcile in flight before stopping the parts and informers', async () => {
    const journal: string[] = [];
    let release!: () => void;
    const blocked = new Promise<void>((r) => (release = r));
    const { controller, pools, machines } = poolController(
      journal,
      async (key) => {
        if (key !== 'ns/a') return;
        journal.push('reconcile a');
        await blocked;
        journal.push('reconciled a');
      },
      [fakePart('sessions', journal)],
    );
    pools.answerList();
    machines.answerList();
    await controller.start();
    await flush();
    assert.ok(journal.includes('reconcile a'));
    const stopping = controller.stop();
    await flush();
    assert.equal(journal.includes('stop sessions'), false, 'nothing stops while a reconcile runs');
    release();
    await stopping;
    const stops = journal.filter((line) => !/^(list|start) /.test(line));
    assert.deepEqual(stops, ['reconcile a', 'reconciled a', 'stop sessions', 'unwatch pools', 'unwatch machines']);
  });

  it('when a second primary informer is watched, it should refuse it', () => {
    const controller = createController({ name: 'x', log, reconcile: async () => undefined });
    const r = fakeResource('r', [], []);
    controller.watch<Obj>({
      kubeConfig,
      path: r.path,
      list: r.list,
      namespaces: 'all',
      watch: () => r.watch,
      primary: true,
    });
    assert.throws(
      () =>
        controller.watch<Obj>({
          kubeConfig,
          path: r.path,
          list: r.list,
          namespaces: 'all',
          watch: () => r.watch,
          primary: true,
        }),
      /primary informer already/,
    );
  });
});

describe('createKeyQueue', () => {
  it('when reconciles end, it should count each outcome under the queue name and log a failure with its key field', async () => {
    const lines: Record<string, unknown>[] = [];
    const destination = { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) };
    const metrics = recordingMetrics();
    const queue = createKeyQueue({
      name: 'nodepool',
      log: createLogger({ name: 'test', level: 'warn', destination }),
      queueMetrics: metrics,
      keyField: 'nodePool',
      clock: manualClock(),
      reconcile: async (key) => {
        if (key === 'ns/bad') throw new Error('boom');
      },
    });
    queue.add('ns/good');
    queue.add('ns/bad');
    await queue.drained();
    await queue.stop();
    assert.deepEqual(metrics.watched, ['nodepool']);
    assert.deepEqual(metrics.observed, [
      ['nodepool', 'success'],
      ['nodepool', 'error'],
    ]);
    assert.equal(lines.length, 1);
    assert.equal(lines[0]?.nodePool, 'ns/bad');
    assert.equal(lines[0]?.msg, 'Reconcile failed: retrying with backoff');
  });
});
