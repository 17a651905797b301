import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { ANNOTATIONS } from '../../api/src/keys.js';
import type { NodePool } from '../../api/src/nodepool.js';
import { computePlan, resolveFenceposts, simulateRollout, type Plan, type PoolState } from './plan.js';
import { formatPlan, table } from './plan-text.js';
import { validate, type Schema } from '../testing/json-schema.js';
import {
  assertGoldenText,
  configMap,
  controlPlaneAt,
  IMAGE,
  KUBELET,
  MOTD,
  world,
  type World,
} from '../testing/index.js';
import type { NodeView } from '../../inplace-upgrader/src/preview.js';

const SCHEMA = JSON.parse(
  readFileSync(fileURLToPath(new URL('../../../cli/plan.schema.json', import.meta.url)), 'utf8'),
) as Schema;
const NOW = Date.parse('2026-11-23T10:00:00Z');

async function plan(
  w: World,
  change: (p: NodePool) => void = () => {},
  opts: { cp?: string | Error; state?: Partial<PoolState>; tags?: string[] } = {},
): Promise<Plan> {
  const pool = structuredClone(w.pool);
  change(pool);
  return computePlan({
    pool,
    exists: true,
    state: { ...w.state, ...opts.state },
    versions: controlPlaneAt(opts.cp ?? '1.36.3'),
    maxSkewMinors: 3,
    now: NOW,
    ...(opts.tags ? { tags: (): Promise<string[]> => Promise.resolve(opts.tags ?? []) } : {}),
  });
}

/** The local registry's tags (local/releases) and one a minor behind, for the upgrade targets. */
const REGISTRY_TAGS = ['1.35.4', '1.36.2', '1.36.3', '1.36.3-broken-kubelet', '1.37.0', 'latest'];

const inPlaceWorld = (): World =>
  world({
    name: 'inplace',
    upgradeType: 'InPlace',
    version: '1.36.2',
    configMaps: [configMap('kubelet', KUBELET(110)), configMap('motd', MOTD)],
    nodes: [
      { zone: 'zone-a' },
      { zone: 'zone-a' },
      { zone: 'zone-b' },
      { zone: 'zone-b', ready: false },
      { zone: 'zone-c' },
    ],
  });

/** An InPlace pool on the ClusterAPI engine: a MachineDeployment whose Machines boot from Kindling's bootstrap templates. */
const clusterApiWorld = (): World =>
  world({
    name: 'capi',
    upgradeType: 'InPlace',
    version: '1.36.2',
    configMaps: [configMap('motd', MOTD)],
    nodes: [{ zone: 'zone-a' }, { zone: 'zone-b' }, { zone: 'zone-c' }],
    patch: (p) => (p.spec.management.inPlace = { engine: 'ClusterAPI', maxUnavailable: 1 }),
  });

const KARGS = `kind: MachineConfig
metadata:
  name: 60-kargs
spec:
  kernelArguments: [nosmt]
`;

const replaceWorld = (): World =>
  world({
    name: 'replace',
    upgradeType: 'Replace',
    version: '1.36.2',
    configMaps: [configMap('kubelet', KUBELET(110))],
    nodes: [{ zone: 'zone-a' }, { zone: 'zone-b' }],
  });

