import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { LABELS } from '../../../api/src/keys.js';
import { bootstrapTarget, decide, REFUSAL_MARKER, userDataTarget, type DecisionInput, type Verdict } from './decide.js';
import type { JsonObject } from './hooks.js';

const POOL = 'workers';

/** A MachineSet as Cluster API sends it in CanUpdateMachineSet (metadata cut down, spec whole). */
function machineSet(name: string, spec: JsonObject = {}, labels: Record<string, string> = {}): JsonObject {
  return {
    apiVersion: 'cluster.x-k8s.io/v1beta2',
    kind: 'MachineSet',
    metadata: { name, namespace: 'tenants', labels: { [LABELS.nodePool]: POOL } },
    spec: {
      clusterName: 'guest',
      replicas: 3,
      selector: { matchLabels: { [LABELS.nodePool]: POOL } },
      template: {
        metadata: { labels: { [LABELS.nodePool]: POOL, ...labels } },
        spec: {
          clusterName: 'guest',
          bootstrap: { dataSecretName: `user-data-${POOL}-aaaa` },
          infrastructureRef: { apiGroup: 'infrastructure.kindling.dev', kind: 'LocalMachineTemplate', name: 'small' },
          version: 'v1.36.2',
          ...spec,
        },
      },
    },
  };
}

function template(name = 'small', spec: JsonObject = { failureDomains: ['zone-a'] }): JsonObject {
  return { apiVersion: 'infrastructure.kindling.dev/v1alpha1', kind: 'LocalMachineTemplate', metadata: { name, namespace: 'tenants' }, spec: { template: { spec } } };
}

const CLEAN = { pool: POOL, hash: 'bbbb', blockers: [] };
const UPGRADE = { bootstrap: { dataSecretName: `user-data-${POOL}-bbbb` }, version: 'v1.36.3' };

function input(desiredSpec: JsonObject, opts: { payload?: DecisionInput['payload']; desiredTemplate?: JsonObject; labels?: Record<string, string> } = {}): DecisionInput {
  return {
    kind: 'MachineSet',
    current: { machine: machineSet('workers-1'), infrastructure: template() },
    desired: { machine: machineSet('workers-2', desiredSpec, opts.labels), infrastructure: opts.desiredTemplate ?? template() },
    payload: 'payload' in opts ? opts.payload : CLEAN,
  };
}

const verdicts = (d: ReturnType<typeof decide>): Record<string, Verdict> => Object.fromEntries(d.changes.map((c) => [c.field, c.verdict]));

