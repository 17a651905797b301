import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import * as k8s from '#k8s';
import type { NodePool } from '../../api/src/nodepool.js';
import { nodePoolFixture } from '../../api/testing/nodepool.js';
import type { WatchRequest } from '../../support/src/informer.js';
import { createLogger } from '../../support/src/logger.js';
import { TemplateCache, type TemplateApi } from './template-cache.js';
import type { InfrastructureTemplate } from './templates.js';

const NS = 'tenant-a';
const REF = { apiGroup: 'infrastructure.kindling.dev', kind: 'LocalMachineTemplate', name: 'small' };

const template = (cpu: string, resourceVersion: string): InfrastructureTemplate => ({
  apiVersion: 'infrastructure.kindling.dev/v1alpha1',
  kind: 'LocalMachineTemplate',
  metadata: { name: REF.name, namespace: NS, resourceVersion },
  status: { capacity: { cpu } },
});

/** An apiserver that counts every read and hands the test the open watch. */
function fakeApi(): {
  api: TemplateApi;
  calls: { versions: number; gets: number; lists: number };
  watch?: WatchRequest;
} {
  const state: ReturnType<typeof fakeApi> = {
    calls: { versions: 0, gets: 0, lists: 0 },
    api: {
      versionOf: () => {
        state.calls.versions++;
        return Promise.resolve('v1alpha1');
      },
      list: () => {
        state.calls.lists++;
        return Promise.resolve({ apiVersion: 'v1', items: [template('2', '1')], metadata: { resourceVersion: '1' } });
      },
      fallback: {
        capacityOf: () => {
          state.calls.gets++;
          return Promise.resolve({ cpu: '2' });
        },
      },
      watch: () => (req) => {
        state.watch = req;
        req.onConnected();
        return new Promise((resolve) => req.signal.addEventListener('abort', () => resolve(), { once: true }));
      },
    },
  };
  return state;
}

const pool = (min: number): NodePool =>
  nodePoolFixture('workers', NS, (p) => {
    p.spec.autoScaling = { min, max: 3 };
    p.spec.platform.infrastructureTemplateRef = REF;
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
      await until('the watch listed', () => cache.synced && fake.watch !== undefined);
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
      await until('the watch listed', () => cache.synced && fake.watch !== undefined);
      const opened = fake.watch;
      pools[0] = pool(1);
      cache.poolChanged(NS);
      assert.equal(opened?.signal.aborted, true, 'the watch is closed');
    } finally {
      await cache.stop();
    }
  });
});
