import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { chmod, chown, lchown, lstat, mkdir, readFile, rename, rm, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { HeldDir } from './held.js';
import { Host } from './host.js';
import { parseIgnition, type IgnitionConfig } from '../../support/src/ignition/ignition.js';
import { UnsupportedConfigError } from '../../support/src/ignition/refusal.js';
import { confinedRoot, HOST_USERS, tree } from '../testing/agent.js';

// The attacker is a user other than the agent: files are handed to core with chown, which needs root.
const skip = process.getuid?.() !== 0 && 'needs root to make files a user owns';
const core = HOST_USERS.core;

const bases: string[] = [];
after(() => Promise.all(bases.map((b) => rm(b, { recursive: true, force: true }))));

/** A host root with /home/core/.ssh as core owns it (and authorized_keys.d when asked), and /etc to compare. */
async function coreHost(
  keysDir = false,
): Promise<{ host: Host; base: string; ssh: string; etc: () => Promise<string[]> }> {
  const { base, root, outside } = await confinedRoot();
  bases.push(base);
  // The attacker runs as core: it must reach its home through the test's folders.
  await Promise.all([chmod(base, 0o755), chmod(root, 0o755)]);
  const ssh = join(root, 'home', 'core', '.ssh');
  await mkdir(join(root, 'home', 'core'), { recursive: true, mode: 0o755 });
  await mkdir(join(ssh, keysDir ? 'authorized_keys.d' : ''), { recursive: true, mode: 0o700 });
  for (const p of [join(root, 'home', 'core'), ssh, join(ssh, 'authorized_keys.d')])
    await chown(p, core.uid, core.gid).catch(() => undefined);
  const etc = async (): Promise<string[]> => [...(await tree(join(root, 'etc'))), ...(await tree(outside))];
  return { host: new Host(root), base, ssh, etc };
}

const cfg = (c: Omit<IgnitionConfig, 'ignition'>): IgnitionConfig =>
  parseIgnition(JSON.stringify({ ignition: { version: '3.4.0' }, ...c }));
const keys = (key: string): IgnitionConfig => cfg({ passwd: { users: [{ name: 'core', sshAuthorizedKeys: [key] }] } });

/** What core does: its folder `dir` becomes a link of its own to the host's /etc (relative, as the host sees it). */
async function swapForLink(dir: string, depth: number): Promise<void> {
  await rename(dir, `${dir}-moved`);
  await symlink(`${'../'.repeat(depth)}etc`, dir);
  await lchown(dir, core.uid, core.gid);
}

describe('Paths a user controls', { skip }, () => {
  for (const { what, keysDir, folder, depth } of [
    { what: '~/.ssh', keysDir: false, folder: [] as string[], depth: 2 },
    { what: '~/.ssh/authorized_keys.d', keysDir: true, folder: ['authorized_keys.d'], depth: 3 },
  ])
    it(`when core swaps ${what} for a link to /etc after the agent planned and before it applies, it should refuse naming the link and write nothing outside core's folder`, async () => {
      const { host, ssh, etc } = await coreHost(keysDir);
      const changes = await host.changes(await host.entries(keys('ssh-ed25519 AAAA pool')));
      const before = await etc();
      await swapForLink(join(ssh, ...folder), depth);
      await assert.rejects(
        host.apply(changes, { hash: 'h', reboot: false, bootId: 'b' }),
        (err: Error) =>
          err instanceof UnsupportedConfigError &&
          /the host link \/home\/core\/\.ssh.* is owned by uid 1000, and the agent never follows a link/.test(
            err.message,
          ),
      );
      assert.deepEqual(await etc(), before, 'the keys were written outside core’s folder');
    });

  it('when core swaps ~/.ssh for a link while the agent holds the folder open, it should write into the folder it opened, never through the link', async () => {
    const { host, ssh, etc } = await coreHost();
    const before = await etc();
    await HeldDir.with(host.root, '/home/core/.ssh', async (dir) => {
      await swapForLink(ssh, 2);
      await dir.createFile('authorized_keys', 'k\n', 0o600, core);
    });
    assert.deepEqual(await etc(), before, 'the write followed the link core put in place');
    assert.equal(await readFile(join(`${ssh}-moved`, 'authorized_keys'), 'utf8'), 'k\n');
    await assert.rejects(HeldDir.open(host.root, '/home/core/.ssh'), /"\.ssh" on the way is not a folder now/);
  });

  it('when keys are written for core, it should give core the file and the .ssh folder it creates (uid and primary group from the host’s /etc/passwd), as Ignition leaves them', async () => {
    const { host } = await coreHost();
    await rm(join(host.root, 'home', 'core', '.ssh'), { recursive: true });
    await host.apply(await host.changes(await host.entries(keys('k'))), { hash: 'h', reboot: false, bootId: 'b' });
    for (const p of ['.ssh', '.ssh/authorized_keys']) {
      const st = await lstat(join(host.root, 'home', 'core', p));
      assert.deepEqual([st.uid, st.gid], [core.uid, core.gid], p);
    }
    assert.deepEqual(await host.changes(await host.entries(keys('k'))), []);
  });

  it('when files, folders and links name a user and group (by name or id), it should own them so on the host and then see no change; a name the host lacks is refused', async () => {
    const { host } = await coreHost();
    const config = cfg({
      storage: {
        directories: [{ path: '/etc/kindling/d', user: { id: 1001 } }],
        files: [
          {
            path: '/etc/kindling/f',
            contents: { source: 'data:,x' },
            user: { name: 'core' },
            group: { name: 'wheel' },
          },
        ],
        links: [{ path: '/etc/kindling/l', target: 'f', group: { id: 1001 } }],
      },
    });
    await host.apply(await host.changes(await host.entries(config)), { hash: 'h', reboot: false, bootId: 'b' });
    const owner = async (p: string): Promise<number[]> => {
      const st = await lstat(join(host.root, 'etc', 'kindling', p));
      return [st.uid, st.gid];
    };
    assert.deepEqual(
      [await owner('d'), await owner('f'), await owner('l')],
      [
        [1001, 0],
        [1000, 10],
        [0, 1001],
      ],
    );
    assert.deepEqual(await host.changes(await host.entries(config)), []);
    await lchown(join(host.root, 'etc', 'kindling', 'f'), 0, 0);
    assert.deepEqual(
      (await host.changes(await host.entries(config))).map((c) => c.path),
      ['/etc/kindling/f'],
      'an owner changed on the host went unnoticed',
    );
    await writeFile(join(host.root, 'etc', 'group'), 'root:x:0:\n');
    await assert.rejects(
      host.entries(config),
      (err: Error) =>
        err instanceof UnsupportedConfigError &&
        err.message === `storage.files[/etc/kindling/f]: group "wheel" is not in the host's /etc/group`,
    );
  });
});
