import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import * as k8s from '#k8s';
import { flush, manualClock } from '../testing/index.js';
import {
  pagedList,
  PAGED_LIST_MAX_ITEMS,
  ResilientInformer,
  type InformerEvent,
  type WatchRequest,
} from './informer.js';
import { createLogger } from './logger.js';

const cm = (rv: string, data: Record<string, string>, labels: Record<string, string> = {}): k8s.V1ConfigMap => ({
  metadata: { namespace: 'a', name: 'one', resourceVersion: rv, labels },
  data,
});

/**
 * An informer over a fake list (`listed`, one object unless given; read again on every relist) and a fake watch;
 * `send` delivers an event (MODIFIED unless given) on the open watch.
 */
async function fake(
  transform?: (o: k8s.V1ConfigMap) => k8s.V1ConfigMap,
  quietWhenUnchanged = true,
  listed: k8s.V1ConfigMap[] = [cm('1', { big: 'x' })],
): Promise<{
  informer: ResilientInformer<k8s.V1ConfigMap>;
  events: InformerEvent[];
  send: (o: k8s.V1ConfigMap, type?: string) => Promise<void>;
  /** Each watch request's query, in order. */
  queries: WatchRequest['query'][];
  /** The apiserver ends the open watch (the informer then watches again at once). */
  end: () => Promise<void>;
  stop: () => Promise<void>;
}> {
  const events: InformerEvent[] = [];
  const queries: WatchRequest['query'][] = [];
  let open: WatchRequest | undefined;
  let ended: (() => void) | undefined;
  const informer = new ResilientInformer<k8s.V1ConfigMap>({
    kubeConfig: undefined as unknown as k8s.KubeConfig,
    path: '/api/v1/configmaps',
    list: () => Promise.resolve({ items: listed, metadata: { resourceVersion: '1' } }),
    log: createLogger({ name: 'test', level: 'silent' }),
    onEvent: (_, e) => events.push(e),
    clock: manualClock(),
    transform,
    quietWhenUnchanged,
    healthyAfterMs: 0,
    watch: (req) =>
      new Promise<void>((resolve) => {
        open = req;
        queries.push(req.query);
        req.onConnected();
        ended = resolve;
        req.signal.addEventListener('abort', () => resolve());
      }),
  });
  await informer.start();
  await flush();
  events.length = 0;
  const send = async (o: k8s.V1ConfigMap, type = 'MODIFIED'): Promise<void> => {
    open?.onEvent(type, o);
    await flush();
  };
  const end = async (): Promise<void> => {
    ended?.();
    await flush();
  };
  return { informer, events, send, queries, end, stop: () => informer.stop() };
}

const withoutData = (o: k8s.V1ConfigMap): k8s.V1ConfigMap => ({ metadata: o.metadata });

describe('ResilientInformer: bookmarks', () => {
  it('when a bookmark comes, it should emit nothing, not transform it, and watch again from its resourceVersion', async () => {
    // A transform that reads the object's data, which a bookmark does not have.
    const f = await fake((o) => ({ metadata: o.metadata, data: { size: String(Object.keys(o.data ?? {}).length) } }));
    const strict = await fake((o) => {
      if (!o.data) throw new Error('not a ConfigMap');
      return o;
    });
    await strict.send({ metadata: { resourceVersion: '7' } }, 'BOOKMARK');
    assert.deepEqual(strict.events, []);
    await strict.end();
    assert.equal(strict.queries.at(-1)?.['resourceVersion'], '7');
    await f.send({ metadata: { resourceVersion: '8' } }, 'BOOKMARK');
    assert.deepEqual(f.events, []);
    await Promise.all([f.stop(), strict.stop()]);
  });
});

describe('ResilientInformer: an event it cannot take', () => {
  it('when a transform throws on an object, it should skip it and go on watching after it', async () => {
    const f = await fake((o) => {
      if (o.data?.['bad']) throw new Error('cannot take it');
      return o;
    });
    await f.send(cm('2', { bad: 'yes' }));
    await f.send(cm('3', { big: 'z' }));
    assert.deepEqual(f.events, ['update'], 'the good update only');
    assert.equal(f.queries.length, 1, 'the same watch');
    await f.end();
    assert.equal(f.queries.at(-1)?.['resourceVersion'], '3');
    await f.stop();
  });

  it('when a transform throws on a listed object, it should sync with the others and skip that one', async () => {
    const other = { ...cm('1', { big: 'y' }), metadata: { namespace: 'a', name: 'two', resourceVersion: '1' } };
    const f = await fake(
      (o) => {
        if (o.data?.['bad']) throw new Error('cannot take it');
        return o;
      },
      true,
      [cm('1', { bad: 'yes' }), other],
    );
    assert.ok(f.informer.synced);
    assert.deepEqual(
      f.informer.list().map((o) => o.metadata?.name),
      ['two'],
    );
    await f.stop();
  });

  it('when a transform throws on a relisted object it holds, it should keep its cached copy and emit no delete', async () => {
    const listed = [cm('1', { big: 'x' })];
    const f = await fake(
      (o) => {
        if (o.data?.['bad']) throw new Error('cannot take it');
        return o;
      },
      true,
      listed,
    );
    listed[0] = cm('2', { bad: 'yes' });
    await f.send({ metadata: {}, code: 410 } as k8s.V1ConfigMap, 'ERROR');
    assert.equal(f.queries.length, 2, 'relisted and watching again');
    assert.equal(f.informer.get({ namespace: 'a', name: 'one' })?.metadata?.resourceVersion, '1');
    assert.ok(!f.events.includes('delete'));
    await f.stop();
  });
});

