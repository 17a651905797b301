import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { TerminalError } from '../../support/src/errors.js';
import { changedInputs, configHash, normaliseConfig, type ConfigSource } from './hash.js';
import { goldenIn } from '../../support/testing/golden.js';
import { KUBELET_CONFIG } from '../../api/testing/nodepool.js';

const assertGolden = goldenIn('nodepool-controller/src/testdata');

const RELEASE = 'registry.local:5000/kindling/release:1.36.3';
const sources: ConfigSource[] = [{ name: 'kubelet-config', data: { config: KUBELET_CONFIG } }];

describe('normaliseConfig', () => {
  it('when ConfigMaps hold several documents, it should sort them by kind then name with sorted keys (golden)', () => {
    assertGolden('config-normalised.json', JSON.parse(normaliseConfig(sources)));
  });

  it('when documents are reordered, re-indented or split over ConfigMaps, it should give the same string', () => {
    const [kubelet] = KUBELET_CONFIG.split('---\n') as [string];
    // The same MachineConfig in flow style, keys in another order, in another ConfigMap listed first.
    const machine =
      '{"spec": {"config": {"storage": {"files": [{"contents": {"source": "data:,hello"}, "path": "/etc/motd"}]}, "ignition": {"version": "3.2.0"}}}, "metadata": {"name": "50-motd"}, "apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig"}';
    const split: ConfigSource[] = [
      { name: 'b', data: { z: `${machine}\n---\n` } },
      { name: 'a', data: { config: `# a comment\n${kubelet}` } },
    ];
    assert.equal(normaliseConfig(split), normaliseConfig(sources));
  });

  it('when no ConfigMap is referenced, it should give an empty array', () => {
    assert.equal(normaliseConfig([]), '[]');
  });

  it('when a value is not YAML, it should throw a TerminalError with reason InvalidConfig', () => {
    assert.throws(
      () => normaliseConfig([{ name: 'bad', data: { config: 'kind: [unclosed' } }]),
      (err: unknown) =>
        err instanceof TerminalError &&
        err.reason === 'InvalidConfig' &&
        /ConfigMap bad, key config: not valid YAML/.test(err.message),
    );
  });

  it('when a document has an unknown kind or no name, it should throw a TerminalError saying which', () => {
    assert.throws(
      () => normaliseConfig([{ name: 'x', data: { config: 'kind: Deployment\nmetadata: {name: a}' } }]),
      /kind Deployment is not one of MachineConfig, KubeletConfig/,
    );
    assert.throws(
      () => normaliseConfig([{ name: 'x', data: { config: 'kind: MachineConfig\nspec: {}' } }]),
      /a MachineConfig needs metadata.name/,
    );
    assert.throws(
      () => normaliseConfig([{ name: 'x', data: { config: '- a\n- b' } }]),
      /must be a MachineConfig or KubeletConfig object/,
    );
  });
});

describe('configHash', () => {
  const config = normaliseConfig(sources);

  it('when the inputs are fixed, it should give a fixed 16-hex-digit hash (golden)', () => {
    assertGolden('config-hash.json', {
      release: RELEASE,
      hash: configHash({ release: RELEASE, config }),
      emptyConfigHash: configHash({ release: RELEASE, config: '[]' }),
    });
  });

  it('when only the release or only the config changes, it should change and say which input changed', () => {
    const base = { release: RELEASE, config };
    const newRelease = { release: RELEASE.replace('1.36.3', '1.36.4'), config };
    const newConfig = { release: RELEASE, config: '[]' };
    assert.notEqual(configHash(newRelease), configHash(base));
    assert.notEqual(configHash(newConfig), configHash(base));
    assert.deepEqual(changedInputs(base, newRelease), ['release']);
    assert.deepEqual(changedInputs(base, newConfig), ['config']);
    assert.deepEqual(changedInputs(newRelease, newConfig), ['release', 'config']);
    assert.deepEqual(changedInputs(base, { ...base }), []);
  });

  it('when the inputs would concatenate to the same text, it should still give different hashes', () => {
    assert.notEqual(
      configHash({ release: 'a:1.0.0', config: '1[]' }),
      configHash({ release: 'a:1.0.01', config: '[]' }),
    );
  });
});
