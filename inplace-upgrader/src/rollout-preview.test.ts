import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type * as k8s from '#k8s';
import { CAPI_API_VERSION, type Machine, type MachineSet } from '../../api/src/capi.js';
import { ANNOTATIONS, LABELS } from '../../api/src/keys.js';
import { previewRollout, simulateRollout, type RolloutState } from './rollout-preview.js';
import type { NodeView } from './rollout-decision.js';

const T = 'target';
const SET = 'workers';

const machineSet: MachineSet = {
  apiVersion: CAPI_API_VERSION,
  kind: 'MachineSet',
  metadata: { name: SET, namespace: 'tenants' },
  spec: {
    clusterName: 'guest',
    replicas: 0,
    selector: {},
    template: {
      spec: {
        clusterName: 'guest',
        bootstrap: {},
        infrastructureRef: { apiGroup: 'infrastructure.kindling.dev', kind: 'LocalMachineTemplate', name: 'small' },
      },
    },
  },
};

function machine(
  name: string,
  node: string | undefined,
  extra: { set?: string; cluster?: string; deleting?: boolean } = {},
): Machine {
  return {
    apiVersion: CAPI_API_VERSION,
    kind: 'Machine',
    metadata: {
      name,
      namespace: 'tenants',
      labels: { [LABELS.capiSetName]: extra.set ?? SET },
      ...(extra.deleting ? { deletionTimestamp: new Date('2026-11-23T10:00:00Z') } : {}),
    },
    spec: {
      clusterName: extra.cluster ?? 'guest',
      bootstrap: {},
      infrastructureRef: { apiGroup: 'infrastructure.kindling.dev', kind: 'LocalMachineTemplate', name: 'small' },
    },
    status: node === undefined ? {} : { nodeRef: { name: node } },
  };
}

function node(
  name: string,
  zone: string,
  annotations: Record<string, string> = { [ANNOTATIONS.currentConfig]: 'old', [ANNOTATIONS.state]: 'Done' },
  ready = true,
): k8s.V1Node {
  return {
    metadata: { name, labels: { [LABELS.zone]: zone }, annotations },
    status: { conditions: [{ type: 'Ready', status: ready ? 'True' : 'False' }] },
  };
}

/** A set of `zones.length` nodes n0, n1… (Machines m0, m1…), node i in zones[i]. */
function state(zones: string[], extra: Partial<RolloutState> = {}): RolloutState {
  return {
    machineSet,
    target: T,
    maxUnavailable: '1',
    machines: zones.map((_z, i) => machine(`m${i}`, `n${i}`)),
    nodes: zones.map((z, i) => node(`n${i}`, z)),
    ...extra,
  };
}

const inFlight = { [ANNOTATIONS.currentConfig]: 'old', [ANNOTATIONS.desiredConfig]: T, [ANNOTATIONS.state]: 'Working' };

