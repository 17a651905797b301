import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { inPlaceBlockers } from './ignition.js';

const config = (rest: object): string => JSON.stringify({ ignition: { version: '3.4.0' }, ...rest });

describe('in-place blockers of a payload', () => {
  const table: [string, string, (string | RegExp)[]][] = [
    [
      'files, units and SSH keys only',
      config({
        storage: { files: [{ path: '/etc/a', contents: { source: 'data:,a' } }] },
        systemd: { units: [{ name: 'a.service', contents: '[Service]\n' }] },
        passwd: { users: [{ name: 'core', sshAuthorizedKeys: ['k'] }] },
      }),
      [],
    ],
    [
      'kernel arguments and disks',
      config({ kernelArguments: { shouldExist: ['quiet'] }, storage: { disks: [{ device: '/dev/sdb' }] } }),
      ['storage.disks', 'kernelArguments'],
    ],
    [
      'a user to create',
      config({ passwd: { users: [{ name: 'ops', groups: ['wheel'] }] } }),
      ['passwd.users[ops].groups'],
    ],
    [
      'a remote file source',
      config({ storage: { files: [{ path: '/etc/a', contents: { source: 'https://example.com/a' } }] } }),
      [/is not a data URL/],
    ],
    [
      'a setuid file',
      config({ storage: { files: [{ path: '/usr/local/bin/x', contents: { source: 'data:,x' }, mode: 0o4755 }] } }),
      [/^storage\.files\[\/usr\/local\/bin\/x\]: mode 0o4755 sets setuid or setgid/],
    ],
    [
      'a setgid folder',
      config({ storage: { directories: [{ path: '/srv/shared', mode: 0o2775 }] } }),
      [/^storage\.directories\[\/srv\/shared\]: mode 0o2775 sets setuid or setgid/],
    ],
    [
      'a sticky file',
      config({ storage: { files: [{ path: '/etc/a', mode: 0o1644 }] } }),
      [/^storage\.files\[\/etc\/a\]: mode 0o1644 sets the sticky bit on a file/],
    ],
    [
      'a user named by both id and name',
      config({ storage: { files: [{ path: '/etc/a', user: { id: 1000, name: 'core' } }] } }),
      ['storage.files[/etc/a].user: both an id and a name are set (set one)'],
    ],
    [
      'owners by name and id (looked up on the host by the agent)',
      config({
        storage: {
          files: [{ path: '/etc/a', user: { name: 'core' }, group: { id: 10 } }],
          links: [{ path: '/etc/b', target: 'a', user: { id: 1000 } }],
        },
      }),
      [],
    ],
    ['not JSON', '{', [/payload is not JSON/]],
  ];
  for (const [what, payload, want] of table) {
    it(`when the payload holds ${what}, it should report ${want.length === 0 ? 'nothing' : 'what the agent would refuse'}`, () => {
      const got = inPlaceBlockers(payload);
      assert.equal(got.length, want.length, JSON.stringify(got));
      want.forEach((w, i) => (typeof w === 'string' ? assert.equal(got[i], w) : assert.match(got[i] ?? '', w)));
    });
  }
});
