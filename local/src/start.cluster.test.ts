/**
 * The README's first command, end to end: `node dist/local/src/start.js` brings up the clusters, the real
 * Cluster API manager and every Kindling component; both sample NodePools become Ready with hosts booted
 * through the real Ignition client from the ignition server; a second start on the same state folder resumes
 * the same clusters and replaces no Machine.
 */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtemp, readFile, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as k8s from '#k8s';
import { startCluster, eventually } from '../../test/bed/src/index.js';

const START = fileURLToPath(new URL('./start.js', import.meta.url));
const NS = 'tenants';

function runStart(stateDir: string): string {
  const r = spawnSync(process.execPath, [START, `--state-dir=${stateDir}`, '--exit-after-start'], {
    encoding: 'utf8',
    timeout: 400_000,
  });
  assert.equal(r.status, 0, `start failed:\n${r.stdout}\n${r.stderr}`);
  return r.stdout;
}

/** Machine name → UID, read by reopening the (stopped) management cluster's state. */
async function machineUids(stateDir: string): Promise<Record<string, string>> {
  const mgmt = await startCluster({ name: 'management', dir: join(stateDir, 'management'), controllerManager: false });
  try {
    const objects = k8s.KubernetesObjectApi.makeApiClient(mgmt.kubeConfig);
    // Right after /readyz, custom-resource storage may still answer 429 "storage is (re)initializing".
    const list = await eventually('the Machines to be readable', () =>
      objects.list('cluster.x-k8s.io/v1beta2', 'Machine', NS),
    );
    return Object.fromEntries(list.items.map((m) => [m.metadata?.name ?? '', m.metadata?.uid ?? '']));
  } finally {
    await mgmt.stop();
  }
}

describe('npm start (local environment)', () => {
  it('when --replicas is below 1, it should refuse at once with a clear error and start nothing', async () => {
    const stateDir = await mkdtemp(join(tmpdir(), 'kindling-local-'));
    after(() => rm(stateDir, { recursive: true, force: true }));
    const r = spawnSync(process.execPath, [START, `--state-dir=${stateDir}`, '--replicas=0'], {
      encoding: 'utf8',
      timeout: 30_000,
    });
    assert.equal(r.status, 1);
    assert.match(r.stderr, /^--replicas must be at least 1, not 0\n$/);
    assert.deepEqual(await readdir(stateDir), [], 'nothing was started or written');
  });

  it('when started twice on the same state folder, it should bring every sample pool Ready through Ignition and resume without replacing a Machine', async () => {
    const stateDir = await mkdtemp(join(tmpdir(), 'kindling-local-'));
    after(() => rm(stateDir, { recursive: true, force: true }));

    const first = runStart(stateDir);
    assert.match(first, /inplace: 3\/3 Ready/);
    assert.match(first, /replace: 2\/2 Ready/);
    assert.match(first, /capi: 2\/2 Ready/);
    assert.match(first, /Stopped; nothing left running\./);
    const hosts = (await readdir(join(stateDir, 'hosts', NS))).sort();
    assert.equal(hosts.length, 7, 'inplace 3, replace 2, capi 2');
    for (const host of hosts.filter((h) => h.startsWith('inplace-'))) {
      assert.equal(
        await readFile(join(stateDir, 'hosts', NS, host, 'etc/motd'), 'utf8'),
        'Welcome to a Kindling node\n',
      );
      assert.equal(
        await readFile(join(stateDir, 'hosts', NS, host, 'etc/kindling/os-release'), 'utf8'),
        'Kindling Linux 1.36.2\n',
      );
    }
    const before = await machineUids(stateDir);
    assert.equal(Object.keys(before).length, 7);

    const second = runStart(stateDir);
    assert.match(second, /inplace: 3\/3 Ready/);
    assert.deepEqual(await machineUids(stateDir), before);
    assert.deepEqual((await readdir(join(stateDir, 'hosts', NS))).sort(), hosts);
  });
});
