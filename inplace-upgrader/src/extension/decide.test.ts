import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { LABELS } from '../../../api/src/keys.js';
import { bootstrapTarget, decide, REFUSAL_MARKER, userDataTarget, type DecisionInput, type Verdict } from './decide.js';
import type { JsonObject } from './hooks.js';

const POOL = 'workers';

/** Where a ClusterAPI-engine MachineSet's Machines boot from: the pool's bootstrap template at a hash. */
const ref = (hash: string): { bootstrap: JsonObject } => ({
  bootstrap: {
    configRef: { apiGroup: 'bootstrap.kindling.dev', kind: 'KindlingConfigTemplate', name: `${POOL}-${hash}` },
  },
});

function kindlingTemplate(hash: string, spec: JsonObject = {}): JsonObject {
  return {
    apiVersion: 'bootstrap.kindling.dev/v1beta1',
    kind: 'KindlingConfigTemplate',
    metadata: { name: `${POOL}-${hash}`, namespace: 'tenants' },
    spec: { template: { spec: { nodePool: POOL, configHash: hash, ...spec } } },
  };
}

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
          bootstrap: ref('aaaa').bootstrap,
          infrastructureRef: { apiGroup: 'infrastructure.kindling.dev', kind: 'LocalMachineTemplate', name: 'small' },
          version: 'v1.36.2',
          ...spec,
        },
      },
    },
  };
}

function template(name = 'small', spec: JsonObject = { failureDomains: ['zone-a'] }): JsonObject {
  return {
    apiVersion: 'infrastructure.kindling.dev/v1alpha1',
    kind: 'LocalMachineTemplate',
    metadata: { name, namespace: 'tenants' },
    spec: { template: { spec } },
  };
}

const CLEAN = { pool: POOL, hash: 'bbbb', blockers: [] };
const UPGRADE = { ...ref('bbbb'), version: 'v1.36.3' };

/** A ClusterAPI-engine pool: the desired bootstrap template is the one the desired MachineSet names. */
function input(
  desiredSpec: JsonObject,
  opts: { payload?: DecisionInput['payload']; desiredTemplate?: JsonObject; labels?: Record<string, string> } = {},
): DecisionInput {
  const name =
    (desiredSpec.bootstrap as { configRef?: { name: string } } | undefined)?.configRef?.name ?? `${POOL}-aaaa`;
  return {
    kind: 'MachineSet',
    current: { machine: machineSet('workers-1'), infrastructure: template(), bootstrap: kindlingTemplate('aaaa') },
    desired: {
      machine: machineSet('workers-2', desiredSpec, opts.labels),
      infrastructure: opts.desiredTemplate ?? template(),
      bootstrap: kindlingTemplate(name.slice(POOL.length + 1)),
    },
    payload: 'payload' in opts ? opts.payload : CLEAN,
  };
}

/** A pool without a bootstrap provider: its MachineSets name the user-data Secret directly (Replace pools). */
function plainInput(
  desiredSecret: string,
  opts: { payload?: DecisionInput['payload']; desiredTemplate?: JsonObject } = {},
): DecisionInput {
  const plain = (name: string, secret: string): JsonObject =>
    machineSet(name, { bootstrap: { dataSecretName: secret } });
  return {
    kind: 'MachineSet',
    current: { machine: plain('workers-1', `user-data-${POOL}-aaaa`), infrastructure: template() },
    desired: { machine: plain('workers-2', desiredSecret), infrastructure: opts.desiredTemplate ?? template() },
    payload: 'payload' in opts ? opts.payload : CLEAN,
  };
}

const verdicts = (d: ReturnType<typeof decide>): Record<string, Verdict> =>
  Object.fromEntries(d.changes.map((c) => [c.field, c.verdict]));

