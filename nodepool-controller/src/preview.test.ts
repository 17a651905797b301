import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type * as k8s from '#k8s';
import { SECRET_KEYS, tokenSecretName, userDataSecretName } from '../../api/src/keys.js';
import type { MachineDeployment, MachineSet } from '../../api/src/capi.js';
import type { NodePool } from '../../api/src/nodepool.js';
import { KUBELET_CONFIG, samplePool } from '../../api/testing/nodepool.js';
import {
  configHash,
  desiredMachineDeployment,
  desiredTokenSecret,
  normaliseConfig,
  parseVersion,
  previewNodePool,
  type ControlPlaneVersions,
  type PreviewState,
} from './preview.js';

const NOW = Date.parse('2026-11-24T00:00:00Z');
const IMAGE = (v: string): string => `registry.local:5000/kindling/release:${v}`;
const kubelet: k8s.V1ConfigMap = {
  apiVersion: 'v1',
  kind: 'ConfigMap',
  metadata: { name: 'kubelet-config', namespace: 'tenant-a' },
  data: { config: KUBELET_CONFIG },
};

function controlPlaneAt(v: string): ControlPlaneVersions {
  const version = parseVersion(v);
  assert.ok(version, v);
  return { versionOf: () => Promise.resolve(version) };
}
const unreachable: ControlPlaneVersions = { versionOf: () => Promise.reject(new Error('connect ECONNREFUSED')) };

function state(pool: NodePool, patch: Partial<PreviewState> = {}): PreviewState {
  return {
    pool,
    configMaps: [kubelet],
    secrets: [],
    machineSets: [],
    machineDeployments: [],
    machines: [],
    versions: controlPlaneAt('1.36.3'),
    maxSkewMinors: 3,
    now: NOW,
    ...patch,
  };
}

const hashOf = (image: string): string =>
  configHash({ release: image, config: normaliseConfig([{ name: 'kubelet-config', data: kubelet.data ?? {} }]) });

/** The pool as the controller left it at release 1.36.3: its token Secret (minted) and its MachineDeployment. */
function deployedAt136(pool: NodePool): { secrets: k8s.V1Secret[]; machineDeployments: MachineDeployment[] } {
  const hash = hashOf(IMAGE('1.36.3'));
  const token = desiredTokenSecret(pool, {
    hash,
    inputs: {
      release: IMAGE('1.36.3'),
      config: normaliseConfig([{ name: 'kubelet-config', data: kubelet.data ?? {} }]),
    },
  });
  token.data = { ...token.data, token: Buffer.from('minted').toString('base64') };
  return { secrets: [token], machineDeployments: [desiredMachineDeployment(pool, { hash, version: 'v1.36.3' })] };
}

describe('previewNodePool', () => {
  it("when a new pool is previewed, it should give the controller's hash, its token Secret and the MachineDeployment pointing at it", async () => {
    const pool = samplePool();
    const p = await previewNodePool(state(pool));
    const hash = hashOf(IMAGE('1.36.3'));
    assert.equal(p.target?.hash, hash);
    assert.equal(p.deployed, undefined);
    assert.equal(p.blocked, undefined);
    assert.deepEqual(p.effective, { hash, version: 'v1.36.3' });
    assert.equal(p.desiredChildren.tokenSecret?.metadata?.name, tokenSecretName('workers', hash));
    const child = p.desiredChildren.child as MachineDeployment;
    assert.equal(child.kind, 'MachineDeployment');
    assert.equal(child.spec.template.spec.bootstrap.dataSecretName, userDataSecretName('workers', hash));
    assert.deepEqual(p.verdicts.release, {
      ok: true,
      reason: 'AsExpected',
      message: 'Release v1.36.3',
      version: 'v1.36.3',
    });
    assert.ok(
      p.skew.policies.length > 0 && p.skew.policies.every((x) => x.verdict?.ok === true),
      JSON.stringify(p.skew.policies),
    );
  });

  it("when the override names a release newer than the control plane, it should block it and keep the deployed child, leaving the state's pool alone", async () => {
    const pool = samplePool();
    const p = await previewNodePool(state(pool, deployedAt136(pool)), { release: IMAGE('1.37.0') });
    assert.equal(pool.spec.release.image, IMAGE('1.36.3'));
    assert.equal(p.pool.spec.release.image, IMAGE('1.37.0'));
    assert.equal(p.verdicts.skew?.reason, 'NodeNewerThanControlPlane');
    assert.match(p.blocked ?? '', /^The change to config hash \w+ is blocked: /);
    const deployed = hashOf(IMAGE('1.36.3'));
    assert.equal(p.deployed?.hash, deployed);
    assert.deepEqual(p.deployed?.inputs?.release, IMAGE('1.36.3'));
    assert.deepEqual(p.effective, { hash: deployed, version: 'v1.36.3' });
    assert.equal(p.desiredChildren.tokenSecret, undefined);
    assert.equal(
      (p.desiredChildren.child as MachineDeployment).spec.template.spec.bootstrap.dataSecretName,
      userDataSecretName('workers', deployed),
    );
  });

  it("when the deployed token Secret's inputs were edited away from its hash, it should not show them as the deployed inputs", async () => {
    const pool = samplePool();
    const deployed = deployedAt136(pool);
    const token = deployed.secrets[0] as k8s.V1Secret;
    token.data = { ...token.data, [SECRET_KEYS.release]: Buffer.from(IMAGE('1.30.0')).toString('base64') };
    const p = await previewNodePool(state(pool, deployed), { release: IMAGE('1.37.0') });
    assert.equal(p.deployed?.hash, hashOf(IMAGE('1.36.3')));
    assert.equal(p.deployed?.inputs, undefined, 'a tenant that can write Secrets does not choose what plan shows');
  });

  it('when the override names a ConfigMap that does not exist, it should say so and check no skew policy', async () => {
    const p = await previewNodePool(state(samplePool()), { config: ['missing'] });
    assert.equal(p.verdicts.config?.reason, 'ConfigMapMissing');
    assert.equal(p.target, undefined);
    assert.equal(p.blocked, "The pool's release or config is invalid: nothing changes until it is fixed");
    assert.ok(p.skew.policies.length > 0 && p.skew.policies.every((x) => x.verdict === undefined));
    assert.deepEqual(p.desiredChildren, {});
  });

  it('when the override is a whole spec, it should preview that spec (an InPlace pool gets a MachineSet)', async () => {
    const pool = samplePool();
    const spec = {
      ...structuredClone(pool.spec),
      management: { upgradeType: 'InPlace' as const, inPlace: { maxUnavailable: 1 } },
    };
    const p = await previewNodePool(state(pool), { spec });
    assert.equal((p.desiredChildren.child as MachineSet).kind, 'MachineSet');
  });

  it('when the control plane cannot be read, it should block the change and say why', async () => {
    const p = await previewNodePool(state(samplePool(), { versions: unreachable }));
    assert.equal(p.verdicts.skew?.reason, 'ControlPlaneUnreachable');
    assert.match(p.skew.controlPlane.error ?? '', /ECONNREFUSED/);
    assert.deepEqual(p.skew.policies, []);
    assert.match(p.blocked ?? '', /the control plane version is unknown/);
  });
});
