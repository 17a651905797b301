import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  actionsFor,
  DEFAULT_DISRUPTION_POLICY,
  describeDisruption,
  effectiveDisruptionPolicy,
  leastDisruption,
  NO_DISRUPTION,
  parseEffectivePolicy,
  type ChangeTarget,
} from './disruption.js';

const file = (path: string): ChangeTarget => ({ kind: 'file', path });
const unit = (name: string): ChangeTarget => ({ kind: 'unit', name });
const defaults = DEFAULT_DISRUPTION_POLICY;

describe('disruption policy defaults', () => {
  it('when only SSH keys change, it should need nothing', () => {
    assert.deepEqual(leastDisruption(defaults, [{ kind: 'sshKeys' }]), NO_DISRUPTION);
  });

  it('when the registries configuration changes, it should reload the runtime without a drain', () => {
    const d = leastDisruption(defaults, [
      file('/etc/containers/registries.conf'),
      file('/etc/containers/registries.d/a'),
    ]);
    assert.deepEqual(d, { ...NO_DISRUPTION, reload: ['crio.service'] });
  });

  it('when the kubelet config changes, it should restart only the kubelet', () => {
    const d = leastDisruption(defaults, [file('/etc/kubernetes/kubelet.conf')]);
    assert.deepEqual(d, { ...NO_DISRUPTION, restart: ['kubelet.service'] });
  });

  it('when a path no entry names changes, it should drain and reboot', () => {
    assert.deepEqual(leastDisruption(defaults, [file('/etc/motd')]), { ...NO_DISRUPTION, drain: true, reboot: true });
  });

  it('when a unit no entry names changes, it should drain and reboot', () => {
    assert.equal(leastDisruption(defaults, [unit('app.service')]).reboot, true);
  });

  it('when a prefix is a folder name, it should not cover a sibling that starts with the same letters', () => {
    assert.deepEqual(actionsFor(defaults, file('/etc/containers/registries.dx')), [{ type: 'Reboot' }]);
  });
});

describe('a pool policy over the defaults', () => {
  const policy = effectiveDisruptionPolicy({
    files: [
      { path: '/etc/motd', actions: [{ type: 'None' }] },
      { path: '/etc/app', match: 'Prefix', actions: [{ type: 'Reload', unit: 'app.service' }] },
      {
        path: '/etc/app/critical',
        match: 'Prefix',
        actions: [{ type: 'Drain' }, { type: 'Restart', unit: 'app.service' }],
      },
      { path: '/etc/kubernetes/kubelet.conf', actions: [{ type: 'Reboot' }] },
    ],
    units: [{ name: 'app.service', actions: [{ type: 'Restart', unit: 'app.service' }] }],
  });

  it('when a pool names a default path, it should replace the default entry and keep the others', () => {
    assert.deepEqual(actionsFor(policy, file('/etc/kubernetes/kubelet.conf')), [{ type: 'Reboot' }]);
    assert.deepEqual(actionsFor(policy, file('/etc/containers/policy.json')), [
      { type: 'Reload', unit: 'crio.service' },
    ]);
    assert.deepEqual(policy.sshKeys, defaults.sshKeys);
  });

  it('when two prefixes cover a path, it should take the longer one', () => {
    assert.deepEqual(actionsFor(policy, file('/etc/app/critical/x')), [
      { type: 'Drain' },
      { type: 'Restart', unit: 'app.service' },
    ]);
    assert.deepEqual(actionsFor(policy, file('/etc/app/other')), [{ type: 'Reload', unit: 'app.service' }]);
  });

  it('when a None path changes, it should need nothing at all', () => {
    assert.deepEqual(leastDisruption(policy, [file('/etc/motd')]), NO_DISRUPTION);
  });

  it('when a unit is reloaded and restarted, it should only restart it, after a daemon-reload for its unit file', () => {
    const d = leastDisruption(policy, [file('/etc/app/a'), unit('app.service')]);
    assert.deepEqual(d, { ...NO_DISRUPTION, daemonReload: true, restart: ['app.service'] });
    assert.equal(describeDisruption(d), 'daemon-reload, restart app.service');
  });

  it('when one change asks for a drain, it should drain without a reboot', () => {
    const d = leastDisruption(policy, [file('/etc/motd'), file('/etc/app/critical/x')]);
    assert.deepEqual(d, { ...NO_DISRUPTION, drain: true, restart: ['app.service'] });
  });

  it('when one change of many needs a reboot, it should drain and reboot and run nothing else', () => {
    const d = leastDisruption(policy, [file('/etc/app/a'), file('/etc/hosts')]);
    assert.equal(describeDisruption(d), 'drain, reboot');
    assert.deepEqual(d.reload, []);
  });
});

describe('parseEffectivePolicy', () => {
  it('when there is no policy, it should give the defaults', () => {
    assert.equal(parseEffectivePolicy(undefined), DEFAULT_DISRUPTION_POLICY);
  });

  it('when a policy round-trips through JSON, it should be the same policy', () => {
    const policy = effectiveDisruptionPolicy({ units: [{ name: 'a.service', actions: [{ type: 'DaemonReload' }] }] });
    assert.deepEqual(parseEffectivePolicy(JSON.stringify(policy)), policy);
  });

  it('when an action is unknown or a Restart names no unit, it should throw an error that names it', () => {
    assert.throws(
      () => parseEffectivePolicy('{"files":[{"path":"/a","actions":[{"type":"Kexec"}]}]}'),
      /files\[0\]: unknown action "Kexec"/,
    );
    assert.throws(
      () => parseEffectivePolicy('{"units":[{"name":"a","actions":[{"type":"Restart"}]}]}'),
      /Restart needs a unit name/,
    );
    assert.throws(
      () => parseEffectivePolicy('{"units":[{"name":"a","actions":[{"type":"Restart","unit":"--root=/x.service"}]}]}'),
      /Restart needs a unit name such as kubelet.service, not "--root=\/x.service"/,
    );
    assert.throws(() => parseEffectivePolicy('{'), /not JSON/);
  });
});
