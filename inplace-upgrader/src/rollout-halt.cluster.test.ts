/**
 * In-place rollouts that stop, on the real test bed (as rollout.cluster.test.ts, with 4 nodes, in a file of its own so
 * each stays within the per-file time budget): the real ignition server renders each payload, a real
 * `kindling agent` runs per node against its own root (AgentFleet, which also plays each host's kubelet at
 * boot: boot ID, versions, Ready=False while the root's kubelet config is one the kubelet refuses), the
 * upgrader and the drainer run in process.
 *
 * - pausedUntil (the MachineSet's cluster.x-k8s.io/paused) mid-rollout: no node is handed out, nodes handed out
 *   finish, the progress says where it stopped; cleared, the rollout completes.
 * - A payload whose kubelet config the kubelet refuses: the first node fails the health gate, is rolled back to
 *   its old files and stays Degraded with the reason, no other node is touched, its Machine is spared from
 *   remediation.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import * as k8s from '#k8s';
import { ANNOTATIONS } from '../../api/src/keys.js';
import { CAPI_GROUP } from '../../api/src/capi.js';
import { createLogger } from '../../support/src/logger.js';
import type { Drainer } from '../../drainer/src/drainer.js';
import { eventually } from '../../drainer/testing/index.js';
import { isReady } from './rollout-decision.js';
import { machineConfig, type AgentFleet, type AvailabilityWatcher } from '../testing/index.js';
import { NS, POOL, RolloutBed, type MachineSetLike } from '../testing/rollout-bed.js';
import type { InPlaceUpgrader } from './upgrader.js';
import { SIMULATION } from '../../test/bed/src/keys.js';

const NODES = ['n1', 'n2', 'n3', 'n4'];

/** A payload: a file and a unit carrying the version. */
function payload(version: string): object {
  return {
    ignition: { version: '3.4.0' },
    storage: { files: [{ path: '/etc/kindling/version', mode: 0o644, contents: { source: `data:,${version}` } }] },
    systemd: {
      units: [
        {
          name: 'kindling-demo.service',
          enabled: true,
          contents: `[Service]\nExecStart=/bin/echo ${version}\n[Install]\nWantedBy=multi-user.target\n`,
        },
      ],
    },
  };
}

