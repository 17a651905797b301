import { after, describe, it, mock } from 'node:test';
import assert from 'node:assert/strict';
import fsp, { mkdir, mkdtemp, readFile, readlink, rm, stat, writeFile } from 'node:fs/promises';
import { syncBuiltinESMExports } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DEFAULT_DISRUPTION_POLICY, effectiveDisruptionPolicy, NO_DISRUPTION } from '../../api/src/disruption.js';
import { disruptionOf } from './disruption.js';
import { Host } from './host.js';
import { parseIgnition, type IgnitionConfig } from '../../support/src/ignition/ignition.js';
import { applyPlan, commitRecord, planOf, readRecord, recordOf } from './record.js';
import { tree } from '../testing/agent.js';

const roots: string[] = [];
after(() => Promise.all(roots.map((r) => rm(r, { recursive: true, force: true }))));

const cfg = (c: Omit<IgnitionConfig, 'ignition'>): Buffer =>
  Buffer.from(JSON.stringify({ ignition: { version: '3.4.0' }, ...c }));

const BASE = { path: '/etc/kindling/base.conf', contents: { source: 'data:,base' } };
const BOOT_FILES = [BASE, { path: '/etc/kindling/boot-only.conf', contents: { source: 'data:,boot' } }];
/** The first boot's payload, written by Ignition (not by the agent). */
const BOOT = cfg({ storage: { files: BOOT_FILES } });
/** The first boot's payload plus a MachineConfig: a file in a new folder, an OS file replaced, an enabled unit. */
const WITH_EXTRA = cfg({
  storage: {
    files: [
      ...BOOT_FILES,
      { path: '/etc/extra/x.conf', contents: { source: 'data:,extra' }, mode: 0o600 },
      { path: '/etc/os.conf', contents: { source: 'data:,kindling' }, overwrite: true },
    ],
  },
  systemd: {
    units: [
      {
        name: 'extra.service',
        enabled: true,
        contents: '[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n',
      },
    ],
  },
});
const BACK = BOOT;

/** A host root after its first boot: the OS's files, an unrelated file of the host's, the boot payload by Ignition. */
async function bootedHost(): Promise<Host> {
  const root = await mkdtemp(join(tmpdir(), 'kindling-record-'));
  roots.push(root);
  await mkdir(join(root, 'etc', 'kindling'), { recursive: true });
  await mkdir(join(root, 'etc', 'systemd', 'system'), { recursive: true });
  await writeFile(join(root, 'etc', 'os.conf'), 'from the OS\n', { mode: 0o640 });
  await writeFile(join(root, 'etc', 'unrelated'), 'the host own\n', { mode: 0o600 });
  await writeFile(join(root, 'etc', 'kindling', 'base.conf'), 'base');
  await writeFile(join(root, 'etc', 'kindling', 'boot-only.conf'), 'boot');
  const host = new Host(root);
  await commitRecord(host, recordOf('h0', await host.entries(parseIgnition(BOOT))));
  return host;
}

/** Plans, applies and finishes an update as the agent does (no reboot: the gate is not what these tests are about). */
async function update(host: Host, hash: string, payload: Buffer): Promise<void> {
  const plan = await planOf(host, payload);
  await applyPlan(host, plan, { hash, reboot: false, bootId: 'b' });
  const journal = await host.readJournal();
  assert.ok(journal?.record);
  await commitRecord(host, journal.record);
  await host.clearJournal();
}

const etc = (host: Host): Promise<string[]> => tree(join(host.root, 'etc'));

