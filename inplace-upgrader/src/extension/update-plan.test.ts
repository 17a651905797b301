import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { CAPI_API_VERSION, type MachineDeployment } from '../../../api/src/capi.js';
import { LABELS } from '../../../api/src/keys.js';
import { previewClusterApiUpdate } from './update-plan.js';
import type { JsonObject } from './hooks.js';

const POOL = 'workers';

function kindlingTemplate(hash: string): JsonObject {
  return {
    apiVersion: 'bootstrap.kindling.dev/v1beta1',
    kind: 'KindlingConfigTemplate',
    metadata: { name: `${POOL}-${hash}`, namespace: 'tenants' },
    spec: { template: { spec: { nodePool: POOL, configHash: hash } } },
  };
}

function deployment(hash: string, opts: { version?: string; infrastructure?: string } = {}): MachineDeployment {
  return {
    apiVersion: CAPI_API_VERSION,
    kind: 'MachineDeployment',
    metadata: { name: POOL, namespace: 'tenants', labels: { [LABELS.nodePool]: POOL } },
    spec: {
      clusterName: 'guest',
      replicas: 3,
      selector: { matchLabels: { [LABELS.nodePool]: POOL } },
      template: {
        metadata: { labels: { [LABELS.nodePool]: POOL } },
        spec: {
          clusterName: 'guest',
          bootstrap: {
            configRef: { apiGroup: 'bootstrap.kindling.dev', kind: 'KindlingConfigTemplate', name: `${POOL}-${hash}` },
          },
          infrastructureRef: {
            apiGroup: 'infrastructure.kindling.dev',
            kind: 'LocalMachineTemplate',
            name: opts.infrastructure ?? 'small',
          },
          version: opts.version ?? 'v1.36.2',
        },
      },
    },
  };
}

const MOTD = JSON.stringify([
  {
    kind: 'MachineConfig',
    metadata: { name: '50-motd' },
    spec: { config: { storage: { files: [{ path: '/etc/motd', contents: { source: 'data:,hi' } }] } } },
  },
]);
const KARGS = JSON.stringify([
  { kind: 'MachineConfig', metadata: { name: '60-kargs' }, spec: { kernelArguments: ['nosmt'] } },
]);

const update = (
  config: string | undefined,
  desired = deployment('bbbb', { version: 'v1.36.3' }),
): ReturnType<typeof previewClusterApiUpdate> =>
  previewClusterApiUpdate({
    pool: POOL,
    targetHash: 'bbbb',
    live: deployment('aaaa'),
    desired,
    bootstrap: { current: kindlingTemplate('aaaa'), desired: kindlingTemplate('bbbb') },
    ...(config === undefined ? {} : { config }),
  });

describe('previewClusterApiUpdate', () => {
  it('when a new payload holds only what the agent applies in place, it should answer in place for the template, the version and the hash', () => {
    const p = update(MOTD);
    assert.equal(p.inPlace, true);
    assert.deepEqual(
      p.changes.map((c) => [c.field, c.verdict]),
      [
        ['bootstrap.configRef.name', 'in-place'],
        ['version', 'in-place'],
        ['KindlingConfigTemplate configHash', 'in-place'],
      ],
    );
  });

  it("when the pool's config holds kernel arguments, it should answer that the machines roll and say why", () => {
    const p = update(KARGS);
    assert.equal(p.inPlace, false);
    assert.ok(p.changes.every((c) => c.verdict === 'rollout'));
    assert.match(p.changes[0]?.reason ?? '', /cannot apply in place \(kernelArguments\)/);
  });

  it('when the config is not known, it should roll the new payload rather than guess', () => {
    assert.equal(update(undefined).inPlace, false);
  });

  it('when the infrastructure template changes, it should roll', () => {
    const p = update(MOTD, deployment('bbbb', { version: 'v1.36.3', infrastructure: 'large' }));
    assert.equal(p.inPlace, false);
    assert.ok(p.changes.some((c) => c.verdict === 'rollout' && /infrastructureRef|LocalMachineTemplate/.test(c.field)));
  });
});
