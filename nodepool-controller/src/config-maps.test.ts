import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import * as k8s from '#k8s';
import type { NodePool } from '../../api/src/nodepool.js';
import { nodePoolFixture } from '../../api/testing/nodepool.js';
import { NotReadyError } from '../../support/src/errors.js';
import type { WatchRequest } from '../../support/src/informer.js';
import { createLogger } from '../../support/src/logger.js';
import {
  configMapKeys,
  isConfigMapName,
  ReferencedConfigMaps,
  selectorValue,
  type ConfigMapApi,
} from './config-maps.js';

const NS = 'tenant-a';

const configMap = (name: string): k8s.V1ConfigMap => ({
  apiVersion: 'v1',
  kind: 'ConfigMap',
  metadata: { name, namespace: NS, resourceVersion: '1' },
  data: { 'config.yaml': 'kind: MachineConfig' },
});

/** An apiserver holding the ConfigMaps `existing`, as a field selector on one name lists them; it records every
 * selector listed and keeps every watch open until it is aborted. */
function fakeApi(existing: string[]): { api: ConfigMapApi; selectors: string[]; watches: WatchRequest[] } {
  const state: ReturnType<typeof fakeApi> = {
    selectors: [],
    watches: [],
    api: {
      list: (_namespace, fieldSelector) => {
        state.selectors.push(fieldSelector);
        const items = existing.filter((n) => fieldSelector === `metadata.name=${n}`).map(configMap);
        return Promise.resolve({ apiVersion: 'v1', items, metadata: { resourceVersion: '1' } });
      },
      watch: () => (req) => {
        state.watches.push(req);
        req.onConnected();
        return new Promise((resolve) => req.signal.addEventListener('abort', () => resolve(), { once: true }));
      },
    },
  };
  return state;
}

const pool = (names: string[]): NodePool =>
  nodePoolFixture('workers', NS, (p) => {
    p.spec.config = names.map((name) => ({ name }));
  });

const cacheOf = (fake: ReturnType<typeof fakeApi>, pools: NodePool[]): ReferencedConfigMaps =>
  new ReferencedConfigMaps({
    kubeConfig: new k8s.KubeConfig(),
    log: createLogger({ name: 'test', level: 'silent' }),
    pools: () => pools,
    wake: () => undefined,
    configMapApi: fake.api,
  });

async function until(what: string, check: () => boolean): Promise<void> {
  for (const end = Date.now() + 5000; !check(); await new Promise((r) => setTimeout(r, 10)))
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
}

describe('isConfigMapName', () => {
  it('when a name is a DNS-1123 subdomain of at most 253 characters, it should accept it', () => {
    for (const name of ['a', 'machine-config', 'kubelet.v2', '0x', 'a'.repeat(253)])
      assert.equal(isConfigMapName(name), true, name);
  });

  it('when a name could not name any object (a selector character, upper case, an edge dash or dot, too long), it should refuse it', () => {
    for (const name of ['', 'a,b', 'a=b', 'a\\b', 'a b', 'a/b', 'Config', '-a', 'a-', '.a', 'a..b', 'a'.repeat(254)])
      assert.equal(isConfigMapName(name), false, JSON.stringify(name));
  });
});

describe('selectorValue', () => {
  it('when a value holds the selector syntax characters, it should escape each so the value adds no term', () => {
    assert.equal(selectorValue('a,b=c\\d'), 'a\\,b\\=c\\\\d');
    assert.equal(selectorValue('plain-name.v1'), 'plain-name.v1');
  });
});

describe('ReferencedConfigMaps', () => {
  it('when a pool names a ConfigMap by a name no object can have, it should open no watch for it and say at once that it is missing', async () => {
    const fake = fakeApi(['base']);
    const pools = [pool(['a,b', 'Upper=x', 'base'])];
    const cache = cacheOf(fake, pools);
    try {
      assert.deepEqual(configMapKeys(pools[0] as NodePool), [`${NS}/base`]);
      cache.poolChanged(NS);
      await until('the valid name listed', () => cache.synced);
      assert.deepEqual(fake.selectors, ['metadata.name=base'], 'no selector the apiserver would refuse');
      assert.equal(cache.get({ namespace: NS, name: 'a,b' }), undefined);
      assert.equal(cache.get({ namespace: NS, name: 'Upper=x' }), undefined);
      assert.equal(cache.get({ namespace: NS, name: 'base' })?.metadata?.name, 'base');
    } finally {
      await cache.stop();
    }
  });

  it('when every name a pool gives is invalid, it should stay synced (readiness does not wait on a watch that can never list)', async () => {
    const fake = fakeApi([]);
    const cache = cacheOf(fake, [pool(['a,b'])]);
    try {
      cache.poolChanged(NS);
      assert.equal(cache.synced, true);
      assert.equal(fake.selectors.length, 0);
      assert.equal(cache.get({ namespace: NS, name: 'a,b' }), undefined);
    } finally {
      await cache.stop();
    }
  });

  it('when a valid name has not listed yet, it should throw NotReadyError rather than call it missing', async () => {
    const fake = fakeApi([]);
    const cache = cacheOf(fake, [pool(['base'])]);
    try {
      assert.throws(() => cache.get({ namespace: NS, name: 'base' }), NotReadyError);
      cache.poolChanged(NS);
      await until('the watch listed', () => cache.synced);
      assert.equal(cache.get({ namespace: NS, name: 'base' }), undefined, 'listed, and it does not exist');
    } finally {
      await cache.stop();
    }
  });
});
