/**
 * The README's first command, end to end: `node dist/local/src/start.js` brings the environment up, stops
 * cleanly, and a second start resumes the same clusters (same etcd data, same credentials).
 */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startCluster } from '../../test/bed/src/index.js';

const START = fileURLToPath(new URL('./start.js', import.meta.url));

function runStart(stateDir: string): string {
  const r = spawnSync(process.execPath, [START, `--state-dir=${stateDir}`, '--exit-after-start'], { encoding: 'utf8', timeout: 120_000 });
  assert.equal(r.status, 0, `start failed:\n${r.stdout}\n${r.stderr}`);
  return r.stdout;
}

describe('npm start (local environment)', () => {
  it('when started twice on the same state folder, it should come up, stop cleanly and resume the same clusters', async () => {
    const stateDir = await mkdtemp(join(tmpdir(), 'kindling-local-'));
    after(() => rm(stateDir, { recursive: true, force: true }));
    const first = runStart(stateDir);
    assert.match(first, /Kindling is up\./);
    assert.match(first, /Stopped; nothing left running\./);

    // Between runs the clusters are down: reopen the management cluster's state to mark it, as a user would.
    const mgmt = await startCluster({ name: 'management', dir: join(stateDir, 'management'), controllerManager: false });
    const { CoreV1Api } = await import('@kubernetes/client-node');
    const core = mgmt.kubeConfig.makeApiClient(CoreV1Api);
    const marker = await core.createNamespacedConfigMap({ namespace: 'tenants', body: { metadata: { name: 'marker' } } });
    await mgmt.stop();

    const second = runStart(stateDir);
    assert.match(second, /Kindling is up\./);
    const again = await startCluster({ name: 'management', dir: join(stateDir, 'management'), controllerManager: false });
    try {
      const read = await again.kubeConfig.makeApiClient(CoreV1Api).readNamespacedConfigMap({ name: 'marker', namespace: 'tenants' });
      assert.equal(read.metadata?.uid, marker.metadata?.uid);
    } finally {
      await again.stop();
    }
  });
});
