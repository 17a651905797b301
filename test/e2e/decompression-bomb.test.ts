/**
 * End to end on the local environment (`npm start`), a decompression bomb: a MachineConfig whose one
 * file is a gzip of 700 MiB of zeros, which fits in a 1 MiB ConfigMap, added to a pool of each engine (`inplace`
 * on MachineSets, `capi` on Cluster API). Before the fix the ignition server handed the payload out, the
 * in-place decision inflated the file on the thread renewing its Lease (the inplace-upgrader's peak RSS reached
 * 1,731 MiB against its 512 Mi limit) and the agent wrote it onto every host, with no condition on either pool.
 * Now the ignition server refuses it while counting, each pool says why with the sizes, no host gets the file,
 * and every component's peak RSS (VmHWM, from /proc) stays under its Deployment's limit.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { gzipSync } from 'node:zlib';
import * as k8s from '#k8s';
import { eventually } from '../bed/src/index.js';
import { useLocalEnvironment, LocalEnvironment, NS } from './environment.js';

const MINUTES = 60_000;
const MIB = 1024 * 1024;
const BOMB_PATH = '/etc/kindling-bomb';
/** Each component's memory limit in deploy/base. */
const LIMITS_MIB = { 'inplace-upgrader': 512, 'ignition-server': 1024, 'nodepool-controller': 512, drainer: 512 };
const POOLS = ['inplace', 'capi'] as const;

/** 700 MiB of zeros as ten concatenated gzip members (one stream to any gunzip), as a MachineConfig. */
function bombConfig(): string {
  const member = gzipSync(Buffer.alloc(70 * MIB), { level: 9 });
  const source = `data:;base64,${Buffer.concat(Array.from({ length: 10 }, () => member)).toString('base64')}`;
  return JSON.stringify({
    apiVersion: 'machineconfiguration.openshift.io/v1',
    kind: 'MachineConfig',
    metadata: { name: '99-bomb' },
    spec: {
      config: {
        ignition: { version: '3.4.0' },
        storage: { files: [{ path: BOMB_PATH, mode: 420, contents: { source, compression: 'gzip' } }] },
      },
    },
  });
}

/** Peak resident memory of a process, in MiB. */
async function peakMib(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  return Number(/^VmHWM:\s+(\d+) kB/m.exec(status)?.[1] ?? NaN) / 1024;
}

describe('a decompression bomb in a MachineConfig, end to end', { timeout: 30 * MINUTES }, () => {
  let env: LocalEnvironment;
  useLocalEnvironment('bomb', (e) => (env = e), { timeoutMs: 15 * MINUTES });

  it('when a 700 MiB gzip of zeros is added to a pool of each engine, it should refuse it on both pools with the sizes, write nothing to any host, and keep every component under its memory limit', async (t) => {
    const data = bombConfig();
    assert.ok(data.length < MIB, `the ConfigMap holds ${data.length} bytes`);
    await env.mgmt.makeApiClient(k8s.CoreV1Api).createNamespacedConfigMap({
      namespace: NS,
      body: { metadata: { name: 'bomb', namespace: NS }, data: { 'bomb.yaml': data } },
    });
    for (const pool of POOLS) await env.patchPool(pool, { spec: { config: [{ name: 'bomb' }] } });

    for (const pool of POOLS) {
      const message = await eventually(
        `${pool}: ValidGeneratedPayload=False`,
        async () => {
          const c = (await env.pool(pool)).status?.conditions?.find((x) => x.type === 'ValidGeneratedPayload');
          return c?.status === 'False' && c.reason === 'InvalidConfig' ? c.message : undefined;
        },
        5 * MINUTES,
        1000,
      );
      assert.match(
        message,
        /MachineConfig 99-bomb \(storage\.files\[\/etc\/kindling-bomb\]\) inflates past the limit of 64 MiB/,
      );
    }
    // Long enough for the in-place decision and the agents to have acted on the payload, had they been handed it.
    await new Promise((r) => setTimeout(r, 30_000));

    for (const pool of POOLS)
      for (const host of await env.hosts(pool))
        assert.equal(await env.hostFile(host, BOMB_PATH), undefined, `${host} got the file`);
    const peaks: string[] = [];
    for (const [component, limit] of Object.entries(LIMITS_MIB)) {
      const pid = await env.pidOf(component);
      assert.ok(pid !== undefined, `${component} is running`);
      const peak = await peakMib(pid);
      peaks.push(`${component} ${Math.round(peak)} MiB`);
      assert.ok(peak < limit, `${component}: peak RSS ${Math.round(peak)} MiB, limit ${limit} MiB`);
    }
    t.diagnostic(`peak RSS under the bomb: ${peaks.join(', ')}`);
  });
});
