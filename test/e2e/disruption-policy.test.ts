/**
 * Node disruption policies end to end on the local environment (`npm start`): the `inplace` pool says that
 * /etc/quiet/ and /etc/motd need nothing and /etc/app.conf a restart of app.service. The hosts' first update
 * after boot, writing under /etc/quiet/ and dropping the motd MachineConfig they booted with, reaches every
 * host with no cordon, no drain and no reboot (same boot ID), /etc/motd gone, and an independent watcher of the
 * Nodes sees none unavailable: the agent weighs it against the config the host booted with, which the upgrader
 * hands over. A MachineConfig writing a path the policy does not name then drains and reboots every node; one
 * writing /etc/app.conf restarts only app.service (the simulated host's systemctl log), still without a drain.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as k8s from '#k8s';
import type { DisruptionPolicy } from '../../api/src/disruption.js';
import { HOST_PATHS } from '../../api/src/host-paths.js';
import { ANNOTATIONS, DRAIN_PREFIX } from '../../api/src/keys.js';
import { eventually, RestartingWatch } from '../bed/src/index.js';
import { LocalEnvironment, NS } from './environment.js';
import { everyHost, settled } from './in-place.js';

const MINUTES = 60_000;
const CONFIG_MAP = 'disruption';
const SYSTEMCTL_LOG = HOST_PATHS.simulatedSystemctl.slice(1);
const BOOT_ID = HOST_PATHS.bootId.slice(1);

const POLICY: DisruptionPolicy = {
  files: [
    { path: '/etc/quiet/', match: 'Prefix', actions: [{ type: 'None' }] },
    { path: '/etc/motd', actions: [{ type: 'None' }] },
    { path: '/etc/app.conf', actions: [{ type: 'Restart', unit: 'app.service' }] },
  ],
};

/** A MachineConfig writing each path with the given text. */
function machineConfig(files: Record<string, string>): string {
  const entries = Object.entries(files).map(
    ([path, text]) => `{ path: ${path}, mode: 420, contents: { source: "data:,${encodeURIComponent(text)}" } }`,
  );
  return [
    'apiVersion: machineconfiguration.openshift.io/v1',
    'kind: MachineConfig',
    'metadata: { name: 70-disruption }',
    'spec:',
    '  config:',
    '    ignition: { version: 3.2.0 }',
    `    storage: { files: [${entries.join(', ')}] }`,
  ].join('\n');
}

const isReady = (n: k8s.V1Node): boolean =>
  n.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') === true;
const asksDrain = (n: k8s.V1Node): boolean =>
  n.metadata?.annotations?.[ANNOTATIONS.desiredDrain]?.startsWith(DRAIN_PREFIX) === true;

/** Every inplace Node event: which nodes were ever seen unschedulable or asked to drain. */
class DisruptionWatcher {
  readonly unavailable = new Set<string>();
  readonly drained = new Set<string>();
  readonly #watch: RestartingWatch<k8s.V1Node>;

  constructor(kc: k8s.KubeConfig) {
    const selector = { labelSelector: 'kindling.dev/pool=inplace' };
    this.#watch = new RestartingWatch(kc, '/api/v1/nodes', selector, (_, n) => this.#observe(n));
  }

  #observe(n: k8s.V1Node): void {
    const name = n.metadata?.name ?? '';
    if (n.spec?.unschedulable === true || !isReady(n)) this.unavailable.add(name);
    if (asksDrain(n)) this.drained.add(name);
  }

  start(): Promise<void> {
    return this.#watch.start();
  }

  stop(): void {
    this.#watch.stop();
  }

  clear(): void {
    this.unavailable.clear();
    this.drained.clear();
  }
}

