/**
 * A tenant's `<cluster>-kubeconfig` Secret carrying an `exec` plugin, against the real controller (in-process,
 * with its CSR approver) on the real test bed: no process runs, the pools of that cluster say why, the pools
 * of another cluster are left alone. The other cluster's kubeconfig is the management apiserver's own (its
 * /version is what the skew policy reads), so no second apiserver is needed.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import * as k8s from '#k8s';
import {
  eventually,
  installCapiCrds,
  installKindlingCrds,
  startCluster,
  writeKubeconfigSecret,
  type Cluster,
} from '../../test/bed/src/index.js';
import { createLogger } from '../../support/src/logger.js';
import type { Condition } from '../../api/src/conditions.js';
import type { NodePool } from '../../api/src/nodepool.js';
import { nodePoolFixture } from '../../api/testing/nodepool.js';
import { createNodePoolController, type NodePoolController } from './controller.js';

const NS = 'default';

const skewOf = (p: NodePool): Condition | undefined =>
  p.status?.conditions?.find((c) => c.type === 'SupportedVersionSkew');

describe('nodepool-controller with a guest kubeconfig Secret that carries code', () => {
  let mgmt: Cluster;
  let controller: NodePoolController;
  let objects: k8s.KubernetesObjectApi;
  let dir: string;
  let marker: string;
  const log = createLogger({ name: 'guest-kubeconfig-test', level: process.env['TEST_LOG_LEVEL'] ?? 'warn' });

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'guest-kubeconfig-'));
    marker = join(dir, 'exec-ran');
    mgmt = await startCluster({ name: 'mgmt' });
    await Promise.all([installKindlingCrds(mgmt), installCapiCrds(mgmt)]);
    objects = k8s.KubernetesObjectApi.makeApiClient(mgmt.kubeConfig);
    const credential = { apiVersion: 'client.authentication.k8s.io/v1', kind: 'ExecCredential', status: {} };
    const server = mgmt.kubeConfig.getCurrentCluster()?.server ?? '';
    await writeKubeconfigSecret(
      mgmt,
      NS,
      'evil',
      stringify({
        apiVersion: 'v1',
        kind: 'Config',
        clusters: [{ name: 'evil', cluster: { server } }],
        users: [
          {
            name: 'evil',
            user: {
              exec: {
                apiVersion: 'client.authentication.k8s.io/v1',
                command: '/bin/sh',
                args: ['-c', `touch '${marker}'; echo '${JSON.stringify(credential)}'`],
                interactiveMode: 'Never',
              },
            },
          },
        ],
        contexts: [{ name: 'evil', context: { cluster: 'evil', user: 'evil' } }],
        'current-context': 'evil',
      }),
    );
    await writeKubeconfigSecret(mgmt, NS, 'good', mgmt.kubeconfigYaml);
    controller = createNodePoolController({
      kubeConfig: mgmt.kubeConfig,
      log,
      config: { ignition: { endpoint: 'https://127.0.0.1:9', caPem: '' }, tokenGraceMs: 3600_000, maxSkewMinors: 3 },
      namespaces: [NS],
      workers: 2,
    });
    await controller.start();
  });
  after(async () => {
    await controller?.stop();
    await mgmt?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const skewWhenSet = (name: string): Promise<Condition> =>
    eventually(`pool ${name}'s SupportedVersionSkew`, async () =>
      skewOf(
        await objects.read<NodePool>({
          apiVersion: 'kindling.dev/v1beta1',
          kind: 'NodePool',
          metadata: { name, namespace: NS },
        }),
      ),
    );

  it("when a cluster's kubeconfig Secret carries exec, its pools should say GuestKubeconfigRefused with a Warning Event, no process should run, and another cluster's pools should not", async () => {
    const pools: [string, string][] = [
      ['evil-a', 'evil'],
      ['evil-b', 'evil'],
      ['good-a', 'good'],
    ];
    for (const [name, cluster] of pools)
      await objects.create(nodePoolFixture(name, NS, (p) => (p.spec.clusterName = cluster)));

    for (const name of ['evil-a', 'evil-b']) {
      const skew = await skewWhenSet(name);
      assert.equal(skew.status, 'False');
      assert.equal(skew.reason, 'GuestKubeconfigRefused');
      assert.match(skew.message, /users\[0\]\.user\.exec would run a command/);
    }
    const good = await skewWhenSet('good-a');
    assert.equal(good.status, 'True', good.message);
    assert.equal(good.reason, 'AsExpected');

    const core = mgmt.kubeConfig.makeApiClient(k8s.CoreV1Api);
    const warning = await eventually('the Warning Event on evil-a', async () =>
      (await core.listNamespacedEvent({ namespace: NS, fieldSelector: 'involvedObject.name=evil-a' })).items.find(
        (e) => e.reason === 'GuestKubeconfigRefused',
      ),
    );
    assert.equal(warning.type, 'Warning');
    assert.match(warning.message ?? '', /users\[0\]\.user\.exec/);

    // The approver's guest sessions and the reconciles have all seen the Secret by now; give a late one a moment.
    await controller.queue.drained();
    await new Promise((r) => setTimeout(r, 1_000));
    assert.equal(existsSync(marker), false, 'the exec plugin ran');
  });
});