describe('Exact apply: what a config no longer declares is removed', () => {
  it('when a target no longer declares a file, a unit and its enablement link an earlier update wrote, it should remove them and the folder it created, restore the OS file it had replaced (bytes and mode), and leave the host own file alone', async () => {
    const host = await bootedHost();
    const before = await etc(host);
    await update(host, 'h1', WITH_EXTRA);
    assert.equal(
      await readlink(join(host.root, 'etc/systemd/system/multi-user.target.wants/extra.service')),
      '/etc/systemd/system/extra.service',
    );
    assert.equal(await readFile(join(host.root, 'etc/os.conf'), 'utf8'), 'kindling');

    await update(host, 'h2', BACK);
    assert.deepEqual(await etc(host), before);
    assert.equal((await stat(join(host.root, 'etc/os.conf'))).mode & 0o7777, 0o640);
    assert.equal((await readRecord(host))?.hash, 'h2');
    assert.deepEqual((await planOf(host, BACK)).changes, [], 'the host does not match the target exactly');
  });

  it('when the host has no record of its own, it should take the first boot payload as the record and remove what the next target drops of it', async () => {
    const host = await bootedHost();
    await update(host, 'h1', cfg({ storage: { files: [BASE] } }));
    await assert.rejects(stat(join(host.root, 'etc/kindling/boot-only.conf')), { code: 'ENOENT' });
    assert.equal(await readFile(join(host.root, 'etc/kindling/base.conf'), 'utf8'), 'base');
    assert.equal(await readFile(join(host.root, 'etc/unrelated'), 'utf8'), 'the host own\n');
  });

  it('when a target only removes what an earlier one wrote, it should need a drain and a reboot like a write', async () => {
    const host = await bootedHost();
    await update(host, 'h1', WITH_EXTRA);
    const plan = await planOf(host, BACK);
    assert.deepEqual(plan.writes, [], 'the target asks for nothing the host lacks');
    assert.ok(plan.changes.some((c) => c.kind === 'absent' && c.path === '/etc/systemd/system/extra.service'));
    assert.deepEqual(disruptionOf(DEFAULT_DISRUPTION_POLICY, plan.changes), {
      ...NO_DISRUPTION,
      drain: true,
      reboot: true,
    });
  });

  it('when a folder Kindling created holds a file the host put there, it should remove Kindling own file and keep the folder and that file', async () => {
    const host = await bootedHost();
    await update(host, 'h1', WITH_EXTRA);
    await writeFile(join(host.root, 'etc/extra/host-added'), 'not Kindling');
    await update(host, 'h2', BACK);
    await assert.rejects(stat(join(host.root, 'etc/extra/x.conf')), { code: 'ENOENT' });
    assert.equal(await readFile(join(host.root, 'etc/extra/host-added'), 'utf8'), 'not Kindling');
  });

  it('when the agent is killed between two removals, it should let a new Host on the same root restore the earlier config from the journal, and the retried update should then remove everything', async () => {
    const host = await bootedHost();
    await update(host, 'h1', WITH_EXTRA);
    const atH1 = await etc(host);
    // Removals go through the held folder (held.ts): /proc/self/fd/<folder>/<name>.
    const removed = ['/x.conf', '/extra.service'];
    let removals = 0;
    const realUnlink = fsp.unlink;
    // The process dies at the second removal: every later one (the rollback's included) fails as a dead process would.
    mock.method(fsp, 'unlink', async (path: string) => {
      if (removed.some((r) => path.endsWith(r)) && removals++ >= 1) throw new Error('killed');
      return realUnlink(path);
    });
    syncBuiltinESMExports();
    try {
      await assert.rejects(
        applyPlan(host, await planOf(host, BACK), { hash: 'h2', reboot: false, bootId: 'b' }),
        /killed/,
      );
    } finally {
      mock.restoreAll();
      syncBuiltinESMExports();
    }
    await assert.rejects(
      stat(join(host.root, 'etc/extra/x.conf')),
      { code: 'ENOENT' },
      'the first removal was not made',
    );

    const restarted = new Host(host.root);
    const journal = await restarted.readJournal();
    assert.equal(journal?.phase, 'applying');
    await restarted.restore(journal);
    await restarted.clearJournal();
    assert.deepEqual(await etc(restarted), atH1);

    await update(restarted, 'h2', BACK);
    await assert.rejects(stat(join(host.root, 'etc/extra')), { code: 'ENOENT' });
    await assert.rejects(stat(join(host.root, 'etc/systemd/system/extra.service')), { code: 'ENOENT' });
  });

  it('when the health gate rolls back an update that removed entries, it should put every removed entry back and keep the earlier record', async () => {
    const host = await bootedHost();
    await update(host, 'h1', WITH_EXTRA);
    const atH1 = await etc(host);
    await applyPlan(host, await planOf(host, BACK), { hash: 'h2', reboot: true, bootId: 'b' });
    const journal = await host.readJournal();
    assert.ok(journal);
    await assert.rejects(stat(join(host.root, 'etc/extra')), { code: 'ENOENT' });
    // As the agent's rollBack: restore the journal, keep it as rolledBack.
    await host.restore(journal);
    await host.writeJournal({ ...journal, phase: 'rolledBack', reason: 'health check failed' });
    assert.deepEqual(await etc(host), atH1);
    assert.equal((await stat(join(host.root, 'etc/extra'))).mode & 0o7777, 0o755);
    assert.equal((await readRecord(host))?.hash, 'h1');
  });
});

