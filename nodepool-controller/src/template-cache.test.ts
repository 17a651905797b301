import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import * as k8s from '#k8s';
import type { NodePool } from '../../api/src/nodepool.js';
import { nodePoolFixture } from '../../api/testing/nodepool.js';
import type { WatchRequest } from '../../support/src/informer.js';
import { createLogger } from '../../support/src/logger.js';
import { MAX_WATCHES_PER_NAMESPACE, TemplateCache, type TemplateApi } from './template-cache.js';
import type { InfrastructureTemplate } from './templates.js';

const NS = 'tenant-a';
const REF = { apiGroup: 'infrastructure.kindling.dev', kind: 'LocalMachineTemplate', name: 'small' };

const template = (cpu: string, resourceVersion: string): InfrastructureTemplate => ({
  apiVersion: 'infrastructure.kindling.dev/v1alpha1',
  kind: 'LocalMachineTemplate',
  metadata: { name: REF.name, namespace: NS, resourceVersion },
  status: { capacity: { cpu } },
});

interface FakeOptions {
  /** The served version, when the test says (default: at once). */
  version?: Promise<string>;
  /** The apiserver refuses to list (RBAC). */
  forbidden?: boolean;
}

/** An apiserver that counts every read and hands the test the open watch (the last one) and every watch path. */
function fakeApi(opts: FakeOptions = {}): {
  api: TemplateApi;
  calls: { versions: number; gets: number; lists: number };
  watch?: WatchRequest;
  paths: string[];
} {
  const state: ReturnType<typeof fakeApi> = {
    calls: { versions: 0, gets: 0, lists: 0 },
    paths: [],
    api: {
      versionOf: () => {
        state.calls.versions++;
        return opts.version ?? Promise.resolve('v1alpha1');
      },
      list: () => {
        state.calls.lists++;
        if (opts.forbidden) return Promise.reject(Object.assign(new Error('forbidden'), { code: 403 }));
        return Promise.resolve({ apiVersion: 'v1', items: [template('2', '1')], metadata: { resourceVersion: '1' } });
      },
      fallback: {
        capacityOf: () => {
          state.calls.gets++;
          return Promise.resolve({ cpu: '2' });
        },
      },
      watch: (path) => (req) => {
        state.paths.push(path);
        state.watch = req;
        req.onConnected();
        return new Promise((resolve) => req.signal.addEventListener('abort', () => resolve(), { once: true }));
      },
    },
  };
  return state;
}

const pool = (min: number, ref = REF, name = 'workers'): NodePool =>
  nodePoolFixture(name, NS, (p) => {
    p.spec.autoScaling = { min, max: 3 };
    p.spec.platform.infrastructureTemplateRef = ref;
  });

const cacheOf = (fake: ReturnType<typeof fakeApi>, pools: NodePool[]): TemplateCache =>
  new TemplateCache({
    kubeConfig: new k8s.KubeConfig(),
    log: createLogger({ name: 'test', level: 'silent' }),
    pools: () => pools,
    wake: () => undefined,
    api: fake.api,
  });

async function until(what: string, check: () => boolean): Promise<void> {
  for (const end = Date.now() + 5000; !check(); await new Promise((r) => setTimeout(r, 10)))
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
}

