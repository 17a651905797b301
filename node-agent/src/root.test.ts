import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readFile, rm, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { UnsupportedConfigError } from '../../support/src/ignition/refusal.js';
import { createFile, MAX_LINKS, resolveInRoot } from './root.js';
import { confinedRoot, tree } from '../testing/agent.js';

const bases: string[] = [];
after(() => Promise.all(bases.map((b) => rm(b, { recursive: true, force: true }))));
async function hostRoot(): Promise<{ root: string; outside: string }> {
  const { base, root, outside } = await confinedRoot();
  bases.push(base);
  return { root, outside };
}
const refusal =
  (pattern: RegExp) =>
  (err: unknown): boolean =>
    err instanceof UnsupportedConfigError && pattern.test(err.message);

describe('Host paths resolved inside the root', () => {
  it('when links on the way are absolute, relative and climb with .. inside the root, it should follow each as the host would, never the last name', async () => {
    const { root } = await hostRoot();
    await mkdir(join(root, 'usr', 'share', 'zoneinfo'), { recursive: true });
    await symlink('/usr/share', join(root, 'share'));
    await symlink('share/zoneinfo', join(root, 'zones'));
    await symlink('../../../zones', join(root, 'usr', 'share', 'zoneinfo', 'up'));
    await symlink('/nowhere', join(root, 'usr', 'share', 'zoneinfo', 'UTC'));
    assert.deepEqual(await resolveInRoot(root, '/zones/up/UTC'), {
      host: '/usr/share/zoneinfo/UTC',
      local: join(root, 'usr', 'share', 'zoneinfo', 'UTC'),
    });
    assert.deepEqual(await resolveInRoot(root, '/share/not/yet'), {
      host: '/usr/share/not/yet',
      local: join(root, 'usr', 'share', 'not', 'yet'),
    });
    assert.deepEqual(await resolveInRoot(root, '/'), { host: '/', local: root });
  });

  it('when a path has . or .., it should refuse it rather than climb', async () => {
    const { root } = await hostRoot();
    await assert.rejects(
      resolveInRoot(root, '/etc/../../outside'),
      refusal(/path "\/etc\/\.\.\/\.\.\/outside" has a "\." or "\.\." component/),
    );
    await assert.rejects(resolveInRoot(root, 'etc/x'), refusal(/is not absolute/));
  });

  it('when host links form a loop, it should refuse the path after the links bound', async () => {
    const { root } = await hostRoot();
    await symlink('/b', join(root, 'a'));
    await symlink('a', join(root, 'b'));
    await assert.rejects(
      resolveInRoot(root, '/a/x'),
      refusal(new RegExp(`/a/x: more than ${MAX_LINKS} links on the way`)),
    );
  });

  it('when a link sits where a file is created, it should not write through it', async () => {
    const { root, outside } = await hostRoot();
    const before = await tree(outside);
    await symlink(join(outside, 'secret'), join(root, 'etc', 'planted'));
    await assert.rejects(createFile(join(root, 'etc', 'planted'), 'x', 0o644), { code: 'EEXIST' });
    assert.deepEqual(await tree(outside), before);
    assert.equal(await readFile(join(outside, 'secret'), 'utf8'), 'not the host');
  });

  it('when created, a file should have exactly the mode asked, whatever the umask', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'kindling-mode-'));
    bases.push(dir);
    const old = process.umask(0o077);
    try {
      await createFile(join(dir, 'f'), 'x', 0o644);
    } finally {
      process.umask(old);
    }
    assert.deepEqual(await tree(dir), [`f ${0o644} 1 ${Buffer.from('x').toString('base64')}`]);
  });
});
