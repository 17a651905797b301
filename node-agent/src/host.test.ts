import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, mkdir, readFile, readlink, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { createHash } from 'node:crypto';
import { Host } from './host.js';
import { parseIgnition, type Entry, type IgnitionConfig } from '../../support/src/ignition/ignition.js';
import { UnsupportedConfigError } from '../../support/src/ignition/refusal.js';
import { confinedRoot, ESCAPES, layAccounts, tree } from '../testing/agent.js';

const roots: string[] = [];
after(() => Promise.all(roots.map((r) => rm(r, { recursive: true, force: true }))));
async function scratch(): Promise<Host> {
  const root = await mkdtemp(join(tmpdir(), 'kindling-host-'));
  roots.push(root);
  await layAccounts(root);
  return new Host(root);
}
const dataUrl = (b: Buffer): string => `data:;base64,${b.toString('base64')}`;
const cfg = (c: Omit<IgnitionConfig, 'ignition'>): Buffer =>
  Buffer.from(JSON.stringify({ ignition: { version: '3.4.0' }, ...c }));
const entries = (host: Host, bytes: Buffer): Promise<Entry[]> => host.entries(parseIgnition(bytes));
/** Where a host path is on this machine, for the test's own checks (the host roots here hold no links unless a test says so). */
const at = (host: Host, path: string): string => join(host.root, path);