describe('previewRollout', () => {
  it("when maxUnavailable is a percentage, it should resolve it against the set's nodes as the upgrader does and batch within it, spread across zones", () => {
    const p = previewRollout(state(['a', 'a', 'b', 'b', 'c'], { maxUnavailable: '40%' }));
    assert.equal(p.maxUnavailable, 2);
    assert.deepEqual(p.batches, [['n0', 'n2'], ['n1', 'n3'], ['n4']]);
    assert.deepEqual(
      p.nodes.map((n) => [n.name, n.batch]),
      [
        ['n0', 1],
        ['n2', 1],
        ['n1', 2],
        ['n3', 2],
        ['n4', 3],
      ],
    );
  });

  it('when no maxUnavailable is given, it should move one node at a time', () => {
    const p = previewRollout(state(['a', 'b'], { maxUnavailable: undefined }));
    assert.deepEqual(p.batches, [['n0'], ['n1']]);
  });

  it('when the change is unknown or disruptive, it should drain and reboot each moving node; when it is not, apply only; nodes at the target get nothing', () => {
    const base = state(['a', 'b']);
    const nodes = [
      node('n0', 'a', { [ANNOTATIONS.currentConfig]: T, [ANNOTATIONS.state]: 'Done' }),
      base.nodes[1] ?? assert.fail(),
    ];
    assert.deepEqual(
      previewRollout({ ...base, nodes }).nodes.map((n) => [n.name, n.action]),
      [
        ['n1', 'drain-reboot'],
        ['n0', 'none'],
      ],
    );
    assert.deepEqual(
      previewRollout({ ...base, nodes, disruptive: false }).nodes.map((n) => [n.name, n.action]),
      [
        ['n1', 'apply'],
        ['n0', 'none'],
      ],
    );
  });

  it('when a node is not Ready, it should update it first (it costs no availability)', () => {
    const s = state(['a', 'b', 'c'], { maxUnavailable: 2 });
    s.nodes = [s.nodes[0], s.nodes[1], node('n2', 'c', undefined, false)].map((n) => n ?? assert.fail());
    const p = previewRollout(s);
    assert.deepEqual(p.batches[0], ['n2']);
    assert.equal(p.nodes[0]?.unavailable, true);
  });

  it('when a node in flight has its drain held up by a PodDisruptionBudget, it should name the node and the budget and keep it in the first batch', () => {
    const blocked = {
      ...inFlight,
      [ANNOTATIONS.desiredDrain]: `drain-${T}`,
      [ANNOTATIONS.drainBlocked]: 'shop/web-1 blocked by PodDisruptionBudget shop/web since 2026-11-23T10:01:00.000Z',
    };
    const s = state(['a', 'b']);
    s.nodes = [node('n0', 'a', blocked), s.nodes[1] ?? assert.fail()];
    const p = previewRollout(s);
    assert.deepEqual(p.drainsBlocked, [{ node: 'n0', by: 'PodDisruptionBudget shop/web' }]);
    assert.equal(p.nodes.find((n) => n.name === 'n0')?.blockedBy, 'PodDisruptionBudget shop/web');
    assert.deepEqual(p.batches, [['n0'], ['n1']]);
    assert.match(p.progress, /^0 of 2 updated; n0 draining, blocked by PodDisruptionBudget shop\/web$/);
  });

  it('when a node on the target is degraded, it should halt on it, plan no batch and move nothing', () => {
    const s = state(['a', 'b']);
    s.nodes = [
      node('n0', 'a', { ...inFlight, [ANNOTATIONS.state]: 'Degraded', [ANNOTATIONS.reason]: 'disk full' }),
      s.nodes[1] ?? assert.fail(),
    ];
    const p = previewRollout(s);
    assert.deepEqual(p.halted, { node: 'n0', reason: 'disk full' });
    assert.deepEqual(p.batches, []);
    assert.ok(p.nodes.every((n) => n.action === 'none' && n.batch === 0));
    assert.equal(p.nodes.find((n) => n.name === 'n0')?.reason, 'disk full');
  });

  it('when the set is paused, it should say where it stopped (N of M) and still give the order once the pause clears', () => {
    const s = state(['a', 'b', 'c'], { paused: true });
    s.nodes = [node('n0', 'a', { [ANNOTATIONS.currentConfig]: T }), ...s.nodes.slice(1)];
    const p = previewRollout(s);
    assert.deepEqual(p.paused, { done: 1, total: 3 });
    assert.match(p.progress, /^1 of 3 updated; paused at 1 of 3 by spec\.pausedUntil/);
    assert.deepEqual(p.batches, [['n1'], ['n2']]);
    assert.equal(previewRollout({ ...s, paused: false }).paused, undefined);
  });

  it('when every unavailable node is still at the old config and uses the whole budget, it should say the rollout stalls', () => {
    const s = state(['a', 'b']);
    s.nodes = [node('n0', 'a', { [ANNOTATIONS.currentConfig]: T }, false), s.nodes[1] ?? assert.fail()];
    const p = previewRollout(s);
    assert.match(p.stalled ?? '', /^1 unavailable nodes use the whole maxUnavailable budget \(1\)/);
    assert.deepEqual(p.batches, []);
  });

  it("when Machines have no Node yet, belong to another set or cluster, or are deleted, it should count only the set's Machines waiting for a Node and keep a deleted Machine's Node while it is there", () => {
    const s = state(['a']);
    s.machines = [
      ...s.machines,
      machine('m-new', undefined),
      machine('m-gone', undefined, { deleting: true }),
      machine('m-going', 'n-going', { deleting: true }),
      machine('m-other', 'n-other', { set: 'other' }),
      machine('m-elsewhere', 'n-elsewhere', { cluster: 'another' }),
    ];
    s.nodes = [...s.nodes, node('n-going', 'b'), node('n-other', 'a'), node('n-elsewhere', 'a')];
    const p = previewRollout(s);
    assert.equal(p.machinesWithoutNode, 1);
    assert.deepEqual(p.nodes.map((n) => n.name).sort(), ['n-going', 'n0']);
    assert.match(p.progress, /^0 of 3 updated/);
  });
});

describe('simulateRollout', () => {
  const view = (name: string, zone: string, extra: Partial<NodeView> = {}): NodeView => ({
    name,
    zone,
    phase: 'idle',
    unavailable: false,
    ...extra,
  });

  it('when nodes are in flight towards the target, it should finish them in the first batch with the ones it starts', () => {
    const sim = simulateRollout(
      [view('a', 'z'), view('b', 'z', { phase: 'updating', desiredConfig: T }), view('c', 'y')],
      T,
      2,
    );
    assert.deepEqual(sim.batches, [['b', 'c'], ['a']]);
  });

  it('when every node is at the target, it should plan nothing', () => {
    assert.deepEqual(simulateRollout([view('a', 'z', { phase: 'done' })], T, 1), { batches: [] });
  });
});
