/**
 * The CRD upgrade path (docs/api-versions.md): a management cluster installed with the previous NodePool CRD
 * (api/testing/crds-previous/, frozen) and NodePools created under it; the current api/crds applied over it
 * by server-side apply, as an upgrade of Kindling applies them. Every existing NodePool must stay readable
 * unchanged, valid under the new schema (a fresh copy of its spec passes validation without ratcheting) and
 * writable, and nothing stored may need a conversion.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import * as k8s from '#k8s';
import { eventually, installCrds, installKindlingCrds, startCluster, type Cluster } from '../../test/bed/src/index.js';
import { NODEPOOL_API_VERSION, type NodePool } from './nodepool.js';
import { RESOURCES } from './resources.js';
import { nodePoolFixture, sampleInPlacePool, samplePool } from '../testing/nodepool.js';

const PREVIOUS = fileURLToPath(new URL('../../../api/testing/crds-previous/', import.meta.url));
const NS = 'default';
const POOLS: NodePool[] = [
  nodePoolFixture('plain', NS),
  samplePool((p) => (p.metadata = { name: 'replace', namespace: NS })),
  sampleInPlacePool((p) => (p.metadata = { name: 'inplace', namespace: NS })),
  nodePoolFixture('autoscaled', NS, (p) => {
    delete p.spec.replicas;
    p.spec.autoScaling = { min: 1, max: 5 };
  }),
];
const APPLY = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.ServerSideApply);

describe('the NodePool CRD upgraded over the previous one, on the real test bed', () => {
  let mgmt: Cluster;
  let custom: k8s.CustomObjectsApi;
  const before_: Map<string, NodePool> = new Map();

  before(async () => {
    mgmt = await startCluster({ name: 'mgmt', controllerManager: false });
    custom = mgmt.kubeConfig.makeApiClient(k8s.CustomObjectsApi);
    await installCrds(mgmt, PREVIOUS);
    for (const pool of POOLS) {
      const created = (await custom.createNamespacedCustomObject({
        ...RESOURCES.nodePools,
        namespace: NS,
        body: pool,
      })) as NodePool;
      before_.set(pool.metadata.name, created);
    }
    await installKindlingCrds(mgmt);
    // The apiserver rebuilds a CRD's storage when its schema changes and answers 429 "storage is
    // (re)initializing" meanwhile: clients (the informers) retry, and so does this.
    await eventually('the NodePools served under the new schema', () =>
      custom.listNamespacedCustomObject({ ...RESOURCES.nodePools, namespace: NS }),
    );
  });

  after(async () => {
    await mgmt?.stop();
  });

  it('when the current CRDs are applied over the previous ones, it should keep storing only v1beta1, so nothing needs a conversion', async () => {
    const crd = await mgmt.kubeConfig
      .makeApiClient(k8s.ApiextensionsV1Api)
      .readCustomResourceDefinition({ name: 'nodepools.kindling.dev' });
    assert.deepEqual(crd.status?.storedVersions, [NODEPOOL_API_VERSION.split('/')[1]]);
  });

  it('when a NodePool created under the previous CRD is read after the upgrade, it should come back with the spec it was created with', async () => {
    const list = (await custom.listNamespacedCustomObject({ ...RESOURCES.nodePools, namespace: NS })) as {
      items: NodePool[];
    };
    assert.deepEqual(list.items.map((p) => p.metadata.name).sort(), [...before_.keys()].sort());
    for (const pool of list.items)
      assert.deepEqual(pool.spec, before_.get(pool.metadata.name)?.spec, pool.metadata.name);
  });

  it('when an existing NodePool is validated by the new schema from scratch (no ratcheting), it should be valid', async () => {
    for (const name of before_.keys()) {
      const stored = (await custom.getNamespacedCustomObject({
        ...RESOURCES.nodePools,
        namespace: NS,
        name,
      })) as NodePool;
      await custom.createNamespacedCustomObject({
        ...RESOURCES.nodePools,
        namespace: NS,
        dryRun: 'All',
        body: {
          apiVersion: stored.apiVersion,
          kind: stored.kind,
          metadata: { name: `${name}-copy` },
          spec: stored.spec,
        },
      });
    }
  });

  it('when a field manager writes an existing NodePool after the upgrade, it should be accepted', async () => {
    for (const name of before_.keys()) {
      const applied = (await custom.patchNamespacedCustomObject(
        {
          ...RESOURCES.nodePools,
          namespace: NS,
          name,
          fieldManager: 'crd-upgrade-test',
          force: true,
          body: {
            apiVersion: NODEPOOL_API_VERSION,
            kind: 'NodePool',
            metadata: { name, labels: { upgraded: 'true' } },
          },
        },
        APPLY,
      )) as NodePool;
      assert.equal(applied.metadata.labels?.upgraded, 'true');
    }
  });
});
