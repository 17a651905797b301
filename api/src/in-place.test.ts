import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { documentsUnsupportedInPlace, unsupportedInPlace } from './in-place.js';

describe('what the node agent cannot apply in place', () => {
  it('when a config holds disks, kernel arguments, groups or a new password, it should name each section', () => {
    const config = {
      storage: { disks: [{}] },
      kernelArguments: { shouldExist: ['nosmt'] },
      passwd: { users: [{ name: 'core', sshAuthorizedKeys: ['k'], passwordHash: 'x' }], groups: [{}] },
    };
    assert.deepEqual(unsupportedInPlace(config), [
      'storage.disks',
      'kernelArguments',
      'passwd.groups',
      'passwd.users[core].passwordHash',
    ]);
  });

  it('when a config holds only files, units and SSH keys, it should find nothing', () => {
    assert.deepEqual(
      unsupportedInPlace({
        storage: { disks: [] },
        passwd: { users: [{ name: 'core', sshAuthorizedKeys: ['k'] }] },
        kernelArguments: { shouldExist: [] },
      }),
      [],
    );
  });

  it("when a pool's documents hold kernel arguments or a fragment that formats a filesystem, it should name them once each, and nothing for files or a KubeletConfig", () => {
    const docs = [
      { kind: 'KubeletConfig', metadata: { name: 'k' }, spec: { kubeletConfig: { maxPods: 10 } } },
      {
        kind: 'MachineConfig',
        metadata: { name: 'a' },
        spec: {
          kernelArguments: ['nosmt'],
          config: { ignition: { version: '3.2.0' }, storage: { files: [{ path: '/etc/a' }] } },
        },
      },
      {
        kind: 'MachineConfig',
        metadata: { name: 'b' },
        spec: { kernelArguments: ['quiet'], config: { storage: { filesystems: [{ device: '/dev/sdb' }] } } },
      },
    ];
    assert.deepEqual(documentsUnsupportedInPlace(JSON.stringify(docs)), ['kernelArguments', 'storage.filesystems']);
    assert.deepEqual(documentsUnsupportedInPlace(JSON.stringify(docs.slice(0, 1))), []);
  });
});
