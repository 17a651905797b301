import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DEFAULT_DISRUPTION_POLICY, effectiveDisruptionPolicy, NO_DISRUPTION } from '../../api/src/disruption.js';
import { beyondCeiling, disruptionOf, systemctlCommands, targetOf, unitActionsOf } from './disruption.js';
import { Host } from './host.js';
import { parseIgnition, type IgnitionConfig } from '../../support/src/ignition/ignition.js';
import { layAccounts } from '../testing/agent.js';

const roots: string[] = [];
after(() => Promise.all(roots.map((r) => rm(r, { recursive: true, force: true }))));

async function changesOf(
  c: Omit<IgnitionConfig, 'ignition'>,
): Promise<{ path: string; origin: 'storage' | 'unit' | 'ssh' }[]> {
  const root = await mkdtemp(join(tmpdir(), 'kindling-disruption-'));
  roots.push(root);
  await layAccounts(root);
  const host = new Host(root);
  return host.changes(await host.entries(parseIgnition(JSON.stringify({ ignition: { version: '3.4.0' }, ...c }))));
}

const file = (path: string): { path: string; contents: { source: string } } => ({
  path,
  contents: { source: 'data:,x' },
});

describe('the agent least action', () => {
  it('when only SSH keys change, it should need nothing', async () => {
    const changes = await changesOf({ passwd: { users: [{ name: 'core', sshAuthorizedKeys: ['k'] }] } });
    assert.deepEqual(disruptionOf(DEFAULT_DISRUPTION_POLICY, changes), NO_DISRUPTION);
  });

  it('when the kubelet config changes, it should restart the kubelet and drain nothing', async () => {
    const changes = await changesOf({ storage: { files: [file('/etc/kubernetes/kubelet.conf')] } });
    const d = disruptionOf(DEFAULT_DISRUPTION_POLICY, changes);
    assert.deepEqual(d, { ...NO_DISRUPTION, restart: ['kubelet.service'] });
    assert.deepEqual(systemctlCommands(unitActionsOf(d) ?? { daemonReload: false, reload: [], restart: [] }), [
      ['restart', 'kubelet.service'],
    ]);
  });

  it('when a unit, its drop-in and its enablement change, it should find the unit by name in every path', async () => {
    const changes = await changesOf({
      systemd: {
        units: [
          {
            name: 'app.service',
            enabled: true,
            contents: '[Install]\nWantedBy=multi-user.target\n',
            dropins: [{ name: 'a.conf', contents: 'x' }],
          },
        ],
      },
    });
    assert.deepEqual(
      new Set(changes.map((c) => JSON.stringify(targetOf(c)))),
      new Set([JSON.stringify({ kind: 'unit', name: 'app.service' })]),
    );
    const policy = effectiveDisruptionPolicy({
      units: [{ name: 'app.service', actions: [{ type: 'Restart', unit: 'app.service' }] }],
    });
    const d = disruptionOf(policy, changes);
    assert.deepEqual(unitActionsOf(d), { daemonReload: true, reload: [], restart: ['app.service'] });
    assert.deepEqual(systemctlCommands(unitActionsOf(d) ?? d), [['daemon-reload'], ['restart', 'app.service']]);
  });

  it('when a path the policy does not name changes with a None path, it should drain and reboot and run no unit action', async () => {
    const policy = effectiveDisruptionPolicy({ files: [{ path: '/etc/motd', actions: [{ type: 'None' }] }] });
    const none = await changesOf({ storage: { files: [file('/etc/motd')] } });
    assert.deepEqual(disruptionOf(policy, none), NO_DISRUPTION);
    const both = await changesOf({ storage: { files: [file('/etc/motd'), file('/etc/other.conf')] } });
    const d = disruptionOf(policy, both);
    assert.deepEqual([d.drain, d.reboot, unitActionsOf(d)], [true, true, undefined]);
  });
});

describe('the rollout ceiling', () => {
  const ceiling = 'waiting for the maintenance window (opens 2026-12-01T02:00Z)';
  const quietMotd = effectiveDisruptionPolicy({ files: [{ path: '/etc/motd', actions: [{ type: 'None' }] }] });

  it('when a host planned alone (its booted config unknown) must rewrite a file the policy does not name while the window is closed, it should refuse the reboot and say why', async () => {
    // The pool changed only /etc/motd, which the policy applies with no action; this host differs in a file of
    // the config it booted with as well, so the agent has to write that too, and that reboots.
    const d = disruptionOf(quietMotd, await changesOf({ storage: { files: [file('/etc/motd'), file('/etc/issue')] } }));
    assert.equal(
      beyondCeiling(d, ceiling),
      'the update needs a reboot; waiting for the maintenance window (opens 2026-12-01T02:00Z): nothing applied until the rollout allows it',
    );
  });

  it('when the plan needs neither a drain nor a reboot, or the rollout sets no ceiling, it should let it run', async () => {
    const quiet = disruptionOf(quietMotd, await changesOf({ storage: { files: [file('/etc/motd')] } }));
    assert.equal(beyondCeiling(quiet, ceiling), undefined);
    assert.equal(beyondCeiling({ ...NO_DISRUPTION, drain: true, reboot: true }, undefined), undefined);
  });

  it('when the plan drains without a reboot, it should refuse the drain', () => {
    assert.match(beyondCeiling({ ...NO_DISRUPTION, drain: true }, ceiling) ?? '', /^the update needs a drain; waiting/);
  });
});
