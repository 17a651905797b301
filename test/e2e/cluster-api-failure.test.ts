/**
 * A failed in-place update on the ClusterAPI engine, end to end on the local environment (`npm start`, the real
 * Cluster API manager calling Kindling's extension), in a file of its own (each e2e file keeps within the
 * runner's per-file budget): the `capi` pool moves to the sample release whose kubelet config the simulated
 * kubelet refuses; the agent fails the health gate and rolls its host back; the NodePool says which node and
 * why, `kindling status` says where the rollout halted, and Cluster API is told to come back later rather than
 * call again at once. `npm start` run again on that state comes up and still reports the halt. Moved back, the
 * pool converges with the same Machines.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { eventually } from '../bed/src/index.js';
import { CapiPool, POOL } from './cluster-api.js';
import { LocalEnvironment, useLocalEnvironment } from './environment.js';

const MINUTES = 60_000;

interface HookLine {
  hook?: string;
  status?: string;
  message?: string;
  time?: string;
}

describe('a failed update on the ClusterAPI in-place engine', { timeout: 30 * MINUTES }, () => {
  let env: LocalEnvironment;
  let pool: CapiPool;
  useLocalEnvironment(
    'capi-fail',
    (e) => {
      env = e;
      pool = new CapiPool(e);
    },
    { timeoutMs: 15 * MINUTES },
  );

  const updateMachineLines = async (): Promise<HookLine[]> =>
    (await readFile(join(env.stateDir, 'logs', 'inplace-upgrader.log'), 'utf8'))
      .split('\n')
      .filter((l) => l.includes('"hook":"UpdateMachine"'))
      .map((l) => JSON.parse(l) as HookLine);

  it('when the capi pool moves to a release the kubelet refuses, it should name the node and the reason on the pool, say halted in status, have Cluster API back off and come up again on a restart of npm start; moved back, it should bring every Machine back to UpToDate with the same UIDs', async () => {
    const uids = await pool.uids();
    const good = (await env.pool(POOL)).spec.release.image;
    const broken = good.replace(/:1\.36\.2$/, ':1.36.3-broken-kubelet');
    assert.notEqual(broken, good);
    const status = env.watchStatus(POOL);
    await env.patchPool(POOL, {
      spec: {
        release: { image: broken, allowPrerelease: true },
        management: { inPlace: { healthCheckTimeout: '30s' } },
      },
    });
    const failed = await eventually(
      'the pool to say the update failed, naming the node and the reason',
      async () => {
        const c = (await env.pool(POOL)).status?.conditions?.find((x) => x.type === 'UpdatingVersion');
        return c?.status === 'False' && c.reason === 'Failed' ? c : undefined;
      },
      12 * MINUTES,
      2000,
    );
    const node = /failed: (\S+): health check failed/.exec(failed.message)?.[1];
    assert.ok(node, failed.message);
    assert.ok(
      (await env.nodes(POOL)).some((n) => n.metadata?.name === node),
      `${node} is a node of ${POOL}`,
    );

    // Cluster API keeps to the answer's retryAfterSeconds: over a minute, a handful of calls, not one a second.
    const since = Date.now();
    await new Promise((r) => setTimeout(r, 60_000));
    const halted = (await updateMachineLines()).filter(
      (l) => Date.parse(l.time ?? '') >= since && /update halted/.test(l.message ?? ''),
    );
    assert.ok(halted.length >= 1 && halted.length <= 8, `${halted.length} halted UpdateMachine answers in 60 s`);
    assert.ok(
      halted.every((l) => l.status === 'Success'),
      JSON.stringify(halted.slice(-2)),
    );
    assert.match(await status.stop(), new RegExp(`halted: ${node}: health check failed`));

    await restartHalted(env, node);

    await env.patchPool(POOL, { spec: { release: { image: good } } });
    await eventually(
      'every capi Machine UpToDate and the pool Ready, on the same Machines',
      async () => (await pool.upToDate()) && (await pool.ready()) && (await pool.uids()).join() === uids.join(),
      10 * MINUTES,
      2000,
    );
    assert.deepEqual(await pool.uids(), uids, 'no Machine was replaced');
    const gate = (await env.pool(POOL)).status?.conditions?.find((x) => x.type === 'UpdatingVersion');
    assert.deepEqual([gate?.status, gate?.reason], ['False', 'AsExpected'], gate?.message);
  });
});

/**
 * `npm start` again on the state of a halted update comes up (a pool that is not Ready is reported, not waited
 * for), and the pool still says where the update halted.
 */
async function restartHalted(env: LocalEnvironment, node: string): Promise<void> {
  assert.equal(await env.stop(), 0, env.output.slice(-3000));
  env.output = '';
  await env.start({ timeoutMs: 10 * MINUTES, env: { KINDLING_READY_TIMEOUT: '30s' } });
  assert.match(env.output, new RegExp(`${POOL}: \\d+/\\d+ `), 'the restart does not report the capi pool');
  const after = (await env.pool(POOL)).status?.conditions?.find((x) => x.type === 'UpdatingVersion');
  assert.deepEqual([after?.status, after?.reason], ['False', 'Failed'], after?.message);
  assert.match(after?.message ?? '', new RegExp(`${node}: health check failed`));
}
