import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { RolloutChange, RolloutRecord } from '../../api/src/nodepool.js';
import { DEFAULT_DISRUPTION_POLICY, effectiveDisruptionPolicy } from '../../api/src/disruption.js';
import { normaliseConfig, type ConfigSource } from './hash.js';
import { explainRollout, keepOrExplain, MAX_CHANGES, strategyOf, type WhyInput } from './rollout-record.js';

const mc = (name: string, file: string): string =>
  `apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\nmetadata: {name: ${name}}\nspec: {config: {ignition: {version: 3.4.0}, storage: {files: [{path: ${file}}]}}}\n`;
const kc = (name: string, maxPods: number): string =>
  `apiVersion: machineconfiguration.openshift.io/v1\nkind: KubeletConfig\nmetadata: {name: ${name}}\nspec: {kubeletConfig: {maxPods: ${maxPods}}}\n`;

const before: ConfigSource[] = [{ name: 'base', data: { a: mc('50-a', '/etc/a'), b: kc('60-kubelet', 110) } }];
const after: ConfigSource[] = [
  { name: 'base', data: { a: mc('50-a', '/etc/a2'), b: kc('60-kubelet', 110) } },
  { name: 'extra', data: { c: mc('70-new', '/etc/c') } },
];
const withKargs: ConfigSource[] = [
  ...before,
  {
    name: 'kargs',
    data: {
      config:
        'apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\nmetadata: {name: 50-kargs}\nspec: {kernelArguments: [nosmt]}\n',
    },
  },
];
const KARGS_ROLL =
  ' (the new payload holds kernelArguments, which the node agent cannot apply in place: the Machines are replaced)';
const inputs = (release: string, sources: ConfigSource[]): { release: string; config: string } => ({
  release,
  config: normaliseConfig(sources),
});
const R1 = 'registry.local/kindling/release:1.36.2';
const R2 = 'registry.local/kindling/release:1.36.3';
const NOW = '2026-11-23T23:00:00Z';

const base = (over: Partial<WhyInput>): WhyInput => ({
  upgradeType: 'InPlace',
  from: 'h1',
  to: 'h2',
  configMaps: after,
  now: NOW,
  ...over,
});

