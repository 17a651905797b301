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
