import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ANNOTATIONS } from '../../api/src/keys.js';
import { condition as cond } from '../../api/testing/conditions.js';
import type { MachineSet } from '../../api/src/capi.js';
import type * as k8s from '#k8s';
import { formatStatus, isFine, type PoolObjects, nodeProgress, poolStatusView, progressBar } from './status-view.js';
import { assertGoldenText, configMap, guestNode, KUBELET, world } from '../testing/index.js';

/** Progress as the upgrader writes it while a budget holds up pool-node-1's drain. */
const PROGRESS = '1 of 4 updated; pool-node-1 draining, blocked by PodDisruptionBudget tenant-a/web';

/** An InPlace pool of 4 nodes moving from its hash to "new": done, draining (blocked by a PDB), updating (drained), degraded. */
function rollingWorld(): PoolObjects & { nodes: (name: string) => k8s.V1Node | undefined } {
  const w = world({
    name: 'pool',
    upgradeType: 'InPlace',
    version: '1.36.3',
    configMaps: [configMap('kubelet', KUBELET(110))],
    nodes: [{ zone: 'a' }, { zone: 'a' }, { zone: 'b' }, { zone: 'b' }],
  });
  const ms = w.state.machineSets[0] as MachineSet;
  ms.metadata.annotations = {
    ...ms.metadata.annotations,
    [ANNOTATIONS.targetConfigHash]: 'new',
    [ANNOTATIONS.inPlaceProgress]: PROGRESS,
    [ANNOTATIONS.inPlaceFailure]: 'pool-node-3: disk full',
  };
  ms.status = { replicas: 4, readyReplicas: 3 };
  const states: Record<string, string>[] = [
    { [ANNOTATIONS.currentConfig]: 'new', [ANNOTATIONS.state]: 'Done' },
    {
      [ANNOTATIONS.desiredConfig]: 'new',
      [ANNOTATIONS.state]: 'Working',
      [ANNOTATIONS.desiredDrain]: 'drain-new',
      [ANNOTATIONS.drainBlocked]:
        'tenant-a/web-5f7c blocked by PodDisruptionBudget tenant-a/web since 2026-11-23T10:01:00.000Z',
    },
    {
      [ANNOTATIONS.desiredConfig]: 'new',
      [ANNOTATIONS.state]: 'Working',
      [ANNOTATIONS.desiredDrain]: 'drain-new',
      [ANNOTATIONS.lastAppliedDrain]: 'drain-new',
    },
    { [ANNOTATIONS.desiredConfig]: 'new', [ANNOTATIONS.state]: 'Degraded', [ANNOTATIONS.reason]: 'disk full' },
  ];
  const nodes = w.state.nodes.map((n, i) =>
    guestNode(n.metadata?.name ?? '', { zone: 'a', annotations: states[i] }, w.hash),
  );
  w.pool.status = {
    version: 'v1.36.3',
    configHash: 'new',
    conditions: [
      cond('Ready', 'True', 'AsExpected'),
      cond('UpdatingConfig', 'True', 'InProgress', `Updating the config (hash old to new): ${PROGRESS}`),
      cond('AutoscalingEnabled', 'False', 'Disabled'),
    ],
  };
  return {
    pool: w.pool,
    child: ms,
    machines: w.state.machines,
    nodes: (name: string) => nodes.find((n) => n.metadata?.name === name),
  };
}