/** The scenarios of the golden files: each a world and a planned change. */
const SCENARIOS: Record<string, () => Promise<Plan>> = {
  'skew-refusal': () => plan(inPlaceWorld(), (p) => (p.spec.release.image = IMAGE('1.37.0'))),
  'in-place-update': () => {
    const w = inPlaceWorld();
    const configMaps = [configMap('kubelet', KUBELET(250)), w.state.configMaps[1] ?? assert.fail()];
    return plan(w, (p) => (p.spec.release.image = IMAGE('1.36.3')), { state: { configMaps } });
  },
  replace: () => plan(replaceWorld(), (p) => (p.spec.release.image = IMAGE('1.36.3'))),
  'propagation-only': () =>
    plan(replaceWorld(), (p) => {
      p.spec.nodeLabels = { tier: 'gold' };
      p.spec.taints = [{ key: 'dedicated', value: 'batch', effect: 'NoSchedule' }];
      p.spec.nodeDrainTimeout = '10m';
    }),
  'no-change': () => plan(inPlaceWorld()),
  'cluster-api-in-place': () => plan(clusterApiWorld(), (p) => (p.spec.release.image = IMAGE('1.36.3'))),
  'cluster-api-kernel-arguments': () => {
    const w = clusterApiWorld();
    return plan(w, (p) => (p.spec.config = [{ name: 'motd' }, { name: 'kargs' }]), {
      state: { configMaps: [...w.state.configMaps, configMap('kargs', KARGS)] },
    });
  },
  'upgrade-targets': () => plan(inPlaceWorld(), () => {}, { tags: REGISTRY_TAGS }),
  'downgrade-overridden': () =>
    plan(
      replaceWorld(),
      (p) => {
        p.spec.release = { image: IMAGE('1.35.4'), allowSkips: ['Downgrade'] };
      },
      { tags: REGISTRY_TAGS },
    ),
  'control-plane-unreachable': () =>
    plan(replaceWorld(), (p) => (p.spec.release.image = IMAGE('1.36.3')), {
      cp: new Error('connect ECONNREFUSED 127.0.0.1:6443'),
    }),
};

describe('kindling plan (golden output)', () => {
  for (const [name, make] of Object.entries(SCENARIOS)) {
    it(`when planning "${name}", it should print testdata/plan-${name}.txt and JSON that conforms to cli/plan.schema.json`, async () => {
      const p = await make();
      assertGoldenText(`plan-${name}.txt`, formatPlan(p));
      assert.deepEqual(validate(SCHEMA, JSON.parse(JSON.stringify(p))), []);
    });
  }
});