describe('in-place decision', () => {
  it('when the user-data and version change to a payload the agent can apply, it should claim both in the MachineSet patch', () => {
    const d = decide(input(UPGRADE));
    assert.equal(d.inPlace, true);
    assert.deepEqual(verdicts(d), { 'bootstrap.dataSecretName': 'in-place', version: 'in-place' });
    assert.deepEqual(d.patches, {
      machine: [
        { op: 'add', path: '/spec/template/spec/bootstrap/dataSecretName', value: `user-data-${POOL}-bbbb` },
        { op: 'add', path: '/spec/template/spec/version', value: 'v1.36.3' },
      ],
      infrastructure: [],
      bootstrap: [],
    });
    assert.equal(
      d.message,
      'in place: bootstrap.dataSecretName (new payload bbbb: the node agent applies it in place (drain, files and units, reboot)); version (it comes with the new payload)',
    );
  });

  const table: { name: string; input: DecisionInput; verdicts: Record<string, Verdict>; marker: boolean; reason?: RegExp }[] = [
    {
      name: 'when the new payload holds kernel arguments, it should roll both the user-data and the version, with the agent’s reason',
      input: input(UPGRADE, { payload: { ...CLEAN, blockers: ['kernelArguments'] } }),
      verdicts: { 'bootstrap.dataSecretName': 'rollout', version: 'rollout' },
      // The version is a field Cluster API compares: leaving it unclaimed is enough.
      marker: false,
      reason: /payload bbbb holds what the node agent cannot apply in place \(kernelArguments\)/,
    },
    {
      name: 'when only the user-data changes to a payload with disks, it should mark the refusal, since Cluster API does not compare bootstrap',
      input: input({ bootstrap: { dataSecretName: `user-data-${POOL}-bbbb` } }, { payload: { ...CLEAN, blockers: ['storage.disks', 'storage.filesystems'] } }),
      verdicts: { 'bootstrap.dataSecretName': 'rollout' },
      marker: true,
      reason: /storage\.disks; storage\.filesystems/,
    },
    {
      name: 'when the payload of the new user-data is not known, it should roll',
      input: input(UPGRADE, { payload: undefined }),
      verdicts: { 'bootstrap.dataSecretName': 'rollout', version: 'rollout' },
      marker: false,
      reason: /payload of pool workers at bbbb is not known/,
    },
    {
      name: 'when the summary is of another hash, it should roll',
      input: input(UPGRADE, { payload: { ...CLEAN, hash: 'cccc' } }),
      verdicts: { 'bootstrap.dataSecretName': 'rollout', version: 'rollout' },
      marker: false,
    },
    {
      name: 'when the user-data is not a Kindling user-data Secret of the pool, it should roll',
      input: input({ bootstrap: { dataSecretName: 'hand-made' } }),
      verdicts: { 'bootstrap.dataSecretName': 'rollout' },
      marker: true,
      reason: /"hand-made" is not a Kindling payload of the pool/,
    },
    {
      name: 'when the infrastructure template content changes, it should roll it and still claim the user-data',
      input: input(UPGRADE, { desiredTemplate: template('small', { failureDomains: ['zone-a', 'zone-b'] }) }),
      verdicts: { 'bootstrap.dataSecretName': 'in-place', version: 'in-place', 'LocalMachineTemplate small failureDomains': 'rollout' },
      marker: false,
      reason: /does not change the infrastructure in place/,
    },
    {
      name: 'when only the infrastructure template reference changes, it should roll and mark it, since Cluster API compares only content',
      input: input({ infrastructureRef: { apiGroup: 'infrastructure.kindling.dev', kind: 'LocalMachineTemplate', name: 'large' } }, { desiredTemplate: template('large') }),
      verdicts: { 'infrastructureRef.name': 'rollout' },
      marker: true,
      reason: /another infrastructure template \("small" → "large"\)/,
    },
    {
      name: 'when the failure domain changes, it should roll',
      input: input({ failureDomain: 'zone-b' }),
      verdicts: { failureDomain: 'rollout' },
      marker: false,
    },
    {
      name: 'when the version changes without a new payload, it should roll',
      input: input({ version: 'v1.36.3' }),
      verdicts: { version: 'rollout' },
      marker: false,
      reason: /the kubelet comes from the payload/,
    },
    {
      name: 'when a field Kindling does not know changes, it should roll',
      input: input({ somethingNew: { enabled: true } }),
      verdicts: { 'somethingNew.enabled': 'rollout' },
      marker: false,
      reason: /does not know how to change it in place/,
    },
    {
      name: 'when labels, taints and timeouts change, it should leave them to Cluster API and claim nothing',
      input: input({ taints: [{ key: 'a', effect: 'NoSchedule', propagation: 'Always' }], deletion: { nodeDrainTimeoutSeconds: 60 } }, { labels: { tier: 'gold' } }),
      verdicts: { 'metadata.labels.tier': 'propagated', taints: 'propagated', 'deletion.nodeDrainTimeoutSeconds': 'propagated' },
      marker: false,
    },
  ];

  for (const row of table) {
    it(row.name, () => {
      const d = decide(row.input);
      assert.deepEqual(verdicts(d), row.verdicts);
      assert.equal(d.inPlace, Object.values(row.verdicts).every((v) => v !== 'rollout'));
      for (const c of d.changes) assert.ok(c.reason.length > 10, `no readable reason for ${c.field}`);
      const marker = d.patches.infrastructure.find((op) => op.path === `/spec/template/spec/${REFUSAL_MARKER}`);
      assert.equal(marker !== undefined, row.marker, `refusal marker ${row.marker ? 'missing' : 'unexpected'}: ${JSON.stringify(d.patches.infrastructure)}`);
      if (marker) assert.match(String(marker.value), /must roll|\(/);
      assert.ok(d.patches.machine.every((op) => d.changes.some((c) => c.path === op.path && c.verdict === 'in-place')), 'a patch claims a field that is not in place');
      if (row.reason) assert.match(d.message, row.reason);
    });
  }

  it('when nothing changes, it should say so and claim nothing', () => {
    const d = decide(input({}));
    assert.equal(d.inPlace, true);
    assert.deepEqual(d.changes, []);
    assert.equal(d.message, 'nothing changes');
  });

  it('when the infrastructure template has no spec.template, it should create the parents of the refusal marker', () => {
    const bare = { apiVersion: 'infrastructure.kindling.dev/v1alpha1', kind: 'BareTemplate', metadata: { name: 'b' }, spec: {} };
    const d = decide({ ...input({ bootstrap: { dataSecretName: 'hand-made' } }, { desiredTemplate: bare }), current: { machine: machineSet('workers-1'), infrastructure: bare } });
    assert.equal(d.patches.infrastructure.length, 1);
    const [op] = d.patches.infrastructure;
    assert.equal(op?.path, '/spec/template');
    assert.match((op?.value as { spec: Record<string, string> }).spec[REFUSAL_MARKER] ?? '', /"hand-made" is not a Kindling payload of the pool/);
  });

  it('when the same request comes twice with keys in another order, it should give the same answer', () => {
    const a = input(UPGRADE);
    const reordered = JSON.parse(JSON.stringify(a, (_k, v: unknown) => (v && typeof v === 'object' && !Array.isArray(v) ? Object.fromEntries(Object.entries(v).reverse()) : v))) as DecisionInput;
    assert.deepEqual(decide(reordered), decide(a));
  });

  it('when a bootstrap provider’s template changes, it should roll', () => {
    const cfg = (release: string): JsonObject => ({ apiVersion: 'bootstrap.example/v1', kind: 'ExampleConfigTemplate', metadata: { name: 'c' }, spec: { template: { spec: { release } } } });
    const d = decide({ kind: 'MachineSet', current: { machine: machineSet('a'), infrastructure: template(), bootstrap: cfg('1') }, desired: { machine: machineSet('b'), infrastructure: template(), bootstrap: cfg('2') } });
    assert.deepEqual(verdicts(d), { 'ExampleConfigTemplate c release': 'rollout' });
  });

  it('when Cluster API asks about one Machine (CanUpdateMachine), it should decide on the Machine spec', () => {
    const machine = (secret: string, version: string): JsonObject => ({
      apiVersion: 'cluster.x-k8s.io/v1beta2',
      kind: 'Machine',
      metadata: { name: 'm1', namespace: 'tenants', labels: { [LABELS.nodePool]: POOL } },
      spec: { clusterName: 'guest', bootstrap: { dataSecretName: secret }, infrastructureRef: { kind: 'LocalMachine', name: 'm1' }, version },
    });
    const infra = { kind: 'LocalMachine', metadata: { name: 'm1' }, spec: { failureDomain: 'zone-a' } };
    const d = decide({ kind: 'Machine', current: { machine: machine(`user-data-${POOL}-aaaa`, 'v1.36.2'), infrastructure: infra }, desired: { machine: machine(`user-data-${POOL}-bbbb`, 'v1.36.3'), infrastructure: infra }, payload: CLEAN });
    assert.equal(d.inPlace, true);
    assert.deepEqual(d.patches.machine.map((op) => op.path), ['/spec/bootstrap/dataSecretName', '/spec/version']);
  });

  it('when the user-data Secret name is read, it should give the pool and hash only for the pool’s own naming', () => {
    const ms = (secret: string): JsonObject => machineSet('x', { bootstrap: { dataSecretName: secret } });
    assert.deepEqual(userDataTarget('MachineSet', ms(`user-data-${POOL}-0123abcd`)), { pool: POOL, hash: '0123abcd' });
    assert.equal(userDataTarget('MachineSet', ms('user-data-other-0123abcd')), undefined);
    assert.equal(userDataTarget('MachineSet', ms(`user-data-${POOL}-`)), undefined);
    assert.equal(userDataTarget('MachineSet', ms(`user-data-${POOL}-a-b`)), undefined);
  });

  describe('with Kindling’s bootstrap provider (ClusterAPI engine)', () => {
    const kindlingTemplate = (hash: string, spec: JsonObject = {}): JsonObject => ({
      apiVersion: 'bootstrap.kindling.dev/v1beta1',
      kind: 'KindlingConfigTemplate',
      metadata: { name: `${POOL}-${hash}`, namespace: 'tenants' },
      spec: { template: { spec: { nodePool: POOL, configHash: hash, ...spec } } },
    });
    const ref = (hash: string): JsonObject => ({ bootstrap: { configRef: { apiGroup: 'bootstrap.kindling.dev', kind: 'KindlingConfigTemplate', name: `${POOL}-${hash}` } } });
    const release = (opts: { payload?: DecisionInput['payload']; desiredTemplate?: JsonObject; desiredBootstrap?: JsonObject } = {}): DecisionInput => ({
      kind: 'MachineSet',
      current: { machine: machineSet('workers-1', ref('aaaa')), infrastructure: template(), bootstrap: kindlingTemplate('aaaa') },
      desired: { machine: machineSet('workers-2', { ...ref('bbbb'), version: 'v1.36.3' }), infrastructure: opts.desiredTemplate ?? template(), bootstrap: opts.desiredBootstrap ?? kindlingTemplate('bbbb') },
      payload: 'payload' in opts ? opts.payload : CLEAN,
    });

    it('when a release moves the pool to a new bootstrap template the agent can apply, it should claim the config hash and the version', () => {
      const d = decide(release());
      assert.equal(d.inPlace, true);
      assert.deepEqual(verdicts(d), { 'bootstrap.configRef.name': 'in-place', version: 'in-place', 'KindlingConfigTemplate configHash': 'in-place' });
      assert.deepEqual(d.patches, {
        machine: [
          { op: 'add', path: '/spec/template/spec/bootstrap/configRef/name', value: `${POOL}-bbbb` },
          { op: 'add', path: '/spec/template/spec/version', value: 'v1.36.3' },
        ],
        infrastructure: [],
        bootstrap: [{ op: 'add', path: '/spec/template/spec/configHash', value: 'bbbb' }],
      });
      assert.match(d.message, /^in place: bootstrap\.configRef\.name \(new payload bbbb: the node agent applies it in place/);
    });

    it('when the new payload holds kernel arguments, it should leave the config hash unclaimed so Cluster API rolls', () => {
      const d = decide(release({ payload: { ...CLEAN, blockers: ['kernel arguments (nosmt)'] } }));
      assert.equal(d.inPlace, false);
      assert.deepEqual(d.patches.bootstrap, []);
      assert.deepEqual(d.patches.infrastructure, [], 'Cluster API sees the unclaimed config hash itself: no marker needed');
      assert.match(d.message, /must roll: .*KindlingConfigTemplate configHash \(payload bbbb holds what the node agent cannot apply in place \(kernel arguments \(nosmt\)\)/);
    });

    it('when the infrastructure template changes with the release, it should roll and say which change forces it', () => {
      const d = decide(release({ desiredTemplate: template('large', { failureDomains: ['zone-c'] }) }));
      assert.equal(d.inPlace, false);
      assert.equal(verdicts(d)['KindlingConfigTemplate configHash'], 'in-place');
      assert.equal(verdicts(d)['LocalMachineTemplate large failureDomains'], 'rollout');
      assert.match(d.message, /must roll: LocalMachineTemplate large failureDomains \(Kindling does not change the infrastructure in place/);
    });

    it('when the template names another pool, it should roll', () => {
      const d = decide(release({ desiredBootstrap: kindlingTemplate('bbbb', { nodePool: 'others' }) }));
      assert.equal(d.inPlace, false);
      assert.equal(verdicts(d)['KindlingConfigTemplate nodePool'], 'rollout');
    });

    it('when the bootstrap template or config is read, it should give its pool and hash', () => {
      assert.deepEqual(bootstrapTarget('MachineSet', kindlingTemplate('0a1b')), { pool: POOL, hash: '0a1b' });
      assert.deepEqual(bootstrapTarget('Machine', { apiVersion: 'bootstrap.kindling.dev/v1beta1', kind: 'KindlingConfig', spec: { nodePool: POOL, configHash: 'ff' } }), { pool: POOL, hash: 'ff' });
      assert.equal(bootstrapTarget('Machine', { apiVersion: 'bootstrap.example/v1', kind: 'KindlingConfig', spec: { nodePool: POOL, configHash: 'ff' } }), undefined);
    });
  });
});
