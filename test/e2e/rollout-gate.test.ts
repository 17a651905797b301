/**
 * Maintenance windows and the health gate end to end on the local environment (`npm start`), in a file of its
 * own (each e2e file keeps within the per-file time budget). The tests move the window, never the clock: a
 * window that opens in twelve hours is closed now, one that opens every minute for an hour is open now.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as k8s from '#k8s';
import { HOST_PATHS } from '../../api/src/host-paths.js';
import { ANNOTATIONS, DRAIN_PREFIX, HEALTH_GATE_CONSUMED } from '../../api/src/keys.js';
import type { MaintenanceWindow } from '../../api/src/nodepool.js';
import { eventually, SIMULATION } from '../bed/src/index.js';
import { LocalEnvironment, NS } from './environment.js';
import { settled } from './in-place.js';

const MINUTES = 60_000;
const CLOSED: MaintenanceWindow = { schedule: `0 ${(new Date().getUTCHours() + 12) % 24} * * *`, duration: '1h' };
const OPEN: MaintenanceWindow = { schedule: '* * * * *', duration: '1h' };
const osRelease = (version: string): string => `Kindling Linux ${version}\n`;
/** A file of the release's config on every host, which nothing on the host reads. */
const OS_RELEASE = 'etc/kindling/os-release';
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