describe('status.rollout: which inputs changed and the strategy of each', () => {
  const cases: { condition: string; input: WhyInput; want: RolloutChange[] }[] = [
    {
      condition: 'the release changes on an InPlace pool',
      input: base({ before: inputs(R1, before), after: inputs(R2, before), configMaps: before }),
      want: [{ input: 'release', detail: `${R1} to ${R2}`, strategy: 'InPlace' }],
    },
    {
      condition: 'the release changes on a Replace pool',
      input: base({
        upgradeType: 'Replace',
        before: inputs(R1, before),
        after: inputs(R2, before),
        configMaps: before,
      }),
      want: [{ input: 'release', detail: `${R1} to ${R2}`, strategy: 'Rollout' }],
    },
    {
      condition: 'a document of one ConfigMap changes and another ConfigMap adds one',
      input: base({ before: inputs(R1, before), after: inputs(R1, after) }),
      want: [
        { input: 'config', detail: 'MachineConfig 50-a changed in ConfigMap base', strategy: 'InPlace' },
        { input: 'config', detail: 'MachineConfig 70-new added in ConfigMap extra', strategy: 'InPlace' },
      ],
    },
    {
      condition: 'a document is removed along with a release change',
      input: base({
        upgradeType: 'Replace',
        before: inputs(R1, before),
        after: inputs(R2, [{ name: 'base', data: { a: mc('50-a', '/etc/a') } }]),
        configMaps: [],
      }),
      want: [
        { input: 'release', detail: `${R1} to ${R2}`, strategy: 'Rollout' },
        { input: 'config', detail: 'KubeletConfig 60-kubelet removed', strategy: 'Rollout' },
      ],
    },
    {
      condition: 'only the template changes on a Replace pool',
      input: base({ upgradeType: 'Replace', from: 'h1', to: 'h1', template: { from: 'tmpl-a', to: 'tmpl-b' } }),
      want: [{ input: 'template', detail: 'tmpl-a to tmpl-b', strategy: 'Rollout' }],
    },
    {
      condition: 'the release and the template change together on a Replace pool',
      input: base({
        upgradeType: 'Replace',
        before: inputs(R1, before),
        after: inputs(R2, before),
        configMaps: before,
        template: { from: 'tmpl-a', to: 'tmpl-b' },
      }),
      want: [
        { input: 'release', detail: `${R1} to ${R2}`, strategy: 'Rollout' },
        { input: 'template', detail: 'tmpl-a to tmpl-b', strategy: 'Rollout' },
      ],
    },
    {
      condition: 'the release and the template change together on a ClusterAPI-engine pool',
      input: base({
        engine: 'ClusterAPI',
        before: inputs(R1, before),
        after: inputs(R2, before),
        configMaps: before,
        template: { from: 'tmpl-a', to: 'tmpl-b' },
      }),
      want: [
        { input: 'release', detail: `${R1} to ${R2}`, strategy: 'InPlace' },
        { input: 'template', detail: 'tmpl-a to tmpl-b', strategy: 'Rollout' },
      ],
    },
    {
      condition:
        'a MachineConfig with kernel arguments comes with a release change on a ClusterAPI-engine pool (the extension refuses the payload, Cluster API replaces the Machines)',
      input: base({
        engine: 'ClusterAPI',
        before: inputs(R1, before),
        after: inputs(R2, withKargs),
        configMaps: withKargs,
      }),
      want: [
        { input: 'release', detail: `${R1} to ${R2}${KARGS_ROLL}`, strategy: 'Rollout' },
        {
          input: 'config',
          detail: `MachineConfig 50-kargs added in ConfigMap kargs${KARGS_ROLL}`,
          strategy: 'Rollout',
        },
      ],
    },
    {
      condition: 'a MachineConfig with kernel arguments is added on a MachineSet-engine pool (the agent is handed it)',
      input: base({ before: inputs(R1, before), after: inputs(R1, withKargs), configMaps: withKargs }),
      want: [{ input: 'config', detail: 'MachineConfig 50-kargs added in ConfigMap kargs', strategy: 'InPlace' }],
    },
    {
      condition: "the old hash's inputs are gone (its token Secret expired before the controller saw the rollout)",
      input: base({ after: inputs(R2, before) }),
      want: [
        {
          input: 'config',
          detail: 'hash h1 to h2: the inputs of h1 are no longer known (its token Secret is gone)',
          strategy: 'InPlace',
        },
      ],
    },
  ];
  for (const c of cases) {
    it(`when ${c.condition}, it should record ${c.want.map((w) => `${w.input} → ${w.strategy}`).join(', ')}`, () => {
      const record = explainRollout(c.input);
      assert.deepEqual(record, { from: c.input.from, to: c.input.to, since: NOW, changes: c.want });
    });
  }

  it('when a template changes on an InPlace pool, it should reach new Machines only', () => {
    assert.equal(strategyOf('template', 'InPlace'), 'NewMachines');
    assert.equal(strategyOf('config', 'InPlace'), 'InPlace');
    assert.equal(strategyOf('release', 'Replace'), 'Rollout');
  });

  it('when a template changes on a ClusterAPI-engine pool, it should roll, while its release and config changes stay in place', () => {
    assert.equal(strategyOf('template', 'InPlace', 'ClusterAPI'), 'Rollout');
    assert.equal(strategyOf('release', 'InPlace', 'ClusterAPI'), 'InPlace');
    assert.equal(strategyOf('config', 'InPlace', 'ClusterAPI'), 'InPlace');
    assert.equal(strategyOf('template', 'InPlace', 'MachineSet'), 'NewMachines');
  });

  it('when more documents change than status can hold, it should keep the first ones and count the rest', () => {
    const many = (suffix: string): ConfigSource[] => [
      {
        name: 'big',
        data: Object.fromEntries(
          Array.from({ length: 70 }, (_, i) => [`k${i}`, mc(`mc-${String(i).padStart(2, '0')}`, `/etc/${suffix}${i}`)]),
        ),
      },
    ];
    const record = explainRollout(
      base({ before: inputs(R1, many('a')), after: inputs(R1, many('b')), configMaps: many('b') }),
    );
    assert.equal(record.changes.length, MAX_CHANGES);
    assert.deepEqual(record.changes.at(-1), { input: 'config', detail: 'and 7 more changes', strategy: 'InPlace' });
  });
});