/** A kubelet-like unit, enabled: Ignition makes that a systemd preset at first boot, not the link `systemctl enable` makes. */
const KUBELET = {
  name: 'kubelet.service',
  enabled: true,
  contents: '[Service]\nExecStart=/usr/bin/kubelet\n[Install]\nWantedBy=multi-user.target\n',
};
const QUIET = { path: '/etc/quiet/a.conf', contents: { source: 'data:,quiet' } };
/** What the host booted with: the boot files and the kubelet. */
const BOOTED = cfg({ storage: { files: BOOT_FILES }, systemd: { units: [KUBELET] } });
/** The policy the first update is weighed under: what it changes needs nothing. */
const QUIET_POLICY = effectiveDisruptionPolicy({
  files: [
    { path: '/etc/quiet/', match: 'Prefix', actions: [{ type: 'None' }] },
    { path: '/etc/kindling/', match: 'Prefix', actions: [{ type: 'None' }] },
  ],
});

/** A host root as Ignition leaves it at first boot: BOOTED's files and unit, the unit enabled by preset, no record. */
async function ignitedHost(): Promise<Host> {
  const root = await mkdtemp(join(tmpdir(), 'kindling-booted-'));
  roots.push(root);
  await mkdir(join(root, 'etc', 'kindling'), { recursive: true });
  await mkdir(join(root, 'etc', 'systemd', 'system'), { recursive: true });
  await mkdir(join(root, 'etc', 'systemd', 'system-preset'), { recursive: true });
  await writeFile(join(root, 'etc', 'kindling', 'base.conf'), 'base');
  await writeFile(join(root, 'etc', 'kindling', 'boot-only.conf'), 'boot');
  await writeFile(join(root, 'etc', 'systemd', 'system', 'kubelet.service'), KUBELET.contents);
  await writeFile(join(root, 'etc', 'systemd', 'system-preset', '20-ignition.preset'), 'enable kubelet.service\n');
  return new Host(root);
}