describe('kindling status view', () => {
  it('when a condition is as expected or a feature is off, it should count as fine; progress, problems and Unknown should not', () => {
    assert.equal(isFine(cond('Ready', 'True', 'AsExpected')), true);
    assert.equal(isFine(cond('AutorepairEnabled', 'False', 'Disabled')), true);
    assert.equal(isFine(cond('UpdatingConfig', 'False', 'AsExpected')), true);
    assert.equal(isFine(cond('UpdatingConfig', 'True', 'InProgress')), false);
    assert.equal(isFine(cond('SupportedVersionSkew', 'False', 'NodeNewerThanControlPlane')), false);
    assert.equal(isFine(cond('ValidReleaseImage', 'Unknown', 'AsExpected')), false);
  });

  it("when a node is drained, draining (blocked by a PDB), done or degraded, it should say so by the upgrader's classification", () => {
    const { nodes } = rollingWorld();
    assert.deepEqual(
      ['pool-node-0', 'pool-node-1', 'pool-node-2', 'pool-node-3'].map((n) =>
        nodeProgress(nodes(n) ?? assert.fail(), 'new'),
      ),
      [
        { name: 'pool-node-0', state: 'done' },
        { name: 'pool-node-1', state: 'draining', reason: 'blocked by PodDisruptionBudget tenant-a/web' },
        { name: 'pool-node-2', state: 'updating' },
        { name: 'pool-node-3', state: 'degraded', reason: 'disk full' },
      ],
    );
  });

  it('when an in-place rollout is under way, it should print the counts, the conditions that are not fine and a progress bar per node (golden)', () => {
    const view = poolStatusView(rollingWorld());
    assert.deepEqual({ done: view.rollout?.done, total: view.rollout?.total }, { done: 1, total: 4 });
    assertGoldenText('status-rollout.txt', formatStatus([view]));
  });

  it('when the guest cluster cannot be reached, it should take the progress from the MachineSet annotation (its "N of M" before any blocked drain)', () => {
    const { nodes: _nodes, ...objects } = rollingWorld();
    const view = poolStatusView(objects);
    assert.deepEqual(
      { done: view.rollout?.done, total: view.rollout?.total, nodes: view.rollout?.nodes },
      { done: 1, total: 4, nodes: [] },
    );
  });

  it('when a Machine is being deleted while its Node is still there, it should count the node as the upgrader does (setMembers)', () => {
    const w = rollingWorld();
    const [first = assert.fail('no Machine'), ...rest] = w.machines;
    const deleting = { ...first, metadata: { ...first.metadata, deletionTimestamp: new Date('2026-11-23T10:02:00Z') } };
    const view = poolStatusView({ ...w, machines: [deleting, ...rest] });
    assert.deepEqual({ done: view.rollout?.done, total: view.rollout?.total }, { done: 1, total: 4 });
    assert.equal(view.rollout?.nodes.length, 4);
  });

  it('when a change waits for the maintenance window, it should say so with when the window opens', () => {
    const w = world({
      name: 'held',
      upgradeType: 'Replace',
      version: '1.36.3',
      configMaps: [],
      nodes: [{ zone: 'a' }],
    });
    const message = 'waiting for the maintenance window (opens 2026-12-01T02:00Z)';
    w.pool.status = { conditions: [cond('RolloutAllowed', 'False', 'WaitingForMaintenanceWindow', message)] };
    const text = formatStatus([
      poolStatusView({ pool: w.pool, child: w.state.machineDeployments[0], machines: w.state.machines }),
    ]);
    assert.match(
      text,
      /! RolloutAllowed False WaitingForMaintenanceWindow: waiting for the maintenance window \(opens 2026-12-01T02:00Z\)/,
    );
  });

  it('when a pool is converged, it should print one line and no rollout', () => {
    const w = world({
      name: 'calm',
      upgradeType: 'Replace',
      version: '1.36.3',
      configMaps: [],
      nodes: [{ zone: 'a' }],
    });
    const text = formatStatus([
      poolStatusView({ pool: w.pool, child: w.state.machineDeployments[0], machines: w.state.machines }),
    ]);
    assert.equal(text.split('\n').length, 3);
    assert.match(text, /tenant-a\s+calm\s+Replace\s+1\s+0\s+0/);
  });

  it('when hosts booted but have not joined, it should say per host booted or not, and why its CSR was denied', () => {
    const w = world({
      name: 'joining',
      upgradeType: 'Replace',
      version: '1.36.3',
      configMaps: [],
      nodes: [{ zone: 'a' }, { zone: 'a' }, { zone: 'b' }],
    });
    const [, denied, provisioning] = w.state.machines;
    for (const m of [denied, provisioning]) if (m?.status) delete m.status.nodeRef;
    if (denied) {
      denied.status = { ...denied.status, conditions: [{ type: 'InfrastructureReady', status: 'True' }] };
      denied.metadata.annotations = {
        [ANNOTATIONS.joinFailure]: 'CSR csr-x denied: system:node:other is no Machine of tenant-a/joining',
      };
    }
    const view = poolStatusView({ pool: w.pool, child: w.state.machineDeployments[0], machines: w.state.machines });
    assert.deepEqual(
      view.hosts.map((h) => [h.booted, h.joined]),
      [
        [true, true],
        [true, false],
        [false, false],
      ],
    );
    const text = formatStatus([view]);
    assert.match(text, /hosts {2}2 of 3 booted, 1 joined/);
    assert.match(
      text,
      new RegExp(
        `${denied?.metadata.name}\\s+booted, not joined: CSR csr-x denied: system:node:other is no Machine of tenant-a/joining`,
      ),
    );
    assert.match(text, new RegExp(`${provisioning?.metadata.name}\\s+provisioning`));
  });

  it('when a node of a ClusterAPI-engine pool is Degraded towards its target, it should say where the rollout halted and why, as on the MachineSet engine', () => {
    const w = world({
      name: 'capi',
      upgradeType: 'InPlace',
      version: '1.36.3',
      configMaps: [],
      nodes: [{ zone: 'a' }, { zone: 'b' }],
      patch: (p) => {
        p.spec.management = { upgradeType: 'InPlace', inPlace: { engine: 'ClusterAPI' } };
      },
    });
    const md = w.state.machineDeployments[0];
    const [first] = w.state.machines;
    assert.ok(md && first, 'the world has a MachineDeployment and Machines');
    md.status = { ...md.status, upToDateReplicas: 0 };
    first.metadata.annotations = {
      [ANNOTATIONS.capiUpdateInProgress]: '',
      [ANNOTATIONS.inPlaceFailure]: 'capi-node-1: health check failed: kubelet not Ready',
    };
    const view = poolStatusView({ pool: w.pool, child: md, machines: w.state.machines });
    assert.equal(view.rollout?.failure, 'capi-node-1: health check failed: kubelet not Ready');
    assert.match(formatStatus([view]), /\n {4}halted: capi-node-1: health check failed: kubelet not Ready\n/);
  });

  it("when a node waits for the maintenance window because the rollout's ceiling holds its update back, it should show it waiting, not halted or degraded", () => {
    const w = rollingWorld();
    const why = 'the update needs a reboot; waiting for the maintenance window (opens 2026-12-01T02:00Z)';
    const ms = w.child as MachineSet;
    const { [ANNOTATIONS.inPlaceFailure]: _failure, ...rest } = ms.metadata.annotations ?? {};
    ms.metadata.annotations = { ...rest, [ANNOTATIONS.inPlaceWaiting]: `pool-node-3: ${why}` };
    const held = {
      [ANNOTATIONS.desiredConfig]: 'new',
      [ANNOTATIONS.state]: 'Degraded',
      [ANNOTATIONS.reason]: why,
      [ANNOTATIONS.ceilingHeld]: 'new',
    };
    const node3 = w.nodes('pool-node-3') ?? assert.fail('no pool-node-3');
    const waiting = { ...node3, metadata: { ...node3.metadata, annotations: held } };
    assert.deepEqual(nodeProgress(waiting, 'new'), { name: 'pool-node-3', state: 'waiting', reason: why });
    const view = poolStatusView({ ...w, nodes: (n) => (n === 'pool-node-3' ? waiting : w.nodes(n)) });
    assert.deepEqual([view.rollout?.failure, view.rollout?.waiting], [undefined, `pool-node-3: ${why}`]);
    assert.deepEqual(view.rollout?.nodes.at(-1), { name: 'pool-node-3', state: 'waiting', reason: why });
    const text = formatStatus([view]);
    assert.match(text, /\n {4}waiting: pool-node-3: the update needs a reboot; waiting for the maintenance window/);
    assert.doesNotMatch(text, /halted/);
  });

  it('when drawing a bar, it should fill in proportion and stay within its width', () => {
    assert.equal(progressBar(1, 4, 8), '[##------]');
    assert.equal(progressBar(5, 4, 4), '[####]');
    assert.equal(progressBar(0, 0, 4), '[----]');
  });
});
