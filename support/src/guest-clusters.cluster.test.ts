/**
 * The guest sessions the drainer and the upgrader keep, on a real apiserver: a tenant's `<cluster>-kubeconfig`
 * Secret that carries an `exec` plugin opens no session, runs no process, and its refusal is logged once however
 * often the Secret is seen again, while a good Secret next to it opens its session; a Secret outside the served
 * namespaces is never seen at all.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import * as k8s from '#k8s';
import { eventually, startCluster, writeKubeconfigSecret, type Cluster } from '../../test/bed/src/index.js';
import { kubeconfigSecretName } from '../../api/src/keys.js';
import { GuestClusters, type GuestCluster } from './guest-clusters.js';
import { createLogger } from './logger.js';
import { sleep } from './timers.js';

const NS = 'default';

describe('GuestClusters on a real apiserver', () => {
  let cluster: Cluster;
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'guest-clusters-'));
    cluster = await startCluster({ name: 'guest-clusters', controllerManager: false });
    const core = cluster.kubeConfig.makeApiClient(k8s.CoreV1Api);
    for (const name of ['tenant-a', 'elsewhere']) await core.createNamespace({ body: { metadata: { name } } });
  });
  after(async () => {
    await cluster?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('when a Secret carries exec, it should open no session, run nothing and log the refusal once', async () => {
    const marker = join(dir, 'exec-ran');
    const credential = { apiVersion: 'client.authentication.k8s.io/v1', kind: 'ExecCredential', status: {} };
    const evil = stringify({
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [{ name: 'evil', cluster: { server: cluster.kubeConfig.getCurrentCluster()?.server } }],
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
    });
    await writeKubeconfigSecret(cluster, NS, 'evil', evil);
    await writeKubeconfigSecret(cluster, NS, 'good', cluster.kubeconfigYaml);

    const lines: { msg?: string; cluster?: string }[] = [];
    const destination = { write: (line: string) => void lines.push(JSON.parse(line) as { msg?: string }) };
    const opened: string[] = [];
    const guests = new GuestClusters<GuestCluster>({
      kubeConfig: cluster.kubeConfig,
      namespaces: [NS],
      log: createLogger({ name: 'test', level: 'warn', destination }),
      create: (c) => c,
      // A session's informers would send requests with the kubeconfig: one request stands for them.
      start: async (c) => void (await c.kubeConfig.makeApiClient(k8s.VersionApi).getCode()),
      close: () => Promise.resolve(),
      onOpened: (c) => void opened.push(c.key),
    });
    await guests.start();
    try {
      await eventually('the good session', () => Promise.resolve(opened.includes(`${NS}/good`)));
      // Seen again with the same kubeconfig (a label changed): not parsed or logged again.
      await cluster.kubeConfig
        .makeApiClient(k8s.CoreV1Api)
        .patchNamespacedSecret(
          { name: kubeconfigSecretName('evil'), namespace: NS, body: { metadata: { labels: { seen: 'again' } } } },
          k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
        );
      await new Promise((r) => setTimeout(r, 1_000));
      assert.deepEqual(opened, [`${NS}/good`]);
      assert.equal(guests.get(`${NS}/evil`), undefined);
      assert.equal(existsSync(marker), false, 'the exec plugin ran');
      const refusals = lines.filter((l) => l.cluster === `${NS}/evil`);
      assert.equal(refusals.length, 1, JSON.stringify(lines));
      assert.match(JSON.stringify(refusals[0]), /users\[0\]\.user\.exec would run a command/);
    } finally {
      await guests.stop();
    }
  });
  it('when a labelled kubeconfig Secret is written outside --namespaces, it should never open a session for it', async () => {
    const opened: string[] = [];
    const clusters = new GuestClusters<string>({
      kubeConfig: cluster.kubeConfig,
      namespaces: ['tenant-a'],
      log: createLogger({ name: 'test', level: 'silent' }),
      create: (c) => c.key,
      start: async (key) => void opened.push(key),
      close: async () => undefined,
    });
    await clusters.start();
    try {
      await writeKubeconfigSecret(cluster, 'elsewhere', 'attacker', cluster.kubeconfigYaml);
      await writeKubeconfigSecret(cluster, 'tenant-a', 'guest', cluster.kubeconfigYaml);
      await eventually('the tenant session', () => Promise.resolve(opened.includes('tenant-a/guest')));
      // The Secret outside was written first: had it been seen, its session would have opened before this one.
      await sleep(500);
      assert.deepEqual(opened, ['tenant-a/guest']);
      assert.deepEqual(
        clusters.open().map((o) => o.cluster.key),
        ['tenant-a/guest'],
      );
    } finally {
      await clusters.stop();
    }
  });
});