describe('computePlan', () => {
  it('when the registry offers tags, it should list those above the nodes, newest first, with why a rule refuses one', async () => {
    const targets = (await SCENARIOS['upgrade-targets']?.())?.upgradeTargets;
    assert.deepEqual(
      targets?.targets.map((t) => [t.tag, t.status, t.reason]),
      [
        ['1.37.0', 'refused', 'NodeNewerThanControlPlane'],
        ['1.36.3', 'available', undefined],
        ['1.36.3-broken-kubelet', 'refused', 'PrereleaseNotAllowed'],
      ],
    );
    assert.equal(targets?.current, 'v1.36.2');
  });

  it('when a downgrade is refused, it should block with reason Downgrade; with allowSkips it should pass as overridden', async () => {
    const refused = await plan(replaceWorld(), (p) => (p.spec.release.image = IMAGE('1.35.4')));
    assert.equal(refused.action, 'blocked');
    assert.deepEqual(
      refused.policies.filter((x) => x.status === 'fail').map((x) => [x.reason, x.skippable]),
      [['Downgrade', 'Downgrade']],
    );
    const allowed = await SCENARIOS['downgrade-overridden']?.();
    assert.equal(allowed?.blocked, false);
    assert.deepEqual(
      allowed?.policies.filter((x) => x.status === 'overridden').map((x) => x.reason),
      ['Overridden'],
    );
  });

  it('when the registry cannot be read, it should say so in the upgrade targets and still plan', async () => {
    const pool = structuredClone(inPlaceWorld().pool);
    const w = inPlaceWorld();
    const p = await computePlan({
      pool,
      exists: true,
      state: w.state,
      versions: controlPlaneAt('1.36.3'),
      maxSkewMinors: 3,
      now: NOW,
      tags: () => Promise.reject(new Error('listing the tags of kindling/release on registry r failed: HTTP 403')),
    });
    assert.match(p.upgradeTargets?.error ?? '', /HTTP 403/);
    assert.equal(p.action, 'none');
  });

  it('when a skew policy refuses the release, it should block, name the failing policy and plan no batches', async () => {
    const p = await SCENARIOS['skew-refusal']?.();
    assert.equal(p?.action, 'blocked');
    assert.equal(p?.blocked, true);
    assert.deepEqual(
      p?.policies.filter((x) => x.status === 'fail').map((x) => x.reason),
      ['NodeNewerThanControlPlane'],
    );
    assert.equal(p?.inPlace, undefined);
  });

  // eslint-disable-next-line complexity -- optional chaining in assertions counts as branches
  it('when the release and a config document change on an InPlace pool, it should name both inputs and batch the nodes under maxUnavailable, the NotReady node first', async () => {
    const p = await SCENARIOS['in-place-update']?.();
    assert.equal(p?.action, 'update-in-place');
    assert.deepEqual(p?.configHash.release, { from: IMAGE('1.36.2'), to: IMAGE('1.36.3') });
    assert.deepEqual(p?.configHash.documents, [
      { kind: 'KubeletConfig', name: 'max-pods', change: 'changed', configMaps: ['kubelet'] },
    ]);
    assert.equal(p?.inPlace?.maxUnavailable, 2);
    assert.deepEqual(p?.inPlace?.batches[0]?.[0], 'inplace-node-3');
    assert.ok((p?.inPlace?.batches ?? []).every((b) => b.length <= 2));
    assert.deepEqual(p?.inPlace?.batches.flat().sort(), [
      'inplace-node-0',
      'inplace-node-1',
      'inplace-node-2',
      'inplace-node-3',
      'inplace-node-4',
    ]);
  });

  it('when the release changes outside the maintenance window, it should plan the update and say it starts when the window opens', async () => {
    const p = await plan(inPlaceWorld(), (pool) => {
      pool.spec.release.image = IMAGE('1.36.3');
      pool.spec.management.maintenanceWindow = { schedule: '0 2 * * *', duration: '3h', timeZone: 'Europe/Berlin' };
    });
    assert.deepEqual([p.action, p.blocked], ['update-in-place', false]);
    assert.deepEqual(p.starts, {
      now: false,
      at: '2026-11-24T01:00:00.000Z',
      reason: 'WaitingForMaintenanceWindow',
      message: 'waiting for the maintenance window (opens 2026-11-24T01:00Z)',
    });
    assert.match(formatPlan(p), /Starts: +not yet: waiting for the maintenance window \(opens 2026-11-24T01:00Z\)/);
    assert.deepEqual(validate(SCHEMA, JSON.parse(JSON.stringify(p))), []);
  });

  it('when the release changes inside the maintenance window, it should say it starts now', async () => {
    const p = await plan(inPlaceWorld(), (pool) => {
      pool.spec.release.image = IMAGE('1.36.3');
      pool.spec.management.maintenanceWindow = { schedule: '0 9 * * *', duration: '2h' };
    });
    assert.equal(p.starts?.now, p.starts?.reason === 'AsExpected' || p.starts?.reason === 'HealthGateOverridden');
    assert.notEqual(p.starts?.reason, 'WaitingForMaintenanceWindow');
  });

  it('when only labels, taints and timeouts change, it should propagate in place with the hash unchanged', async () => {
    const p = await SCENARIOS['propagation-only']?.();
    assert.equal(p?.action, 'propagate');
    assert.equal(p?.configHash.changed, false);
    assert.ok(p?.changes.every((c) => c.effect === 'propagate'));
    assert.deepEqual(p?.propagation.machines, ['replace-m0', 'replace-m1']);
    assert.deepEqual(p?.propagation.nodes, ['replace-node-0', 'replace-node-1']);
  });

  it('when a label the controller applied is dropped, it should see the removal through managedFields', async () => {
    const w = world({
      name: 'labels',
      upgradeType: 'Replace',
      version: '1.36.3',
      configMaps: [],
      nodes: [{ zone: 'a' }],
      patch: (p) => (p.spec.nodeLabels = { tier: 'gold' }),
    });
    const p = await plan(w, (pool) => (pool.spec.nodeLabels = {}));
    assert.deepEqual(
      p.changes.map((c) => c.field),
      ['spec.template.metadata.labels'],
    );
    assert.equal(p.action, 'propagate');
  });

  it("when a Replace pool changes release, it should plan Cluster API's rolling update bounds", async () => {
    const p = await SCENARIOS.replace?.();
    assert.equal(p?.action, 'replace');
    assert.deepEqual(p?.replace, {
      strategy: 'RollingUpdate',
      replicas: 2,
      maxSurge: 1,
      maxUnavailable: 0,
      machines: ['replace-m0', 'replace-m1'],
      maxMachines: 3,
      minAvailable: 2,
      waves: 2,
    });
  });

  it('when a rollout is in progress and the pool does not change, it should show the remaining batches', async () => {
    const w = inPlaceWorld();
    const ms = w.state.machineSets[0] ?? assert.fail();
    ms.metadata.annotations = { ...ms.metadata.annotations, [ANNOTATIONS.currentConfigHash]: 'older' };
    for (const n of w.state.nodes.slice(0, 2))
      n.metadata = { ...n.metadata, annotations: { [ANNOTATIONS.currentConfig]: 'older' } };
    const p = await plan(w);
    assert.equal(p.action, 'none');
    assert.deepEqual(
      p.inPlace?.nodes
        .filter((n) => n.batch > 0)
        .map((n) => n.name)
        .sort(),
      ['inplace-node-0', 'inplace-node-1'],
    );
  });

  it('when the pool is not created yet, it should plan its creation', async () => {
    const w = replaceWorld();
    const p = await computePlan({
      pool: w.pool,
      exists: false,
      state: {
        configMaps: w.state.configMaps,
        secrets: [],
        machineSets: [],
        machineDeployments: [],
        machines: [],
        nodes: [],
      },
      versions: controlPlaneAt('1.36.3'),
      maxSkewMinors: 3,
      now: NOW,
    });
    assert.equal(p.action, 'create');
    assert.equal(p.configHash.current, undefined);
    assert.match(formatPlan(p), /not created yet[\s\S]*Action: CREATE/);
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

  it('when nodes are spread over zones, it should spread each batch across zones and never exceed maxUnavailable', () => {
    const sim = simulateRollout(
      [view('a1', 'a'), view('a2', 'a'), view('b1', 'b'), view('b2', 'b'), view('c1', 'c')],
      'T',
      2,
    );
    assert.deepEqual(sim.batches, [['a1', 'b1'], ['a2', 'b2'], ['c1']]);
  });

  it('when a node is degraded, it should halt before starting anything', () => {
    const sim = simulateRollout([view('a', 'z'), view('b', 'z', { phase: 'degraded', reason: 'disk full' })], 'T', 1);
    assert.deepEqual(sim, { batches: [], halted: { node: 'b', reason: 'disk full' } });
  });

  it('when unavailable nodes use the whole budget, it should say the rollout stalls', () => {
    const sim = simulateRollout([view('a', 'z', { phase: 'done', unavailable: true }), view('b', 'z')], 'T', 1);
    assert.match(sim.stalled ?? '', /1 unavailable nodes use the whole maxUnavailable budget/);
  });
});

describe('plan helpers', () => {
  it('when surge and unavailable are percentages, it should round surge up and unavailable down; both zero means one unavailable', () => {
    assert.deepEqual(resolveFenceposts('25%', '25%', 10), { maxSurge: 3, maxUnavailable: 2 });
    assert.deepEqual(resolveFenceposts(0, 0, 3), { maxSurge: 0, maxUnavailable: 1 });
  });

  it('when laying out a table, it should pad every column but the last', () => {
    assert.deepEqual(
      table(
        [
          ['a', 'bb', 'c'],
          ['ddd', 'e', 'f'],
        ],
        '',
      ),
      ['a    bb  c', 'ddd  e   f'],
    );
  });

  it('when an output breaks the schema, it should say where', () => {
    assert.deepEqual(validate(SCHEMA, { action: 'explode' }).slice(0, 1), ['$: pool is required']);
    assert.ok(validate(SCHEMA, { action: 'explode' }).some((e) => e.startsWith('$.action: "explode" is not one of')));
  });
});