describe('node disruption policies on the local environment', { timeout: 40 * MINUTES }, () => {
  let env: LocalEnvironment;
  let stateDir: string;
  let watcher: DisruptionWatcher;
  let hosts: string[];

  before(async () => {
    stateDir = await mkdtemp(join(tmpdir(), 'kindling-e2e-disruption-'));
    env = new LocalEnvironment(stateDir);
    await env.start();
    hosts = await env.hosts('inplace');
    await env.mgmt.makeApiClient(k8s.CoreV1Api).createNamespacedConfigMap({
      namespace: NS,
      body: { metadata: { name: CONFIG_MAP }, data: { config: machineConfig({ '/etc/quiet/a.conf': 'a' }) } },
    });
    await env.patchPool('inplace', { spec: { management: { inPlace: { disruptionPolicy: POLICY } } } });
    watcher = new DisruptionWatcher(env.guest);
    await watcher.start();
  });

  after(async () => {
    watcher?.stop();
    const code = await env.stop();
    assert.equal(code, 0, env.output.slice(-3000));
    await rm(stateDir, { recursive: true, force: true });
  });

  /**
   * Moves the pool to the MachineConfig with these files (beside the sample motd one, unless `configs` says
   * otherwise) and waits for every host to have them, settled.
   */
  async function rollOut(files: Record<string, string>, configs = ['motd', CONFIG_MAP]): Promise<void> {
    watcher.clear();
    await env.mgmt
      .makeApiClient(k8s.CoreV1Api)
      .patchNamespacedConfigMap(
        { name: CONFIG_MAP, namespace: NS, body: { data: { config: machineConfig(files) } } },
        k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
      );
    await env.patchPool('inplace', { spec: { config: configs.map((name) => ({ name })) } });
    await eventually(
      `every inplace host with ${Object.keys(files).join(', ')}, every node settled`,
      async () => (await everyHost(hosts, (h) => hasFiles(env, h, files))) && (await settled(env)),
      12 * MINUTES,
      2000,
    );
  }

  const bootIds = (): Promise<(string | undefined)[]> => Promise.all(hosts.map((h) => env.hostFile(h, BOOT_ID)));
  const systemctl = (): Promise<(string | undefined)[]> =>
    Promise.all(hosts.map((h) => env.hostFile(h, SYSTEMCTL_LOG)));

  // First, and the hosts' first in-place update: it also writes the enablement links Ignition made as presets
  // at first boot (kubelet.service's), which must not count as a unit change.
  it('when the first update after boot changes only None-policy paths and drops a file the hosts booted with, it should change every host with no cordon, no drain and no reboot, and remove that file', async () => {
    assert.equal(hosts.length, 3);
    const boots = await bootIds();
    assert.ok(boots.every(Boolean), 'a host has no boot ID');
    assert.ok(await everyHost(hosts, async (h) => (await env.hostFile(h, 'etc/motd')) !== undefined));
    await rollOut({ '/etc/quiet/a.conf': 'quiet' }, [CONFIG_MAP]);
    assert.deepEqual(await bootIds(), boots, 'a host rebooted');
    assert.deepEqual([...watcher.drained], [], 'a node was asked to drain');
    assert.deepEqual([...watcher.unavailable], [], 'a node was unschedulable or not Ready');
    assert.deepEqual(await systemctl(), [undefined, undefined, undefined], 'a unit action ran');
    const motd = await Promise.all(hosts.map((h) => env.hostFile(h, 'etc/motd')));
    assert.deepEqual(motd, [undefined, undefined, undefined], 'the file the update dropped is still on a host');
  });

  it('when a MachineConfig writes a path the policy does not name, it should drain and reboot every node', async () => {
    const boots = await bootIds();
    await rollOut({ '/etc/unlisted.conf': 'x', '/etc/quiet/a.conf': 'quiet' });
    const after = await bootIds();
    hosts.forEach((h, i) => assert.notEqual(after[i], boots[i], `${h} did not reboot`));
    assert.deepEqual([...watcher.drained].sort(), [...hosts].sort());
  });

  it('when a MachineConfig writes a Restart-policy path, it should restart only that unit on every host, without a drain or reboot', async () => {
    const boots = await bootIds();
    await rollOut({ '/etc/unlisted.conf': 'x', '/etc/quiet/a.conf': 'quiet', '/etc/app.conf': 'app' });
    assert.deepEqual(await bootIds(), boots, 'a host rebooted');
    assert.deepEqual([...watcher.drained], [], 'a node was asked to drain');
    assert.deepEqual(await systemctl(), ['restart app.service\n', 'restart app.service\n', 'restart app.service\n']);
  });
});

async function hasFiles(env: LocalEnvironment, host: string, files: Record<string, string>): Promise<boolean> {
  const found = await Promise.all(
    Object.entries(files).map(async ([p, text]) => (await env.hostFile(host, p.slice(1))) === text),
  );
  return found.every(Boolean);
}