describe('TemplateCache', () => {
  it('when the watch has listed, it should answer every reconcile from it with no read call, and wake the pool when the capacity changes', async () => {
    const fake = fakeApi();
    const pools = [pool(0)];
    const woken: string[] = [];
    const cache = new TemplateCache({
      kubeConfig: new k8s.KubeConfig(),
      log: createLogger({ name: 'test', level: 'silent' }),
      pools: () => pools,
      wake: (key) => woken.push(key),
      api: fake.api,
    });
    try {
      assert.deepEqual(await cache.capacityOf(NS, REF), { cpu: '2' }, 'a GET stands in until the watch lists');
      await until('the watch listed', () => fake.watch !== undefined);
      const before = { ...fake.calls };
      for (let i = 0; i < 20; i++) assert.deepEqual(await cache.capacityOf(NS, REF), { cpu: '2' });
      assert.deepEqual(fake.calls, before, 'no read call in steady state');
      assert.deepEqual(before, { versions: 1, gets: 1, lists: 1 });

      woken.length = 0;
      fake.watch?.onEvent('MODIFIED', template('8', '2'));
      assert.deepEqual(await cache.capacityOf(NS, REF), { cpu: '8' });
      assert.deepEqual(woken, [`${NS}/workers`]);
      assert.equal(fake.calls.gets, 1);
    } finally {
      await cache.stop();
    }
  });

  it('when no pool that may scale to zero names the template any more, it should close its watch', async () => {
    const fake = fakeApi();
    const pools = [pool(0)];
    const cache = new TemplateCache({
      kubeConfig: new k8s.KubeConfig(),
      log: createLogger({ name: 'test', level: 'silent' }),
      pools: () => pools,
      wake: () => undefined,
      api: fake.api,
    });
    try {
      await cache.capacityOf(NS, REF);
      await until('the watch listed', () => fake.watch !== undefined);
      const opened = fake.watch;
      pools[0] = pool(1);
      cache.poolChanged(NS);
      assert.equal(opened?.signal.aborted, true, 'the watch is closed');
    } finally {
      await cache.stop();
    }
  });

  it('when the pool lets go of the template while its watch is being opened, it should open none', async () => {
    let served: (version: string) => void = () => undefined;
    const fake = fakeApi({ version: new Promise((resolve) => (served = resolve)) });
    const pools = [pool(0)];
    const cache = cacheOf(fake, pools);
    try {
      const asked = cache.capacityOf(NS, REF);
      await until('the version asked', () => fake.calls.versions === 1);
      pools[0] = pool(1);
      cache.poolChanged(NS);
      served('v1alpha1');
      await asked;
      await new Promise((r) => setTimeout(r, 50));
      assert.deepEqual([fake.calls.lists, fake.paths], [0, []], 'no watch left behind');
    } finally {
      await cache.stop();
    }
  });

  it('when more pools of a namespace name templates than it may watch, it should watch that many and read the others by GET', async () => {
    const fake = fakeApi();
    const refs = Array.from({ length: MAX_WATCHES_PER_NAMESPACE + 2 }, (_, i) => ({ ...REF, name: `t${i}` }));
    const cache = cacheOf(
      fake,
      refs.map((ref, i) => pool(0, ref, `pool-${i}`)),
    );
    try {
      for (const ref of refs) await cache.capacityOf(NS, ref);
      await until('the watches listed', () => fake.paths.length === MAX_WATCHES_PER_NAMESPACE);
      const gets = fake.calls.gets;
      await cache.capacityOf(NS, refs.at(-1) ?? REF);
      assert.equal(fake.calls.gets, gets + 1, 'the template beyond the cap is read by GET');
      assert.equal(fake.calls.lists, MAX_WATCHES_PER_NAMESPACE);
    } finally {
      await cache.stop();
    }
  });

  it('when the apiserver refuses to list the template, it should stop its watch and read it by GET', async () => {
    const fake = fakeApi({ forbidden: true });
    const cache = cacheOf(fake, [pool(0)]);
    try {
      await cache.capacityOf(NS, REF);
      await until('the list refused', () => fake.calls.lists === 1);
      await new Promise((r) => setTimeout(r, 600));
      assert.equal(fake.calls.lists, 1, 'no retry of the refused list');
      await cache.capacityOf(NS, REF);
      assert.deepEqual([fake.calls.lists, fake.calls.versions, fake.calls.gets], [1, 1, 2], 'no new watch, a GET');
    } finally {
      await cache.stop();
    }
  });

  it("when a pool names a template with characters of a path or a selector, it should encode them in the watch's path and selector", async () => {
    const fake = fakeApi();
    const odd = {
      apiGroup: 'infrastructure.kindling.dev',
      kind: 'Local/Template?x',
      name: 'small,metadata.name=other',
    };
    const cache = cacheOf(fake, [pool(0, odd)]);
    try {
      await cache.capacityOf(NS, odd);
      await until('the watch opened', () => fake.watch !== undefined);
      assert.deepEqual(fake.paths, [
        `/apis/infrastructure.kindling.dev/v1alpha1/namespaces/${NS}/local%2Ftemplate%3Fxs`,
      ]);
      assert.equal(fake.watch?.query.fieldSelector, 'metadata.name=small\\,metadata.name\\=other');
    } finally {
      await cache.stop();
    }
  });
});