describe('in-place rollouts that stop: pause, health gate', () => {
  let bed: RolloutBed;
  let fleet: AgentFleet;
  let watcher: AvailabilityWatcher;
  let upgrader: InPlaceUpgrader | undefined;
  let drainer: Drainer | undefined;
  let core: k8s.CoreV1Api;
  let custom: k8s.CustomObjectsApi;
  const log = createLogger({ name: 'rollout-halt-test', level: 'warn' });

  const machineSet = (): Promise<MachineSetLike> => bed.machineSet();
  const annotateSet = (annotations: Record<string, string | null>): Promise<unknown> => bed.annotateSet(annotations);
  const nodes = (): Promise<k8s.V1Node[]> => bed.nodes();
  const fileOn = (node: string, path: string): Promise<string> => bed.fileOn(node, path);
  const withDesired = async (hash: string): Promise<string[]> =>
    (await nodes())
      .filter((n) => n.metadata?.annotations?.[ANNOTATIONS.desiredConfig] === hash)
      .map((n) => n.metadata?.name ?? '')
      .sort();
  const at = async (hash: string): Promise<string[]> =>
    (await nodes())
      .filter((n) => n.metadata?.annotations?.[ANNOTATIONS.currentConfig] === hash)
      .map((n) => n.metadata?.name ?? '')
      .sort();
  /** The config hash a target name stands for (h0: the nodes' first). */
  const h = (name: string): string => bed.hash(name);
  const target = (name: string, docs: object[], annotations: Record<string, string>): Promise<void> =>
    bed.target(name, docs, annotations);
  const completed = (hash: string): Promise<MachineSetLike> => bed.completed(hash, 180_000);

  /** Machines carrying skip-remediation (a MachineHealthCheck would leave them alone), by name. */
  async function sparedMachines(): Promise<string[]> {
    const list = (await custom.listNamespacedCustomObject({
      group: CAPI_GROUP,
      version: 'v1beta2',
      namespace: NS,
      plural: 'machines',
    })) as { items: { metadata: { name: string; annotations?: Record<string, string> } }[] };
    return list.items
      .filter((m) => m.metadata.annotations?.[ANNOTATIONS.capiSkipRemediation] !== undefined)
      .map((m) => m.metadata.name)
      .sort();
  }

  /** Degraded with the gate's reason, back on its old files and units (a kubelet config the kubelet takes), Ready again. */
  async function assertRolledBack(failed: string, failure: string, restarts: number): Promise<void> {
    const ann = (await core.readNode({ name: failed })).metadata?.annotations ?? {};
    assert.equal(ann[ANNOTATIONS.state], 'Degraded');
    assert.equal(`${failed}: ${ann[ANNOTATIONS.reason]}`, failure);
    assert.equal(ann[ANNOTATIONS.currentConfig], h('h1'));
    assert.equal(await fileOn(failed, '/etc/kindling/version'), 'v1');
    assert.match(await fileOn(failed, '/etc/systemd/system/kindling-demo.service'), /echo v1/);
    assert.doesNotMatch(await fileOn(failed, '/etc/kubernetes/kubelet.conf'), /maxPods/);
    // Started for the update, restarted by its reboot, then by the rollback's.
    assert.ok(restarts >= 3, `${failed}'s agent was started ${restarts} times: not by two reboots`);
    await eventually(
      `${failed} to be Ready on its old config`,
      async () => {
        const n = await core.readNode({ name: failed });
        return isReady(n) && n.metadata?.annotations?.[SIMULATION.hostDown] === undefined;
      },
      30_000,
    );
  }

  before(async () => {
    bed = await RolloutBed.start({ nodes: NODES, zones: 2 });
    ({ fleet, watcher } = bed);
    core = bed.core();
    custom = bed.custom();
    ({ upgrader, drainer } = bed.inProcess(log));
    await Promise.all([upgrader.start(), drainer.start()]);
  });

  after(async () => {
    await Promise.all([upgrader?.stop(), drainer?.stop()]);
    await bed?.stop();
  });

  it('when the pool is paused mid-rollout, it should hand out no further node, let those handed out finish, say where it stopped; once cleared, it should complete', async () => {
    await target('h1', [machineConfig('50-test', payload('v1'))], { [ANNOTATIONS.maxUnavailable]: '1' });
    await eventually(
      `a node at ${h('h1')} while others are not yet`,
      async () => (await at(h('h1'))).length > 0,
      120_000,
      100,
    );
    await annotateSet({ [ANNOTATIONS.capiPaused]: 'true' });
    // Nodes handed out before the pause finish; then the progress says where the rollout stopped.
    const progress = await eventually(
      'the rollout to stop',
      async () => {
        const text = (await machineSet()).metadata.annotations?.[ANNOTATIONS.inPlaceProgress] ?? '';
        return /^(\d+) of 4 updated; paused at \1 of 4 by spec\.pausedUntil: no node is handed out until it clears$/.test(
          text,
        )
          ? text
          : undefined;
      },
      120_000,
      200,
    );
    const stopped = await withDesired(h('h1'));
    assert.deepEqual(await at(h('h1')), stopped, 'a node handed out before the pause did not finish');
    assert.ok(stopped.length < NODES.length, 'the rollout completed before the pause');
    assert.equal(
      progress,
      `${stopped.length} of 4 updated; paused at ${stopped.length} of 4 by spec.pausedUntil: no node is handed out until it clears`,
    );
    await new Promise((r) => setTimeout(r, 4_000));
    assert.deepEqual(await withDesired(h('h1')), stopped, 'a node was handed out while paused');
    assert.deepEqual(await sparedMachines(), [], "a finished node's Machine is still spared from remediation");

    await annotateSet({ [ANNOTATIONS.capiPaused]: null });
    const ms = await completed(h('h1'));
    assert.equal(ms.metadata.annotations?.[ANNOTATIONS.inPlaceProgress], undefined);
    for (const n of NODES) assert.equal(await fileOn(n, '/etc/kindling/version'), 'v1');
    assert.ok(watcher.max <= 1, `${watcher.max} nodes were unavailable at once`);
    assert.ok(watcher.max >= 1, 'the watcher never saw a node unavailable');
    assert.deepEqual(await sparedMachines(), []);
  });

  it('when the payload holds a kubelet config the kubelet refuses, it should roll the first node back to its old files after the health check timeout, leave it Degraded with the reason, and touch no other node', async () => {
    const broken = {
      apiVersion: 'machineconfiguration.openshift.io/v1',
      kind: 'KubeletConfig',
      metadata: { name: '99-broken' },
      spec: { kubeletConfig: { maxPods: -1 } },
    };
    const startsBefore = new Map(NODES.map((n) => [n, fleet.starts.get(n) ?? 0]));
    await target('h2', [machineConfig('50-test', payload('v2')), broken], {
      [ANNOTATIONS.maxUnavailable]: '1',
      [ANNOTATIONS.healthCheckTimeout]: '5s',
    });
    const failure = await eventually(
      'the rollout to halt on the health check',
      async () => (await machineSet()).metadata.annotations?.[ANNOTATIONS.inPlaceFailure],
      120_000,
      200,
    );
    assert.match(
      failure,
      new RegExp(
        `^n\\d: health check failed: 5s after the reboot into ${h('h2')}, the Node is not Ready \\(Ready=False, KubeletConfigInvalid: kubelet cannot start: invalid configuration: maxPods \\(--max-pods\\) -1 must not be a negative number\\); restored the previous files and units and rebooted$`,
      ),
    );
    const failed = failure.split(':')[0] ?? '';
    await assertRolledBack(failed, failure, (fleet.starts.get(failed) ?? 0) - (startsBefore.get(failed) ?? 0));
    // Halted: nothing else was handed h2 or restarted, and it stays so.
    await new Promise((r) => setTimeout(r, 3_000));
    assert.deepEqual(await withDesired(h('h2')), [failed]);
    for (const n of NODES.filter((x) => x !== failed)) {
      assert.equal(fleet.starts.get(n) ?? 0, startsBefore.get(n), `${n} was touched`);
      assert.equal(await fileOn(n, '/etc/kindling/version'), 'v1');
    }
    assert.deepEqual(
      await sparedMachines(),
      [`${POOL}-${failed}`],
      "the Degraded node's Machine is not spared from remediation",
    );
    const ms = await machineSet();
    assert.equal(ms.metadata.annotations?.[ANNOTATIONS.inPlaceProgress], '0 of 4 updated');
    assert.equal(ms.metadata.annotations?.[ANNOTATIONS.currentConfigHash], h('h1'));
    assert.equal(
      (await core.readNode({ name: failed })).metadata?.annotations?.[ANNOTATIONS.state],
      'Degraded',
      'the agent tried the update again',
    );
  });

  it('when the pool is moved back to the config it came from after a failed update, it should retarget the Degraded node to it and give its Machine back to remediation', async () => {
    const [failed] = await withDesired(h('h2'));
    assert.ok(failed, 'no node was left on the failed update');
    // The current hash is h1 already: only the failed node is off it.
    await annotateSet({ [ANNOTATIONS.targetConfigHash]: h('h1') });
    await eventually(
      `${failed} back on ${h('h1')} and Done`,
      async () => {
        const ann = (await core.readNode({ name: failed })).metadata?.annotations ?? {};
        return (
          ann[ANNOTATIONS.desiredConfig] === h('h1') &&
          ann[ANNOTATIONS.currentConfig] === h('h1') &&
          ann[ANNOTATIONS.state] === 'Done'
        );
      },
      120_000,
      200,
    );
    assert.deepEqual(await withDesired(h('h1')), NODES);
    await eventually(
      'no Machine spared from remediation',
      async () => (await sparedMachines()).length === 0,
      30_000,
      200,
    );
    const ms = await machineSet();
    assert.equal(ms.metadata.annotations?.[ANNOTATIONS.inPlaceFailure], undefined);
    for (const n of NODES) assert.equal(await fileOn(n, '/etc/kindling/version'), 'v1');
  });
});
