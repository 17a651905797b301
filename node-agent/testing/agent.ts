/**
 * Helpers for the agent's confinement tests (not shipped in any command): a host root with a sentinel folder
 * beside it, so whatever escapes the root lands there and never in this machine's own folders, and the
 * configs and host links that tried to escape.
 */
import { lstat, mkdir, mkdtemp, readdir, readFile, readlink, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { IgnitionConfig } from '../../support/src/ignition/ignition.js';

/** The agent's own folder on a host (its record, journal and backups), for tests that leave it out of a copy. */
export { STATE_DIR } from '../src/host.js';

/** The users of a CoreOS-like host (`core` is uid 1000), as the agent reads them from the host root. */
export const HOST_USERS = { core: { uid: 1000, gid: 1000 }, 'core.admin': { uid: 1001, gid: 1001 } } as const;

/** Writes the host's /etc/passwd and /etc/group (root and HOST_USERS) into a host root. */
export async function layAccounts(root: string): Promise<void> {
  const users = Object.entries(HOST_USERS);
  await mkdir(join(root, 'etc'), { recursive: true });
  await writeFile(
    join(root, 'etc', 'passwd'),
    ['root:x:0:0:root:/root:/bin/bash', ...users.map(([n, u]) => `${n}:x:${u.uid}:${u.gid}::/home/${n}:/bin/bash`)]
      .map((l) => `${l}\n`)
      .join(''),
  );
  await writeFile(
    join(root, 'etc', 'group'),
    ['root:x:0:', 'wheel:x:10:core', ...users.map(([n, u]) => `${n}:x:${u.gid}:`)].map((l) => `${l}\n`).join(''),
  );
}

/** `<base>/root` (with /etc/kindling and the host's accounts) and `<base>/outside` (holding a file `secret`); the caller removes `base`. */
export async function confinedRoot(): Promise<{ base: string; root: string; outside: string }> {
  const base = await mkdtemp(join(tmpdir(), 'kindling-confine-'));
  await mkdir(join(base, 'root', 'etc', 'kindling'), { recursive: true });
  await layAccounts(join(base, 'root'));
  await mkdir(join(base, 'outside'));
  await writeFile(join(base, 'outside', 'secret'), 'not the host');
  return { base, root: join(base, 'root'), outside: join(base, 'outside') };
}

/** Every entry below a folder (kind, mode, links count, contents or link target): equal lists mean nothing changed. */
export async function tree(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const name of (await readdir(dir)).sort()) {
    const p = join(dir, name);
    const st = await lstat(p);
    if (st.isSymbolicLink()) out.push(`${name} -> ${await readlink(p)}`);
    else if (st.isDirectory()) out.push(`${name}/ ${st.mode & 0o7777}`, ...(await tree(p)).map((e) => `${name}/${e}`));
    else out.push(`${name} ${st.mode & 0o7777} ${st.nlink} ${(await readFile(p)).toString('base64')}`);
  }
  return out;
}

export interface Escape {
  condition: string;
  /** Makes the host root as the case needs it (given the root's path). */
  prepare: (root: string) => Promise<unknown>;
  config: Omit<IgnitionConfig, 'ignition'>;
  /** The refusal's reason. */
  reason: RegExp;
}

const nothing = (): Promise<void> => Promise.resolve();

/** Each lands in `<base>/outside` when the agent resolves paths with join() and follows links as this machine sees them. */
export const ESCAPES: readonly Escape[] = [
  {
    condition: 'a unit name has ../',
    prepare: nothing,
    config: { systemd: { units: [{ name: '../../../../outside/x.service', contents: '[Service]\n' }] } },
    reason: /systemd\.units\[\.\.\/\.\.\/\.\.\/\.\.\/outside\/x\.service\]: not a valid unit name/,
  },
  {
    condition: 'a drop-in name has ../',
    prepare: nothing,
    config: {
      systemd: {
        units: [
          { name: 'kubelet.service', dropins: [{ name: '../../../../../outside/x.conf', contents: '[Service]\n' }] },
        ],
      },
    },
    reason:
      /systemd\.units\[kubelet\.service\]\.dropins\[\.\.\/\.\.\/\.\.\/\.\.\/\.\.\/outside\/x\.conf\]: not a valid drop-in name/,
  },
  {
    condition: 'a WantedBy= target has ../',
    prepare: nothing,
    config: {
      systemd: {
        units: [{ name: 'x.service', enabled: true, contents: '[Install]\nWantedBy=../../../../outside/t\n' }],
      },
    },
    reason:
      /systemd\.units\[x\.service\]: install target "\.\.\/\.\.\/\.\.\/\.\.\/outside\/t" is not a valid unit name/,
  },
  {
    condition: 'a link target climbs out of the root',
    prepare: nothing,
    config: { storage: { links: [{ path: '/etc/out', target: '../../outside' }] } },
    reason: /storage\.links\[\/etc\/out\]: target "\.\.\/\.\.\/outside" leads out of the host root/,
  },
  {
    condition: 'a hard-link target has ../',
    prepare: nothing,
    config: { storage: { links: [{ path: '/etc/hard', target: '/../outside/secret', hard: true }] } },
    reason: /storage\.links\[\/etc\/hard\]: target "\/\.\.\/outside\/secret" is not absolute and normal/,
  },
  {
    condition: 'a file path has ../',
    prepare: nothing,
    config: { storage: { files: [{ path: '/etc/../../outside/x', contents: { source: 'data:,x' } }] } },
    reason: /path "\/etc\/\.\.\/\.\.\/outside\/x" is not absolute and normal/,
  },
  {
    condition: 'a user name has ../',
    prepare: nothing,
    config: { passwd: { users: [{ name: '../../outside/u', sshAuthorizedKeys: ['ssh-ed25519 AAAA'] }] } },
    reason: /passwd\.users\[\.\.\/\.\.\/outside\/u\]: not a valid user name/,
  },
  {
    condition: 'a file is to be written below a host link whose relative target climbs out of the root',
    prepare: (root) => symlink('../../..', join(root, 'etc', 'kindling', 'up')),
    config: { storage: { files: [{ path: '/etc/kindling/up/outside/x.conf', contents: { source: 'data:,x' } }] } },
    reason:
      /\/etc\/kindling\/up\/outside\/x\.conf: the host link \/etc\/kindling\/up -> \.\.\/\.\.\/\.\. leads out of the host root/,
  },
];
