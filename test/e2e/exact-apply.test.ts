/**
 * Exact apply end to end on the local environment (`npm start`), in a file of its own (each e2e file keeps
 * within the per-file time budget): a MachineConfig adding a file in a new folder and an enabled unit goes to
 * the InPlace pool and is then removed from it. Every host must end as it was before: the file, its folder,
 * the unit and its enablement link gone, the host's own files untouched.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { lstat, readlink } from 'node:fs/promises';
import { join } from 'node:path';
import * as k8s from '#k8s';
import { tree } from '../../node-agent/testing/agent.js';
import { eventually } from '../bed/src/index.js';
import { useLocalEnvironment, LocalEnvironment, NS } from './environment.js';
import { everyHost, settled } from './in-place.js';

const MINUTES = 60_000;
const CONFIG_MAP = 'exact';
const FILE = 'etc/exact/extra.conf';
const UNIT = 'etc/systemd/system/exact.service';
const WANTS = 'etc/systemd/system/multi-user.target.wants/exact.service';

const MACHINE_CONFIG = [
  'apiVersion: machineconfiguration.openshift.io/v1',
  'kind: MachineConfig',
  'metadata: { name: 70-exact }',
  'spec:',
  '  config:',
  '    ignition: { version: 3.2.0 }',
  '    storage: { files: [{ path: /etc/exact/extra.conf, mode: 420, contents: { source: "data:,extra%0A" } }] }',
  '    systemd:',
  '      units:',
  '        - name: exact.service',
  '          enabled: true',
  '          contents: "[Service]\\nExecStart=/bin/true\\n[Install]\\nWantedBy=multi-user.target\\n"',
].join('\n');

describe('exact apply on the local environment', { timeout: 35 * MINUTES }, () => {
  let env: LocalEnvironment;
  useLocalEnvironment('exact', (e) => (env = e));

  it('when a MachineConfig that added a file and an enabled unit is removed from the InPlace pool, it should be gone from every host, the host own files untouched', async () => {
    const hosts = await env.hosts('inplace');
    assert.equal(hosts.length, 3);
    const etcBefore = new Map(await Promise.all(hosts.map(async (h) => [h, await etcOf(env, h)] as const)));
    const core = env.mgmt.makeApiClient(k8s.CoreV1Api);
    await core.createNamespacedConfigMap({
      namespace: NS,
      body: { metadata: { name: CONFIG_MAP }, data: { config: MACHINE_CONFIG } },
    });
    await env.patchPool('inplace', { spec: { config: [{ name: 'motd' }, { name: CONFIG_MAP }] } });
    await eventually(
      'every inplace host with the file, the unit and its enablement link, every node settled',
      async () => (await everyHost(hosts, (h) => added(env, h))) && (await settled(env)),
      12 * MINUTES,
      2000,
    );

    await env.patchPool('inplace', { spec: { config: [{ name: 'motd' }] } });
    await eventually(
      'every inplace host without them, every node settled',
      async () => (await everyHost(hosts, async (h) => !(await anyLeft(env, h)))) && (await settled(env)),
      12 * MINUTES,
      2000,
    );
    for (const h of hosts) assert.deepEqual(await etcOf(env, h), etcBefore.get(h), `${h}'s /etc is not as before`);
  });
});

/**
 * A host's /etc but for multi-user.target.wants: the boot payload enables kubelet.service, which Ignition did
 * with a preset and the agent does with the link systemctl makes; the test checks exact.service's link itself.
 */
async function etcOf(env: LocalEnvironment, host: string): Promise<string[]> {
  const etc = await tree(join(env.hostRoot(host), 'etc'));
  return etc.filter((e) => !e.startsWith('systemd/system/multi-user.target.wants/'));
}

async function added(env: LocalEnvironment, host: string): Promise<boolean> {
  const root = env.hostRoot(host);
  return (
    (await env.hostFile(host, FILE)) === 'extra\n' &&
    (await env.hostFile(host, UNIT)) !== undefined &&
    (await readlink(join(root, WANTS)).catch(() => '')) === '/etc/systemd/system/exact.service'
  );
}

async function anyLeft(env: LocalEnvironment, host: string): Promise<boolean> {
  const root = env.hostRoot(host);
  const left = await Promise.all(
    // lstat: the enablement link's absolute target means nothing on this machine.
    [FILE, UNIT, WANTS, 'etc/exact'].map((p) =>
      lstat(join(root, p)).then(
        () => true,
        (err: NodeJS.ErrnoException) => err.code !== 'ENOENT',
      ),
    ),
  );
  return left.some(Boolean);
}