describe('Ignition in place', () => {
  it('when a config has files (plain, gzip, appended, verified), directories, links, units with drop-ins and SSH keys, it should write them all and then see no change', async () => {
    const host = await scratch();
    await mkdir(at(host, '/home/core'), { recursive: true });
    const gz = gzipSync(Buffer.from('compressed\n'));
    const config = cfg({
      storage: {
        directories: [{ path: '/etc/kindling', mode: 0o750 }],
        files: [
          { path: '/etc/kindling/plain.conf', contents: { source: 'data:,hello%20world' }, mode: 0o600 },
          {
            path: '/etc/kubernetes/kubelet.conf',
            contents: {
              source: dataUrl(gz),
              compression: 'gzip',
              verification: { hash: `sha512-${createHash('sha512').update(gz).digest('hex')}` },
            },
          },
          { path: '/etc/motd', contents: { source: 'data:,a' }, append: [{ source: 'data:,b' }], overwrite: true },
        ],
        links: [{ path: '/etc/kindling/current', target: '/etc/kindling/plain.conf' }],
      },
      systemd: {
        units: [
          {
            name: 'kubelet.service',
            enabled: true,
            contents: '[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n',
            dropins: [{ name: '10-extra.conf', contents: '[Service]\nEnvironment=A=1\n' }],
          },
        ],
      },
      passwd: { users: [{ name: 'core', sshAuthorizedKeys: ['ssh-ed25519 AAAA one', 'ssh-ed25519 BBBB two'] }] },
    });
    const changes = await host.changes(await entries(host, config));
    await host.apply(changes, { hash: 'h1', reboot: true, bootId: 'b' });
    assert.equal(await readFile(at(host, '/etc/kindling/plain.conf'), 'utf8'), 'hello world');
    assert.equal((await stat(at(host, '/etc/kindling/plain.conf'))).mode & 0o777, 0o600);
    assert.equal((await stat(at(host, '/etc/kindling'))).mode & 0o777, 0o750);
    assert.equal(await readFile(at(host, '/etc/kubernetes/kubelet.conf'), 'utf8'), 'compressed\n');
    assert.equal(await readFile(at(host, '/etc/motd'), 'utf8'), 'ab');
    assert.equal(await readlink(at(host, '/etc/kindling/current')), '/etc/kindling/plain.conf');
    assert.match(await readFile(at(host, '/etc/systemd/system/kubelet.service'), 'utf8'), /ExecStart/);
    assert.match(await readFile(at(host, '/etc/systemd/system/kubelet.service.d/10-extra.conf'), 'utf8'), /A=1/);
    assert.equal(
      await readlink(at(host, '/etc/systemd/system/multi-user.target.wants/kubelet.service')),
      '/etc/systemd/system/kubelet.service',
    );
    assert.equal(
      await readFile(at(host, '/home/core/.ssh/authorized_keys'), 'utf8'),
      'ssh-ed25519 AAAA one\nssh-ed25519 BBBB two\n',
    );
    assert.equal((await host.readJournal())?.phase, 'applied');
    assert.deepEqual(await host.changes(await entries(host, config)), []);
  });

  it('when a unit is disabled, it should remove its wants symlink', async () => {
    const host = await scratch();
    const unit = (enabled: boolean): Buffer =>
      cfg({ systemd: { units: [{ name: 'x.service', enabled, contents: '[Install]\nWantedBy=timers.target\n' }] } });
    await host.apply(await host.changes(await entries(host, unit(true))), { hash: 'a', reboot: false, bootId: 'b' });
    await readlink(at(host, '/etc/systemd/system/timers.target.wants/x.service'));
    await host.apply(await host.changes(await entries(host, unit(false))), { hash: 'b', reboot: false, bootId: 'b' });
    await assert.rejects(readlink(at(host, '/etc/systemd/system/timers.target.wants/x.service')), { code: 'ENOENT' });
  });

  it('when a write fails half-way (a path under a regular file), it should restore every file it changed and remove what it created', async () => {
    const host = await scratch();
    await mkdir(at(host, '/etc'), { recursive: true });
    await writeFile(at(host, '/etc/a.conf'), 'old', { mode: 0o644 });
    await writeFile(at(host, '/etc/blocker'), 'a file, not a folder');
    const config = cfg({
      storage: {
        files: [
          { path: '/etc/a.conf', contents: { source: 'data:,new' }, overwrite: true },
          { path: '/etc/new/b.conf', contents: { source: 'data:,b' } },
          { path: '/etc/blocker/c.conf', contents: { source: 'data:,c' } },
        ],
      },
    });
    const changes = await host.changes(await entries(host, config));
    await assert.rejects(
      host.apply(changes, { hash: 'h', reboot: true, bootId: 'b' }),
      /failed to write \/etc\/blocker\/c\.conf/,
    );
    assert.equal(await readFile(at(host, '/etc/a.conf'), 'utf8'), 'old');
    await assert.rejects(stat(at(host, '/etc/new')), { code: 'ENOENT' });
    assert.equal(await host.readJournal(), undefined);
  });

  it('when the agent died mid-apply, restoring from the journal should put the host back', async () => {
    const host = await scratch();
    await mkdir(at(host, '/etc'), { recursive: true });
    await writeFile(at(host, '/etc/a.conf'), 'old');
    const changes = await host.changes(
      await entries(
        host,
        cfg({ storage: { files: [{ path: '/etc/a.conf', contents: { source: 'data:,new' }, overwrite: true }] } }),
      ),
    );
    await host.apply(changes, { hash: 'h', reboot: false, bootId: 'b' });
    // Pretend the process died before the journal said "applied".
    const journal = await host.readJournal();
    assert.ok(journal);
    await host.restore({ ...journal, phase: 'applying' });
    assert.equal(await readFile(at(host, '/etc/a.conf'), 'utf8'), 'old');
  });

  it('when a file the first boot wrote has overwrite false, it should still update it (the config owns it), but refuse to replace a directory with it', async () => {
    const host = await scratch();
    await mkdir(at(host, '/etc/dir'), { recursive: true });
    await writeFile(at(host, '/etc/booted'), 'from the boot payload');
    const changes = await host.changes(
      await entries(host, cfg({ storage: { files: [{ path: '/etc/booted', contents: { source: 'data:,next' } }] } })),
    );
    assert.deepEqual(
      changes.map((c) => c.path),
      ['/etc/booted'],
    );
    await assert.rejects(
      host.changes(
        await entries(host, cfg({ storage: { files: [{ path: '/etc/dir', contents: { source: 'data:,x' } }] } })),
      ),
      /is a directory on the host/,
    );
  });

  it('when the config asks for disks, filesystems or new users, it should refuse naming each', () => {
    assert.throws(
      () =>
        parseIgnition(
          cfg({
            storage: { disks: [{ device: '/dev/sdb' }], filesystems: [{ device: '/dev/sdb1' }] },
            passwd: { users: [{ name: 'new', passwordHash: 'x' }] },
          }),
        ),
      (err: Error) =>
        err instanceof UnsupportedConfigError &&
        /storage\.disks/.test(err.message) &&
        /storage\.filesystems/.test(err.message) &&
        /passwd\.users\[new\]\.passwordHash/.test(err.message),
    );
  });
});

/** Plans and applies a config as the agent does; the refusal it ended with, if any. */
async function applyConfig(host: Host, bytes: Buffer): Promise<Error | undefined> {
  try {
    await host.apply(await host.changes(await entries(host, bytes)), { hash: 'h', reboot: false, bootId: 'b' });
    return undefined;
  } catch (err) {
    return err as Error;
  }
}

