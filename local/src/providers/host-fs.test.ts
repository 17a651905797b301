import { describe, it, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, mkdir, readFile, rm, stat, symlink, writeFile, readdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { HostFs } from './host-fs.js';

describe('HostFs', () => {
  const made: string[] = [];
  after(() => Promise.all(made.map((d) => rm(d, { recursive: true, force: true }))));
  const scratch = async (): Promise<string> => {
    const d = await mkdtemp(join(tmpdir(), 'kindling-hostfs-'));
    made.push(d);
    return d;
  };

  it('when a host path is written and read, it should live under the root with its mode, and a missing one reads as undefined', async () => {
    const root = await scratch();
    const fs = new HostFs(root);
    await fs.write('/var/lib/kubelet/pki/key.pem', 'secret', 0o600);
    assert.equal(await readFile(join(root, 'var/lib/kubelet/pki/key.pem'), 'utf8'), 'secret');
    assert.equal((await stat(join(root, 'var/lib/kubelet/pki/key.pem'))).mode & 0o777, 0o600);
    assert.equal(await fs.read('/var/lib/kubelet/pki/key.pem'), 'secret');
    assert.deepEqual(await readdir(join(root, 'var/lib/kubelet/pki')), ['key.pem'], 'a temporary file was left behind');
    assert.equal(await fs.read('/etc/none/such'), undefined);
    await fs.remove('/var/lib/kubelet/pki/key.pem');
    assert.equal(await fs.read('/var/lib/kubelet/pki/key.pem'), undefined);
  });

  it('when a folder or file of the host is a symlink pointing out of the root, it should refuse to read or write through it', async () => {
    const [root, outside] = [await scratch(), await scratch()];
    await writeFile(join(outside, 'ca.crt'), 'machine file');
    await mkdir(join(root, 'etc'), { recursive: true });
    await mkdir(join(root, 'var/lib'), { recursive: true });
    await symlink(outside, join(root, 'etc/kubernetes'));
    await symlink(outside, join(root, 'var/lib/kubelet'));
    const fs = new HostFs(root);
    await assert.rejects(fs.read('/etc/kubernetes/ca.crt'), /resolves outside the host root/);
    await assert.rejects(fs.write('/var/lib/kubelet/kubeconfig', 'x'), /resolves outside the host root/);
    assert.deepEqual(await readdir(outside), ['ca.crt']);
    await mkdir(join(root, 'etc/kindling'), { recursive: true });
    await symlink(join(outside, 'ca.crt'), join(root, 'etc/kindling/release.json'));
    await assert.rejects(fs.read('/etc/kindling/release.json'), /resolves outside the host root/);
    await assert.rejects(fs.read('/etc/../../x'), /is not an absolute host path/);
  });
});
