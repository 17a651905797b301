import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { gzipSync } from 'node:zlib';
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

describe('the byte budget of a payload', () => {
  const MIB = 1024 * 1024;
  const gz = (bytes: Buffer): string => `data:;base64,${gzipSync(bytes).toString('base64')}`;
  const files = (...sources: string[]): string =>
    config({
      storage: {
        files: sources.map((source, i) => ({ path: `/etc/f${i}`, contents: { source, compression: 'gzip' } })),
      },
    });

  it('when one file is a gzip bomb, it should refuse the payload with the sizes rather than call it a blocker', () => {
    // 700 MiB of zeros: concatenated gzip members of 70 MiB each, under 1 MiB in all.
    const member = gzipSync(Buffer.alloc(70 * MIB));
    const bomb = `data:;base64,${Buffer.concat(Array.from({ length: 10 }, () => member)).toString('base64')}`;
    assert.throws(() => inPlaceBlockers(files(bomb)), {
      name: 'UnsupportedConfigError',
      message: /^storage\.files\[\/etc\/f0\] inflates past the limit of 64 MiB/,
    });
    assert.ok(process.memoryUsage().rss < 512 * MIB, `peak ${process.memoryUsage().rss}`);
  });

  it('when the files inflate to just under the limit, it should accept them', () => {
    assert.deepEqual(inPlaceBlockers(files(gz(Buffer.alloc(MIB - 1))), MIB), []);
  });

  it('when each file fits but their sum does not, it should refuse at the file that passes the sum', () => {
    const half = gz(Buffer.alloc(MIB / 2 + 1));
    assert.deepEqual(inPlaceBlockers(files(half), MIB), []);
    assert.throws(() => inPlaceBlockers(files(half, half), MIB), {
      message: /^storage\.files\[\/etc\/f1\] inflates past the limit of 1 MiB \(524289 bytes of it already taken/,
    });
  });

  it('when an uncompressed data URL decodes past the limit, it should refuse it too', () => {
    const plain = `data:;base64,${Buffer.alloc(MIB + 1).toString('base64')}`;
    const payload = config({ storage: { files: [{ path: '/etc/a', contents: { source: plain } }] } });
    assert.throws(() => inPlaceBlockers(payload, MIB), /inflates past the limit of 1 MiB/);
  });
});