describe('status.rollout: the disruption of an in-place change', () => {
  const policy = effectiveDisruptionPolicy({ files: [{ path: '/etc/a2', actions: [{ type: 'None' }] }] });

  it('when a MachineConfig moves a file to a None path and a new one adds an unlisted path, it should record each path and drain and reboot', () => {
    const record = explainRollout(
      base({ before: inputs(R1, before), after: inputs(R1, after), disruptionPolicy: policy }),
    );
    assert.deepEqual(record.disruption, {
      action: 'drain, reboot',
      drain: true,
      reboot: true,
      changes: [
        { target: '/etc/a', actions: 'Reboot' },
        { target: '/etc/a2', actions: 'None' },
        { target: '/etc/c', actions: 'Reboot' },
      ],
    });
  });

  it('when only the KubeletConfig changes, it should record a restart of the kubelet and no drain', () => {
    const kubelet: ConfigSource[] = [{ name: 'base', data: { a: mc('50-a', '/etc/a'), b: kc('60-kubelet', 250) } }];
    const record = explainRollout(
      base({ before: inputs(R1, before), after: inputs(R1, kubelet), disruptionPolicy: DEFAULT_DISRUPTION_POLICY }),
    );
    assert.deepEqual(record.disruption, {
      action: 'restart kubelet.service',
      drain: false,
      reboot: false,
      changes: [{ target: '/etc/kubernetes/kubelet.conf (KubeletConfig)', actions: 'Restart kubelet.service' }],
    });
  });

  it('when the pool is a Replace pool, it should record no disruption (its Machines are replaced)', () => {
    const record = explainRollout(
      base({ upgradeType: 'Replace', before: inputs(R1, before), after: inputs(R2, before), disruptionPolicy: policy }),
    );
    assert.equal(record.disruption, undefined);
  });
});

describe('status.rollout: stored when the hash changes, kept while it lasts', () => {
  const stored: RolloutRecord = {
    from: 'h1',
    to: 'h2',
    since: '2026-11-23T22:00:00Z',
    changes: [{ input: 'release', detail: `${R1} to ${R2}`, strategy: 'InPlace' }],
  };

  it('when the same rollout is seen again after the old token Secret expired, it should keep the stored record, time and all', () => {
    assert.equal(keepOrExplain(stored, base({ before: undefined, after: inputs(R2, before) })), stored);
  });

  it('when the target moves on mid-rollout, it should record the new rollout', () => {
    const next = keepOrExplain(stored, base({ to: 'h3', before: inputs(R1, before), after: inputs(R1, after) }));
    assert.equal(next.to, 'h3');
    assert.equal(next.since, NOW);
    assert.deepEqual(
      next.changes.map((c) => c.input),
      ['config', 'config'],
    );
  });

  it('when the template changes during the same hash rollout, it should record it anew', () => {
    const next = keepOrExplain(
      stored,
      base({
        before: inputs(R1, before),
        after: inputs(R2, before),
        configMaps: before,
        template: { from: 'a', to: 'b' },
      }),
    );
    assert.deepEqual(
      next.changes.map((c) => c.input),
      ['release', 'template'],
    );
  });

  it('when there is no stored record, it should explain the rollout', () => {
    assert.equal(
      keepOrExplain(undefined, base({ before: inputs(R1, before), after: inputs(R2, before), configMaps: before }))
        .changes[0]?.input,
      'release',
    );
  });
});