describe('Confinement to the host root', () => {
  const confinedHost = async (): Promise<{ host: Host; outside: string }> => {
    const { base, root, outside } = await confinedRoot();
    roots.push(base);
    return { host: new Host(root), outside };
  };

  for (const { condition, prepare, config, reason } of ESCAPES) {
    it(`when ${condition}, it should refuse the config naming the entry, and write nothing inside or outside the root`, async () => {
      const { host, outside } = await confinedHost();
      await prepare(host.root);
      const [rootBefore, outsideBefore] = [await tree(host.root), await tree(outside)];
      const err = await applyConfig(host, cfg(config));
      assert.ok(err instanceof UnsupportedConfigError, `not refused as a config error: ${String(err)}`);
      assert.match(err.message, reason);
      assert.deepEqual(await tree(outside), outsideBefore, 'something was written outside the host root');
      assert.deepEqual(await tree(host.root), rootBefore, 'the host root changed although the config was refused');
    });
  }

  it('when only the last entry leads out of the root, it should refuse the config before writing the earlier ones', async () => {
    const { host, outside } = await confinedHost();
    await symlink('../..', join(host.root, 'etc', 'up'));
    const [rootBefore, outsideBefore] = [await tree(host.root), await tree(outside)];
    const files = [
      { path: '/etc/kindling/first.conf', contents: { source: 'data:,first' } },
      { path: '/etc/up/outside/x.conf', contents: { source: 'data:,x' } },
    ];
    const err = await applyConfig(host, cfg({ storage: { files } }));
    assert.ok(err instanceof UnsupportedConfigError, `not refused as a config error: ${String(err)}`);
    assert.match(
      err.message,
      /\/etc\/up\/outside\/x\.conf: the host link \/etc\/up -> \.\.\/\.\. leads out of the host root/,
    );
    assert.deepEqual(await tree(outside), outsideBefore);
    assert.deepEqual(await tree(host.root), rootBefore);
  });

  it('when unit, drop-in, target and user names are plain (templates, instances, escapes), it should write them as before', async () => {
    const { host } = await confinedHost();
    const units = [
      {
        name: 'getty@tty1.service',
        enabled: true,
        contents: '[Install]\nWantedBy=getty.target getty@.service\n',
        dropins: [{ name: '10-a_b.conf', contents: 'x' }],
      },
      { name: 'dev-disk-by\\x2dlabel-ROOT.device', mask: true },
    ];
    assert.equal(
      await applyConfig(
        host,
        cfg({ systemd: { units }, passwd: { users: [{ name: 'core.admin', sshAuthorizedKeys: ['k'] }] } }),
      ),
      undefined,
    );
    assert.equal(
      await readlink(at(host, '/etc/systemd/system/getty@.service.wants/getty@tty1.service')),
      '/etc/systemd/system/getty@tty1.service',
    );
    assert.equal(await readFile(at(host, '/etc/systemd/system/getty@tty1.service.d/10-a_b.conf'), 'utf8'), 'x');
    assert.equal(await readlink(at(host, '/etc/systemd/system/dev-disk-by\\x2dlabel-ROOT.device')), '/dev/null');
    assert.equal(await readFile(at(host, '/home/core.admin/.ssh/authorized_keys'), 'utf8'), 'k\n');
  });

  it('when a file is to be written below a host link with an absolute target, it should resolve the link against the root and write inside it', async () => {
    const { host, outside } = await confinedHost();
    // On this machine the target is the sentinel folder; on the host it is a folder of the host's own.
    await symlink(outside, join(host.root, 'etc', 'abs'));
    const outsideBefore = await tree(outside);
    const config = cfg({ storage: { files: [{ path: '/etc/abs/x.conf', contents: { source: 'data:,inside' } }] } });
    assert.equal(await applyConfig(host, config), undefined);
    assert.deepEqual(await tree(outside), outsideBefore, 'the file was written outside the host root');
    assert.equal(await readFile(join(host.root, outside, 'x.conf'), 'utf8'), 'inside');
    assert.deepEqual(
      await host.changes(await entries(host, config)),
      [],
      'the read-back check looked at another file than the one written',
    );
  });

  it('when home is an absolute link inside the root (as /home -> /var/home), it should write SSH keys through it inside the root', async () => {
    const { host, outside } = await confinedHost();
    await symlink(join(outside, 'home'), join(host.root, 'home'));
    const outsideBefore = await tree(outside);
    const keys = cfg({ passwd: { users: [{ name: 'core', sshAuthorizedKeys: ['ssh-ed25519 AAAA core'] }] } });
    assert.equal(await applyConfig(host, keys), undefined);
    assert.deepEqual(await tree(outside), outsideBefore, 'the keys were written outside the host root');
    assert.equal(
      await readFile(join(host.root, outside, 'home', 'core', '.ssh', 'authorized_keys'), 'utf8'),
      'ssh-ed25519 AAAA core\n',
    );
    assert.deepEqual(
      await host.changes(await entries(host, keys)),
      [],
      'the read-back check looked at another file than the one written',
    );
  });

  it('when home is a relative link (as on Fedora CoreOS), it should write SSH keys through it', async () => {
    const { host } = await confinedHost();
    await mkdir(join(host.root, 'var', 'home'), { recursive: true });
    await symlink('var/home', join(host.root, 'home'));
    assert.equal(
      await applyConfig(host, cfg({ passwd: { users: [{ name: 'core', sshAuthorizedKeys: ['k'] }] } })),
      undefined,
    );
    assert.equal(await readFile(join(host.root, 'var', 'home', 'core', '.ssh', 'authorized_keys'), 'utf8'), 'k\n');
  });
});