describe('in-place decision', () => {
  it('when the bootstrap template and version change to a payload the agent can apply, it should claim them in the MachineSet and template patches', () => {
    const d = decide(input(UPGRADE));
    assert.equal(d.inPlace, true);
    assert.deepEqual(verdicts(d), {
      'bootstrap.configRef.name': 'in-place',
      version: 'in-place',
      'KindlingConfigTemplate configHash': 'in-place',
    });
    assert.deepEqual(d.patches, {
      machine: [
        { op: 'add', path: '/spec/template/spec/bootstrap/configRef/name', value: `${POOL}-bbbb` },
        { op: 'add', path: '/spec/template/spec/version', value: 'v1.36.3' },
      ],
      infrastructure: [],
      bootstrap: [{ op: 'add', path: '/spec/template/spec/configHash', value: 'bbbb' }],
    });
    assert.equal(
      d.message,
      'in place: bootstrap.configRef.name (new payload bbbb: the node agent applies it in place (drain, files and units, reboot)); version (it comes with the new payload); KindlingConfigTemplate configHash (new payload bbbb: the node agent applies it in place (drain, files and units, reboot))',
    );
  });

  it('when a pool without a bootstrap provider gets a new user-data Secret, it should roll and say why (Cluster API would never call UpdateMachine)', () => {
    const d = decide(plainInput(`user-data-${POOL}-bbbb`));
    assert.equal(d.inPlace, false);
    assert.deepEqual(verdicts(d), { 'bootstrap.dataSecretName': 'rollout' });
    assert.deepEqual(d.patches.machine, []);
    // Cluster API leaves bootstrap out of its comparison: only the marker makes it roll.
    assert.match(
      String(d.patches.infrastructure[0]?.value),
      /named without a bootstrap config, and Cluster API calls UpdateMachine only for Machines with one/,
    );
  });

  const table: {
    name: string;
    input: DecisionInput;
    verdicts: Record<string, Verdict>;
    marker: boolean;
    reason?: RegExp;
  }[] = [
    {
      name: 'when the new payload holds kernel arguments, it should roll the template and the version, with the agent’s reason',
      input: input(UPGRADE, { payload: { ...CLEAN, blockers: ['kernelArguments'] } }),
      verdicts: {
        'bootstrap.configRef.name': 'rollout',
        version: 'rollout',
        'KindlingConfigTemplate configHash': 'rollout',
      },
      // The version is a field Cluster API compares: leaving it unclaimed is enough.
      marker: false,
      reason: /payload bbbb holds what the node agent cannot apply in place \(kernelArguments\)/,
    },
    {
      name: 'when only the template changes to a payload with disks, it should roll without a marker, since Cluster API compares the templates',
      input: input(ref('bbbb'), { payload: { ...CLEAN, blockers: ['storage.disks', 'storage.filesystems'] } }),
      verdicts: { 'bootstrap.configRef.name': 'rollout', 'KindlingConfigTemplate configHash': 'rollout' },
      marker: false,
      reason: /storage\.disks; storage\.filesystems/,
    },
    {
      name: 'when the payload of the new template is not known, it should roll',
      input: input(UPGRADE, { payload: undefined }),
      verdicts: {
        'bootstrap.configRef.name': 'rollout',
        version: 'rollout',
        'KindlingConfigTemplate configHash': 'rollout',
      },
      marker: false,
      reason: /payload of pool workers at bbbb is not known/,
    },
    {
      name: 'when the summary is of another hash, it should roll',
      input: input(UPGRADE, { payload: { ...CLEAN, hash: 'cccc' } }),
      verdicts: {
        'bootstrap.configRef.name': 'rollout',
        version: 'rollout',
        'KindlingConfigTemplate configHash': 'rollout',
      },
      marker: false,
    },
    {
      name: 'when the user-data is not a Kindling user-data Secret of the pool, it should roll',
      input: plainInput('hand-made'),
      verdicts: { 'bootstrap.dataSecretName': 'rollout' },
      marker: true,
      reason: /"hand-made" is not a Kindling payload of the pool/,
    },
    {
      name: 'when the infrastructure template content changes, it should roll it and still claim the payload',
      input: input(UPGRADE, { desiredTemplate: template('small', { failureDomains: ['zone-a', 'zone-b'] }) }),
      verdicts: {
        'bootstrap.configRef.name': 'in-place',
        version: 'in-place',
        'LocalMachineTemplate small failureDomains': 'rollout',
        'KindlingConfigTemplate configHash': 'in-place',
      },
      marker: false,
      reason: /does not change the infrastructure in place/,
    },
    {
      name: 'when only the infrastructure template reference changes, it should roll and mark it, since Cluster API compares only content',
      input: input(
        { infrastructureRef: { apiGroup: 'infrastructure.kindling.dev', kind: 'LocalMachineTemplate', name: 'large' } },
        { desiredTemplate: template('large') },
      ),
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
      input: input(
        {
          taints: [{ key: 'a', effect: 'NoSchedule', propagation: 'Always' }],
          deletion: { nodeDrainTimeoutSeconds: 60 },
        },
        { labels: { tier: 'gold' } },
      ),
      verdicts: {
        'metadata.labels.tier': 'propagated',
        taints: 'propagated',
        'deletion.nodeDrainTimeoutSeconds': 'propagated',
      },
      marker: false,
    },
  ];

  for (const row of table) {
    it(row.name, () => {
      const d = decide(row.input);
      assert.deepEqual(verdicts(d), row.verdicts);
      assert.equal(
        d.inPlace,
        Object.values(row.verdicts).every((v) => v !== 'rollout'),
      );
      for (const c of d.changes) assert.ok(c.reason.length > 10, `no readable reason for ${c.field}`);
      const marker = d.patches.infrastructure.find((op) => op.path === `/spec/template/spec/${REFUSAL_MARKER}`);
      assert.equal(
        marker !== undefined,
        row.marker,
        `refusal marker ${row.marker ? 'missing' : 'unexpected'}: ${JSON.stringify(d.patches.infrastructure)}`,
      );
      if (marker) assert.match(String(marker.value), /must roll|\(/);
      assert.ok(
        d.patches.machine.every((op) => d.changes.some((c) => c.path === op.path && c.verdict === 'in-place')),
        'a patch claims a field that is not in place',
      );
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
    const bare = {
      apiVersion: 'infrastructure.kindling.dev/v1alpha1',
      kind: 'BareTemplate',
      metadata: { name: 'b' },
      spec: {},
    };
    const plain = plainInput('hand-made', { desiredTemplate: bare });
    const d = decide({ ...plain, current: { ...plain.current, infrastructure: bare } });
    assert.equal(d.patches.infrastructure.length, 1);
    const [op] = d.patches.infrastructure;
    assert.equal(op?.path, '/spec/template');
    assert.match(
      (op?.value as { spec: Record<string, string> }).spec[REFUSAL_MARKER] ?? '',
      /"hand-made" is not a Kindling payload of the pool/,
    );
  });

  it('when the same request comes twice with keys in another order, it should give the same answer', () => {
    const a = input(UPGRADE);
    const reordered = JSON.parse(
      JSON.stringify(a, (_k, v: unknown) =>
        v && typeof v === 'object' && !Array.isArray(v) ? Object.fromEntries(Object.entries(v).reverse()) : v,
      ),
    ) as DecisionInput;
    assert.deepEqual(decide(reordered), decide(a));
  });

  it('when a bootstrap provider’s template changes, it should roll', () => {
    const cfg = (release: string): JsonObject => ({
      apiVersion: 'bootstrap.example/v1',
      kind: 'ExampleConfigTemplate',
      metadata: { name: 'c' },
      spec: { template: { spec: { release } } },
    });
    const d = decide({
      kind: 'MachineSet',
      current: { machine: machineSet('a'), infrastructure: template(), bootstrap: cfg('1') },
      desired: { machine: machineSet('b'), infrastructure: template(), bootstrap: cfg('2') },
    });
    assert.deepEqual(verdicts(d), { 'ExampleConfigTemplate c release': 'rollout' });
  });

  it('when Cluster API asks about one Machine (CanUpdateMachine), it should decide on the Machine spec and its KindlingConfig', () => {
    const machine = (version: string): JsonObject => ({
      apiVersion: 'cluster.x-k8s.io/v1beta2',
      kind: 'Machine',
      metadata: { name: 'm1', namespace: 'tenants', labels: { [LABELS.nodePool]: POOL } },
      spec: {
        clusterName: 'guest',
        bootstrap: {
          configRef: { apiGroup: 'bootstrap.kindling.dev', kind: 'KindlingConfig', name: 'm1' },
          dataSecretName: `user-data-${POOL}-aaaa`,
        },
        infrastructureRef: { kind: 'LocalMachine', name: 'm1' },
        version,
      },
    });
    const config = (hash: string): JsonObject => ({
      apiVersion: 'bootstrap.kindling.dev/v1beta1',
      kind: 'KindlingConfig',
      metadata: { name: 'm1' },
      spec: { nodePool: POOL, configHash: hash },
    });
    const infra = { kind: 'LocalMachine', metadata: { name: 'm1' }, spec: { failureDomain: 'zone-a' } };
    const d = decide({
      kind: 'Machine',
      current: { machine: machine('v1.36.2'), infrastructure: infra, bootstrap: config('aaaa') },
      desired: { machine: machine('v1.36.3'), infrastructure: infra, bootstrap: config('bbbb') },
      payload: CLEAN,
    });
    assert.equal(d.inPlace, true);
    assert.deepEqual(
      d.patches.machine.map((op) => op.path),
      ['/spec/version'],
    );
    assert.deepEqual(d.patches.bootstrap, [{ op: 'add', path: '/spec/configHash', value: 'bbbb' }]);
  });

  it('when the user-data Secret name is read, it should give the pool and hash only for the pool’s own naming', () => {
    const ms = (secret: string): JsonObject => machineSet('x', { bootstrap: { dataSecretName: secret } });
    assert.deepEqual(userDataTarget('MachineSet', ms(`user-data-${POOL}-0123abcd`)), { pool: POOL, hash: '0123abcd' });
    assert.equal(userDataTarget('MachineSet', ms('user-data-other-0123abcd')), undefined);
    assert.equal(userDataTarget('MachineSet', ms(`user-data-${POOL}-`)), undefined);
    assert.equal(userDataTarget('MachineSet', ms(`user-data-${POOL}-a-b`)), undefined);
  });

  describe('with Kindling’s bootstrap provider (ClusterAPI engine)', () => {
    /** A release upgrade (the first test's input), with a desired bootstrap template of its own when asked. */
    const release = (
      opts: { payload?: DecisionInput['payload']; desiredTemplate?: JsonObject; desiredBootstrap?: JsonObject } = {},
    ): DecisionInput => {
      const upgrade = input(UPGRADE, opts);
      return opts.desiredBootstrap
        ? { ...upgrade, desired: { ...upgrade.desired, bootstrap: opts.desiredBootstrap } }
        : upgrade;
    };

    it('when the new payload holds kernel arguments, it should leave the config hash unclaimed so Cluster API rolls', () => {
      const d = decide(release({ payload: { ...CLEAN, blockers: ['kernel arguments (nosmt)'] } }));
      assert.equal(d.inPlace, false);
      assert.deepEqual(d.patches.bootstrap, []);
      assert.deepEqual(
        d.patches.infrastructure,
        [],
        'Cluster API sees the unclaimed config hash itself: no marker needed',
      );
      assert.match(
        d.message,
        /must roll: .*KindlingConfigTemplate configHash \(payload bbbb holds what the node agent cannot apply in place \(kernel arguments \(nosmt\)\)/,
      );
    });

    it('when the infrastructure template changes with the release, it should roll and say which change forces it', () => {
      const d = decide(release({ desiredTemplate: template('large', { failureDomains: ['zone-c'] }) }));
      assert.equal(d.inPlace, false);
      assert.equal(verdicts(d)['KindlingConfigTemplate configHash'], 'in-place');
      assert.equal(verdicts(d)['LocalMachineTemplate large failureDomains'], 'rollout');
      assert.match(
        d.message,
        /must roll: LocalMachineTemplate large failureDomains \(Kindling does not change the infrastructure in place/,
      );
    });

    it('when the template names another pool, it should roll', () => {
      const d = decide(release({ desiredBootstrap: kindlingTemplate('bbbb', { nodePool: 'others' }) }));
      assert.equal(d.inPlace, false);
      assert.equal(verdicts(d)['KindlingConfigTemplate nodePool'], 'rollout');
    });

    it('when the bootstrap template or config is read, it should give its pool and hash', () => {
      assert.deepEqual(bootstrapTarget('MachineSet', kindlingTemplate('0a1b')), { pool: POOL, hash: '0a1b' });
      assert.deepEqual(
        bootstrapTarget('Machine', {
          apiVersion: 'bootstrap.kindling.dev/v1beta1',
          kind: 'KindlingConfig',
          spec: { nodePool: POOL, configHash: 'ff' },
        }),
        { pool: POOL, hash: 'ff' },
      );
      assert.equal(
        bootstrapTarget('Machine', {
          apiVersion: 'bootstrap.example/v1',
          kind: 'KindlingConfig',
          spec: { nodePool: POOL, configHash: 'ff' },
        }),
        undefined,
      );
    });
  });
});
