import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { startCluster, type Cluster } from '../../test/bed/src/index.js';

const FIXTURE = fileURLToPath(new URL('../testing/component-fixture.js', import.meta.url));

describe('runComponent on a real apiserver', () => {
  let cluster: Cluster;
  before(async () => {
    cluster = await startCluster({ name: 'component', controllerManager: false });
  });
  after(async () => cluster?.stop());

  it("when the leader's work fails to start, it should log it as fatal and exit 1", async () => {
    const child = spawn(
      process.execPath,
      [FIXTURE, `--kubeconfig=${cluster.kubeconfigPath}`, '--leader-election-namespace=default'],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
    const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
    clearTimeout(timer);
    assert.equal(code, 1, out);
    const fatal = out
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as { level: number; msg: string; err?: { message?: string } })
      .find((l) => l.level === 60);
    assert.ok(fatal, `no fatal log line:\n${out}`);
    assert.match(fatal.msg, /leader's work failed to start/);
    assert.match(fatal.err?.message ?? '', /could not start its informers/);
  });

  it('when the leader-election timings would let two replicas act at once, it should refuse to start', async () => {
    const child = spawn(
      process.execPath,
      [
        FIXTURE,
        `--kubeconfig=${cluster.kubeconfigPath}`,
        '--leader-elect-lease-duration=5s',
        '--leader-elect-renew-deadline=5s',
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let out = '';
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
    assert.notEqual(code, 0);
    assert.match(out, /renew deadline must be shorter than the lease duration/);
  });
});