describe('A host first updated with the config it booted with at hand', () => {
  const target = cfg({ storage: { files: [BASE, QUIET] }, systemd: { units: [KUBELET] } });

  it('when the target drops a file the host booted with, it should remove it and keep the rest', async () => {
    const host = await ignitedHost();
    const plan = await planOf(host, target, { hash: 'h0', config: BOOTED });
    assert.equal(plan.previousFrom, 'booted');
    await applyPlan(host, plan, { hash: 'h1', reboot: false, bootId: 'b' });
    await assert.rejects(stat(join(host.root, 'etc/kindling/boot-only.conf')), { code: 'ENOENT' });
    assert.equal(await readFile(join(host.root, 'etc/kindling/base.conf'), 'utf8'), 'base');
    assert.equal(await readFile(join(host.root, 'etc/quiet/a.conf'), 'utf8'), 'quiet');
    assert.deepEqual((await host.readJournal())?.record?.written.map((w) => w.path).sort(), [
      '/etc/kindling/base.conf',
      '/etc/quiet/a.conf',
      '/etc/systemd/system/kubelet.service',
      '/etc/systemd/system/multi-user.target.wants/kubelet.service',
    ]);
  });

  it('when only None-policy paths change, it should need no action although it writes the enablement link Ignition made as a preset', async () => {
    const host = await ignitedHost();
    const plan = await planOf(host, target, { hash: 'h0', config: BOOTED });
    const link = '/etc/systemd/system/multi-user.target.wants/kubelet.service';
    assert.ok(
      plan.writes.some((w) => w.path === link),
      'the host has the link already',
    );
    assert.ok(!plan.weighed.some((w) => w.path === link), 'the link the host booted with is weighed as a change');
    assert.deepEqual(disruptionOf(QUIET_POLICY, plan.weighed), NO_DISRUPTION);
    assert.equal(disruptionOf(QUIET_POLICY, plan.changes).reboot, true, 'every change weighed would reboot');
  });

  it('when the unit itself changes from what the host booted with, it should weigh it', async () => {
    const host = await ignitedHost();
    const changed = { ...KUBELET, contents: `${KUBELET.contents}# changed\n` };
    const plan = await planOf(host, cfg({ storage: { files: BOOT_FILES }, systemd: { units: [changed] } }), {
      hash: 'h0',
      config: BOOTED,
    });
    assert.deepEqual(
      plan.weighed.map((w) => w.path),
      ['/etc/systemd/system/kubelet.service'],
    );
  });

  it('when the config it booted with cannot be read, it should plan against the host alone and say why', async () => {
    const host = await ignitedHost();
    const plan = await planOf(host, target, { hash: 'h0', config: Buffer.from('not json') });
    assert.equal(plan.previousFrom, 'none');
    assert.match(plan.bootedUnread ?? '', /not JSON/);
    assert.deepEqual(plan.weighed, plan.changes);
  });

  it('when the host does not hold the files of the config handed over, it should not take it for what the host booted with', async () => {
    const host = await ignitedHost();
    await writeFile(join(host.root, 'etc', 'kindling', 'boot-only.conf'), 'changed since');
    const plan = await planOf(host, target, { hash: 'h0', config: BOOTED });
    assert.equal(plan.previousFrom, 'none');
    assert.match(plan.bootedUnread ?? '', /does not hold \/etc\/kindling\/boot-only.conf as the config at h0/);
    assert.ok(!plan.changes.some((c) => c.path === '/etc/kindling/boot-only.conf'), 'a file it never wrote is removed');
  });

  it('when the config handed over declares a link the host does not hold, it should not take it for what the host booted with nor remove what sits there', async () => {
    const host = await ignitedHost();
    await writeFile(join(host.root, 'etc', 'kindling', 'os.conf'), 'the OS');
    // A guest admin may write the payload Secret: its link over a file of the OS is a claim, not a fact.
    const forged = cfg({
      storage: { files: BOOT_FILES, links: [{ path: '/etc/kindling/os.conf', target: '/etc/kindling/base.conf' }] },
      systemd: { units: [KUBELET] },
    });
    const plan = await planOf(host, target, { hash: 'h0', config: forged });
    assert.equal(plan.previousFrom, 'none');
    assert.match(plan.bootedUnread ?? '', /does not hold \/etc\/kindling\/os.conf as the config at h0/);
    assert.deepEqual(plan.weighed, plan.changes);
    await applyPlan(host, plan, { hash: 'h1', reboot: false, bootId: 'b' });
    assert.equal(await readFile(join(host.root, 'etc/kindling/os.conf'), 'utf8'), 'the OS');
  });

  it('when the config handed over masks a unit the host does not mask, it should not take it for what the host booted with', async () => {
    const host = await ignitedHost();
    const forged = cfg({
      storage: { files: BOOT_FILES },
      systemd: { units: [KUBELET, { name: 'chronyd.service', mask: true }] },
    });
    const plan = await planOf(host, target, { hash: 'h0', config: forged });
    assert.equal(plan.previousFrom, 'none');
    assert.match(plan.bootedUnread ?? '', /does not hold \/etc\/systemd\/system\/chronyd.service/);
  });

  it("when the config handed over enables a unit that neither a link nor Ignition's preset enables on the host, it should not take it for what the host booted with", async () => {
    const host = await ignitedHost();
    await writeFile(
      join(host.root, 'etc', 'systemd', 'system-preset', '20-ignition.preset'),
      'disable kubelet.service\n',
    );
    const plan = await planOf(host, target, { hash: 'h0', config: BOOTED });
    assert.equal(plan.previousFrom, 'none');
    assert.match(plan.bootedUnread ?? '', /multi-user.target.wants\/kubelet.service/);
  });

  it('when the host has a record of its own, it should go by the record and not the config handed over', async () => {
    const host = await bootedHost();
    const plan = await planOf(host, target, { hash: 'h9', config: BOOTED });
    assert.equal(plan.previousFrom, 'record');
    assert.equal(plan.previous?.hash, 'h0');
  });
});