describe('ResilientInformer: updates of transformed objects', () => {
  it('when an update changes only what the transform drops, it should emit nothing', async () => {
    const f = await fake(withoutData);
    await f.send(cm('2', { big: 'y' }));
    assert.deepEqual(f.events, []);
    await f.stop();
  });

  it('when an update changes what the transform keeps, it should emit the update', async () => {
    const f = await fake(withoutData);
    await f.send(cm('2', { big: 'x' }, { pool: 'workers' }));
    assert.deepEqual(f.events, ['update']);
    await f.stop();
  });

  it('when the informer does not ask for quiet, it should emit an update the transform hides', async () => {
    const f = await fake(withoutData, false);
    await f.send(cm('2', { big: 'y' }));
    assert.deepEqual(f.events, ['update']);
    await f.stop();
  });

  it('when there is no transform, it should emit every new resourceVersion', async () => {
    const f = await fake();
    await f.send(cm('2', { big: 'x' }));
    assert.deepEqual(f.events, ['update']);
    await f.stop();
  });
});

/**
 * A server that never ends a list: every page carries `perPage` new ConfigMaps and another continue token. `asked`
 * counts the pages it served.
 */
function endlessPages(perPage: number): {
  page: (opts: { limit: number; _continue?: string }) => Promise<k8s.KubernetesListObject<k8s.V1ConfigMap>>;
  asked: () => number;
} {
  let asked = 0;
  return {
    page: () => {
      asked++;
      const items = Array.from({ length: perPage }, (_, i) => ({ metadata: { name: `cm-${asked}-${i}` } }));
      return Promise.resolve({ items, metadata: { resourceVersion: '1', _continue: `page-${asked + 1}` } });
    },
    asked: () => asked,
  };
}

describe('pagedList: its budget', () => {
  it('when the server hands out continue tokens without end, it should fail past the default item budget', async () => {
    const server = endlessPages(100);
    await assert.rejects(pagedList(server.page, 100)(), /the list passed its budget of 100000 items/);
    assert.equal(server.asked(), PAGED_LIST_MAX_ITEMS / 100 + 1, 'no page asked for after the one past the budget');
  });

  it('when the pages are empty but never end, it should fail past the page budget', async () => {
    const server = endlessPages(0);
    await assert.rejects(pagedList(server.page, 10, { maxItems: 50 })(), /past its budget of 10 pages \(0 items\)/);
    assert.equal(server.asked(), 10);
  });

  it('when one page holds more than the budget, it should fail without keeping it', async () => {
    const server = endlessPages(1_000);
    await assert.rejects(pagedList(server.page, 10, { maxItems: 500 })(), /passed its budget of 500 items \(1000 in 1/);
    assert.equal(server.asked(), 1);
  });

  it('when a list ends exactly at its budget, it should return every item', async () => {
    const pages = [
      { items: [cm('1', {}), cm('1', {})], metadata: { resourceVersion: '1', _continue: 'next' } },
      { items: [cm('1', {})], metadata: { resourceVersion: '1' } },
    ];
    const list = await pagedList<k8s.V1ConfigMap>(({ _continue }) => Promise.resolve(pages[_continue ? 1 : 0]!), 2, {
      maxItems: 3,
      maxPages: 2,
    })();
    assert.equal(list.items.length, 3);
    assert.equal(list.metadata?._continue, undefined);
  });

  it('when its signal is aborted between pages, it should ask for no further page', async () => {
    const server = endlessPages(1);
    const controller = new AbortController();
    const list = pagedList<k8s.V1ConfigMap>((opts, signal) => {
      assert.equal(signal, controller.signal, 'the page function gets the signal');
      if (server.asked() === 2) controller.abort(new Error('stopped'));
      return server.page(opts);
    }, 1);
    await assert.rejects(list(controller.signal), /stopped/);
    assert.equal(server.asked(), 3);
  });

  it('when an informer lists a server without end, it should not sync and should retry after a backoff', async () => {
    const server = endlessPages(10);
    const clock = manualClock();
    const informer = new ResilientInformer<k8s.V1ConfigMap>({
      kubeConfig: undefined as unknown as k8s.KubeConfig,
      path: '/api/v1/configmaps',
      list: pagedList(server.page, 10, { maxItems: 100 }),
      log: createLogger({ name: 'test', level: 'silent' }),
      onEvent: () => assert.fail('no event from a failed list'),
      clock,
      watch: () => assert.fail('no watch without a list'),
    });
    void informer.start();
    await flush();
    assert.equal(informer.synced, false);
    assert.equal(informer.list().length, 0);
    assert.equal(informer.restarts, 1);
    const asked = server.asked();
    clock.advance(1_000);
    await flush();
    assert.ok(server.asked() > asked, 'listed again after the backoff');
    await informer.stop();
  });
});
