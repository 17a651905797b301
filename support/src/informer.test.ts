import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import * as k8s from '@kubernetes/client-node';
import { startCluster, kubeconfigFor, type Cluster } from '../../test/bed/src/index.js';
import { ResilientInformer, pagedList, type InformerEvent } from './informer.js';
import { loadCertificateAuthority } from './pki.js';
import { createLogger } from './logger.js';

const log = createLogger({ name: 'test', level: 'silent' });

async function until(what: string, check: () => boolean, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

function configMapInformer(kc: k8s.KubeConfig, events: [string, InformerEvent][], watchdogMs?: number): ResilientInformer<k8s.V1ConfigMap> {
  const core = kc.makeApiClient(k8s.CoreV1Api);
  return new ResilientInformer<k8s.V1ConfigMap>({
    kubeConfig: kc,
    path: '/api/v1/namespaces/default/configmaps',
    list: () => core.listNamespacedConfigMap({ namespace: 'default' }),
    log,
    onEvent: (o, e) => events.push([o.metadata?.name ?? '', e]),
    maxRestartDelayMs: 500,
    ...(watchdogMs === undefined ? {} : { watchdogMs }),
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
    await until('the add', () => informer.get('a', 'default') !== undefined);
    await core.replaceNamespacedConfigMap({ name: 'a', namespace: 'default', body: { metadata: { name: 'a' }, data: { v: '2' } } });
    await until('the update', () => informer.get('a', 'default')?.data?.v === '2');
    await core.deleteNamespacedConfigMap({ name: 'a', namespace: 'default' });
    await until('the delete', () => informer.get('a', 'default') === undefined);
    await informer.stop();
    assert.deepEqual(events.filter(([n]) => n === 'a').map(([, e]) => e), ['add', 'update', 'delete']);
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
      body: { metadata: { name: 'cm-reader' }, rules: [{ apiGroups: [''], resources: ['configmaps'], verbs: ['list', 'watch'] }] },
    });
    await rbac.createNamespacedRoleBinding({
      namespace: 'default',
      body: { metadata: { name: 'cm-reader' }, roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'cm-reader' }, subjects: [{ kind: 'User', name: 'limited', apiGroup: 'rbac.authorization.k8s.io' }] },
    });
    await started;
    assert.equal(informer.synced, true);
    const core = cluster.kubeConfig.makeApiClient(k8s.CoreV1Api);
    await core.createNamespacedConfigMap({ namespace: 'default', body: { metadata: { name: 'after-grant' } } });
    await until('the watch to deliver the new object', () => informer.get('after-grant', 'default') !== undefined);
    await informer.stop();
  });

  it('when listing in pages of 2 from the real apiserver, it should return every object', async () => {
    const core = cluster.kubeConfig.makeApiClient(k8s.CoreV1Api);
    for (let i = 0; i < 5; i++) await core.createNamespacedConfigMap({ namespace: 'default', body: { metadata: { name: `paged-${i}`, labels: { paged: 'yes' } } } });
    let pages = 0;
    const list = pagedList<k8s.V1ConfigMap>((page) => {
      pages++;
      return core.listNamespacedConfigMap({ namespace: 'default', labelSelector: 'paged=yes', ...page });
    }, 2);
    const all = await list();
    assert.deepEqual(all.items.map((c) => c.metadata?.name).sort(), ['paged-0', 'paged-1', 'paged-2', 'paged-3', 'paged-4']);
    assert.equal(pages, 3);
    assert.ok(all.metadata?.resourceVersion);
  });

  it('when the watchdog fires, it should relist and emit a resync of every cached object', async () => {
    const core = cluster.kubeConfig.makeApiClient(k8s.CoreV1Api);
    await core.createNamespacedConfigMap({ namespace: 'default', body: { metadata: { name: 'steady' } } });
    const events: [string, InformerEvent][] = [];
    const informer = configMapInformer(cluster.kubeConfig, events, 300);
    await informer.start();
    await until('two resyncs of the steady object', () => events.filter(([n, e]) => n === 'steady' && e === 'resync').length >= 2);
    await informer.stop();
  });
});

describe('pagedList', () => {
  it('when the apiserver answers in pages, it should follow the continue tokens and keep the first page\'s resourceVersion', async () => {
    const asked: (string | undefined)[] = [];
    const pages: Record<string, k8s.KubernetesListObject<k8s.V1ConfigMap>> = {
      start: { items: [{ metadata: { name: 'a' } }, { metadata: { name: 'b' } }], metadata: { resourceVersion: '42', _continue: 'p2' } },
      p2: { items: [{ metadata: { name: 'c' } }], metadata: { resourceVersion: '42', _continue: 'p3' } },
      p3: { items: [{ metadata: { name: 'd' } }], metadata: { resourceVersion: '42' } },
    };
    const list = pagedList<k8s.V1ConfigMap>(async ({ limit, _continue }) => {
      assert.equal(limit, 2);
      asked.push(_continue);
      return pages[_continue ?? 'start'] as k8s.KubernetesListObject<k8s.V1ConfigMap>;
    }, 2);
    const all = await list();
    assert.deepEqual(all.items.map((i) => i.metadata?.name), ['a', 'b', 'c', 'd']);
    assert.equal(all.metadata?.resourceVersion, '42');
    assert.equal(all.metadata?._continue, undefined);
    assert.deepEqual(asked, [undefined, 'p2', 'p3']);
  });
});