describe('maintenance windows and the health gate on the local environment', { timeout: 40 * MINUTES }, () => {
  let env: LocalEnvironment;
  let stateDir: string;

  before(async () => {
    stateDir = await mkdtemp(join(tmpdir(), 'kindling-e2e-windows-'));
    env = new LocalEnvironment(stateDir);
    await env.start();
  });

  after(async () => {
    const code = await env.stop();
    assert.equal(code, 0, env.output.slice(-3000));
    await rm(stateDir, { recursive: true, force: true });
  });

  const machineSet = async (): Promise<{ metadata: k8s.V1ObjectMeta }> =>
    (await env.custom.getNamespacedCustomObject({
      group: 'cluster.x-k8s.io',
      version: 'v1beta2',
      namespace: NS,
      plural: 'machinesets',
      name: 'inplace',
    })) as { metadata: k8s.V1ObjectMeta };
  const target = async (): Promise<string | undefined> =>
    (await machineSet()).metadata.annotations?.[ANNOTATIONS.targetConfigHash];
  /** The inplace nodes handed `hash` (desiredConfig), by name. */
  const handedOut = async (hash: string): Promise<string[]> =>
    (await env.nodes('inplace'))
      .filter((n) => n.metadata?.annotations?.[ANNOTATIONS.desiredConfig] === hash)
      .map((n) => n.metadata?.name ?? '')
      .sort();
  const rolloutAllowed = async (): Promise<{ status: string; reason: string; message: string } | undefined> =>
    (await env.pool('inplace')).status?.conditions?.find((c) => c.type === 'RolloutAllowed');
  /** `check` holds on every look for `ms` (a few seconds apart): nothing moved. */
  const holdsFor = async (ms: number, check: () => Promise<void>): Promise<void> => {
    for (const end = Date.now() + ms; Date.now() < end; await sleep(3000)) await check();
  };
  const setHostDown = async (node: string, down: boolean): Promise<void> => {
    await env.guest
      .makeApiClient(k8s.CoreV1Api)
      .patchNode(
        { name: node, body: { metadata: { annotations: { [SIMULATION.hostDown]: down ? 'true' : null } } } },
        k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
      );
  };
  const unhealthyMachines = async (): Promise<number> =>
    (await env.machines('inplace')).filter((m) =>
      (m.status as { conditions?: { type: string; status: string }[] } | undefined)?.conditions?.some(
        (c) => c.type === 'NodeHealthy' && c.status !== 'True',
      ),
    ).length;
  /** Every node of the MachineSet at its target, as the upgrader records it. */
  const complete = async (): Promise<boolean> => {
    const ann = (await machineSet()).metadata.annotations ?? {};
    return ann[ANNOTATIONS.currentConfigHash] === ann[ANNOTATIONS.targetConfigHash];
  };
  const setMotd = async (text: string): Promise<void> => {
    const core = env.mgmt.makeApiClient(k8s.CoreV1Api);
    const cm = await core.readNamespacedConfigMap({ name: 'motd', namespace: NS });
    const config = (cm.data?.config ?? '').replace(/data:,[^"]*/, `data:,${encodeURIComponent(text)}`);
    assert.notEqual(config, cm.data?.config);
    await core.patchNamespacedConfigMap(
      { name: 'motd', namespace: NS, body: { data: { config } } },
      k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
    );
  };

  it('when a release upgrade is patched outside the window, it should hand out no node while labels change at once; the window opened, it should start; closed mid-rollout, it should finish the node under way and hand out no other; opened again, it should complete', async () => {
    const before = await target();
    assert.ok(before);
    const image = (await env.pool('inplace')).spec.release.image.replace(/:1\.36\.2$/, ':1.36.3');
    await env.patchPool('inplace', {
      spec: {
        release: { image },
        management: { maintenanceWindow: CLOSED },
        nodeLabels: { 'kindling.dev/pool': 'inplace', 'kindling.dev/window-test': 'labelled' },
      },
    });
    await eventually(
      'the new label on every inplace node, outside the window',
      async () =>
        (await env.nodes('inplace')).every((n) => n.metadata?.labels?.['kindling.dev/window-test'] === 'labelled'),
      2 * MINUTES,
      1000,
    );
    const held = await eventually(
      'RolloutAllowed False: waiting for the maintenance window',
      async () => {
        const c = await rolloutAllowed();
        return c?.reason === 'WaitingForMaintenanceWindow' && c.status === 'False' ? c : undefined;
      },
      2 * MINUTES,
      1000,
    );
    assert.match(held.message, /^waiting for the maintenance window \(opens \d{4}-\d\d-\d\dT\d\d:00Z\)$/);
    await holdsFor(60_000, async () => {
      assert.equal(await target(), before, 'the MachineSet moved to the new hash outside the window');
      const nodes = await env.nodes('inplace');
      const moving = nodes.filter(
        (n) =>
          n.metadata?.annotations?.[ANNOTATIONS.desiredConfig] !== n.metadata?.annotations?.[ANNOTATIONS.currentConfig],
      );
      assert.deepEqual(moving, [], 'a node was handed out outside the window');
    });

    await env.patchPool('inplace', { spec: { management: { maintenanceWindow: OPEN } } });
    const next = await eventually(
      'the rollout started in the window',
      async () => {
        const t = await target();
        return t !== before && t !== undefined && (await handedOut(t)).length > 0 ? t : undefined;
      },
      3 * MINUTES,
      1000,
    );
    await env.patchPool('inplace', { spec: { management: { maintenanceWindow: CLOSED } } });
    await eventually(
      'the MachineSet held',
      async () => (await machineSet()).metadata.annotations?.[ANNOTATIONS.rolloutHold] !== undefined,
      MINUTES,
      1000,
    );
    const underWay = await handedOut(next);
    assert.ok(underWay.length < 3, 'the window closed before every node was handed out');
    await eventually(
      'the node under way finished with the window closed',
      async () => {
        const nodes = await env.nodes('inplace');
        return underWay.every((name) =>
          nodes.some(
            (n) =>
              n.metadata?.name === name &&
              n.metadata.annotations?.[ANNOTATIONS.currentConfig] === next &&
              n.metadata.annotations[ANNOTATIONS.state] === 'Done',
          ),
        );
      },
      6 * MINUTES,
      2000,
    );
    await holdsFor(45_000, async () =>
      assert.deepEqual(await handedOut(next), underWay, 'a node handed out after the window closed'),
    );

    await env.patchPool('inplace', { spec: { management: { maintenanceWindow: OPEN } } });
    await eventually(
      'every inplace host at 1.36.3 once the window opened again',
      async () => {
        const hosts = await env.hosts('inplace');
        const files = await Promise.all(hosts.map((h) => env.hostFile(h, OS_RELEASE)));
        return hosts.length === 3 && files.every((f) => f === osRelease('1.36.3'));
      },
      12 * MINUTES,
      2000,
    );
  });

  it('when more nodes are NotReady than maxUnavailable, a config change should not start until they recover; the override should start one past the gate once', async () => {
    await env.patchPool('inplace', { spec: { management: { maintenanceWindow: null } } });
    await eventually('the previous rollout complete', complete, 5 * MINUTES, 2000);
    const nodes = (await env.nodes('inplace')).map((n) => n.metadata?.name ?? '').sort();
    const down = nodes.slice(0, 2);
    await Promise.all(down.map((n) => setHostDown(n, true)));
    try {
      await eventually(
        'two inplace Machines with an unhealthy node',
        async () => (await unhealthyMachines()) === 2,
        4 * MINUTES,
        2000,
      );
      const before = await target();
      await setMotd('Held by the health gate\n');
      const gate = await eventually(
        'RolloutAllowed False: too many nodes unavailable',
        async () => {
          const c = await rolloutAllowed();
          return c?.reason === 'TooManyNodesUnavailable' ? c : undefined;
        },
        2 * MINUTES,
        1000,
      );
      assert.match(gate.message, /2 node\(s\) are unavailable, more than maxUnavailable 1/);
      await holdsFor(30_000, async () => assert.equal(await target(), before, 'the rollout started past the gate'));

      await Promise.all(down.map((n) => setHostDown(n, false)));
      await eventually(
        'the rollout started once the nodes recovered',
        async () => (await target()) !== before,
        4 * MINUTES,
        2000,
      );
      await eventually(
        'the config rollout complete, every Machine healthy',
        async () => (await complete()) && (await unhealthyMachines()) === 0,
        10 * MINUTES,
        2000,
      );

      await Promise.all(down.map((n) => setHostDown(n, true)));
      await eventually(
        'two inplace Machines unhealthy again',
        async () => (await unhealthyMachines()) === 2,
        4 * MINUTES,
        2000,
      );
      const held = await target();
      await setMotd('Started past the health gate\n');
      await eventually(
        'held by the health gate',
        async () => (await rolloutAllowed())?.reason === 'TooManyNodesUnavailable',
        2 * MINUTES,
        1000,
      );
      assert.equal(await target(), held);
      await env.mgmt.makeApiClient(k8s.CustomObjectsApi).patchNamespacedCustomObject(
        {
          group: 'kindling.dev',
          version: 'v1beta1',
          namespace: NS,
          plural: 'nodepools',
          name: 'inplace',
          body: {
            metadata: { annotations: { [ANNOTATIONS.overrideHealthGate]: 'e2e: two hosts are being repaired' } },
          },
        },
        k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
      );
      const started = await eventually(
        'the rollout started past the gate',
        async () => {
          const t = await target();
          return t !== held ? t : undefined;
        },
        2 * MINUTES,
        1000,
      );
      const pool = await env.pool('inplace');
      assert.equal(pool.metadata.annotations?.[ANNOTATIONS.overrideHealthGate], `${HEALTH_GATE_CONSUMED}${started}`);
      // Once it runs, a rollout is not gated again: the override covered its start, the nodes still down.
      assert.notEqual((await rolloutAllowed())?.reason, 'TooManyNodesUnavailable');
    } finally {
      await Promise.all(down.map((n) => setHostDown(n, false)));
    }
  });

  it('when a config change the disruption policy applies with neither a drain nor a reboot comes outside the window, it should complete at once', async () => {
    await eventually('the previous rollout complete', complete, 10 * MINUTES, 2000);
    const quiet = { files: [{ path: '/etc/motd', actions: [{ type: 'None' }] }] };
    await env.patchPool('inplace', {
      spec: { management: { maintenanceWindow: CLOSED, inPlace: { disruptionPolicy: quiet } } },
    });
    try {
      const before = await target();
      await setMotd('A quiet change\n');
      await eventually(
        'the quiet change on every inplace host, the window closed',
        async () => {
          const hosts = await env.hosts('inplace');
          const files = await Promise.all(hosts.map((h) => env.hostFile(h, 'etc/motd')));
          const moved = (await target()) !== before;
          return moved && (await complete()) && files.every((f) => f === 'A quiet change\n');
        },
        6 * MINUTES,
        2000,
      );
      assert.notEqual((await rolloutAllowed())?.reason, 'WaitingForMaintenanceWindow');
    } finally {
      await env.patchPool('inplace', {
        spec: { management: { maintenanceWindow: null, inPlace: { disruptionPolicy: null } } },
      });
    }
  });

  // A file of the config drifted on one host: its agent rewrites it, weighed as a change the policy names no action
  // for (a reboot), whether the host has the agent's record or not (then the config it booted with is not what it
  // holds, and the agent plans against the host alone).
  it('when a quiet change comes outside the window and a host drifted from its config, its agent should apply nothing (no drain, no reboot) and say why; the window opened, it should complete', async () => {
    await eventually('the previous rollout complete', complete, 10 * MINUTES, 2000);
    const quiet = { files: [{ path: '/etc/motd', actions: [{ type: 'None' }] }] };
    await env.patchPool('inplace', {
      spec: { management: { maintenanceWindow: CLOSED, inPlace: { disruptionPolicy: quiet } } },
    });
    const hosts = await env.hosts('inplace');
    const drifted = hosts[0] ?? '';
    const bootIds = (): Promise<(string | undefined)[]> =>
      Promise.all(hosts.map((h) => env.hostFile(h, HOST_PATHS.bootId.slice(1))));
    const boots = await bootIds();
    const release = await env.hostFile(drifted, OS_RELEASE);
    await writeFile(join(env.hostRoot(drifted), OS_RELEASE), 'edited by hand\n');
    try {
      const before = await target();
      await setMotd('Quiet, but not on a drifted host\n');
      const ann = await eventually(
        'the drifted node Degraded by the ceiling',
        async () => {
          const node = (await env.nodes('inplace')).find((n) => n.metadata?.name === drifted);
          const own = node?.metadata?.annotations ?? {};
          return own[ANNOTATIONS.state] === 'Degraded' ? own : undefined;
        },
        6 * MINUTES,
        2000,
      );
      assert.match(
        ann[ANNOTATIONS.reason] ?? '',
        /^the update needs a reboot; waiting for the maintenance window \(opens .*\): nothing applied/,
      );
      const next = await target();
      assert.notEqual(next, before);
      assert.equal(ann[ANNOTATIONS.ceilingHeld], next, 'the agent did not mark the node as waiting for the window');
      // Waiting for the window is not a failure: the pool says so with a reason of its own.
      const updating = await eventually(
        'UpdatingConfig waiting for the maintenance window',
        async () => {
          const conditions = (await env.pool('inplace')).status?.conditions ?? [];
          const c = conditions.find((x) => x.type === 'UpdatingConfig');
          return c?.reason === 'WaitingForMaintenanceWindow' ? c : undefined;
        },
        MINUTES,
        1000,
      );
      assert.equal(updating.status, 'True');
      assert.match(updating.message, /needs a reboot; waiting for the maintenance window/);
      await holdsFor(30_000, async () => {
        assert.deepEqual(await bootIds(), boots, 'a host rebooted outside the window');
        const drains = (await env.nodes('inplace')).filter(
          (n) => n.metadata?.annotations?.[ANNOTATIONS.desiredDrain] === `${DRAIN_PREFIX}${next}`,
        );
        assert.deepEqual(drains, [], 'a node asked for a drain outside the window');
        assert.equal(await env.hostFile(drifted, OS_RELEASE), 'edited by hand\n', 'the drifted host was changed');
      });

      await env.patchPool('inplace', { spec: { management: { maintenanceWindow: OPEN } } });
      await eventually(
        'the quiet change on every host, the drifted one rebooted into its config, once the window opened',
        async () => {
          const motd = await Promise.all(hosts.map((h) => env.hostFile(h, 'etc/motd')));
          const fixed = (await env.hostFile(drifted, OS_RELEASE)) === release;
          return fixed && motd.every((f) => f === 'Quiet, but not on a drifted host\n') && (await settled(env));
        },
        10 * MINUTES,
        2000,
      );
      assert.notEqual((await bootIds())[0], boots[0], 'the drifted host rebooted in the window');
    } finally {
      await env.patchPool('inplace', {
        spec: { management: { maintenanceWindow: null, inPlace: { disruptionPolicy: null } } },
      });
    }
  });
});
