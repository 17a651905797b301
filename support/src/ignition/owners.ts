/**
 * Owners and modes of what the agent writes. A config's `user`/`group` name a user or group by id or by name;
 * a name means what the host's own account files say (its /etc/passwd and /etc/group, then /usr/lib/passwd and
 * /usr/lib/group where the image keeps its system accounts), never this machine's: the agent runs in a
 * container whose accounts are not the host's. The checks a config can fail without a host (both id and name,
 * a bad id, a setuid mode) are the same for the in-place decision and the agent; a name the host does not
 * know is found by the agent only, and ends its node Degraded with that reason.
 */
import { UnsupportedConfigError } from './refusal.js';

/** A user or group as a config names it: by id, or by name as the host knows it. */
type Principal = { id: number } | { name: string };
/** Who is to own an entry; `primary`: the user's own group (SSH keys are written as the user, as Ignition does). */
export interface Ownership {
  user: Principal;
  group: Principal | 'primary';
}
export interface Owner {
  uid: number;
  gid: number;
}

/** What entriesOf needs to know of the host (Host.entries reads it; the in-place decision has no host). */
export interface HostFacts {
  hasKeysDir(home: string): boolean;
  /** uid and gid of an ownership on the host; refuses a name the host does not know (`where` names the entry). */
  owner(want: Ownership, where: string): Owner;
}

/** A `user` or `group` of an Ignition node. */
export interface IgnPrincipal {
  id?: number | null;
  name?: string | null;
}

/** A `user` or `group` of a node: by id or by name, not both (as Ignition's validation says). */
function principalOf(p: IgnPrincipal | null | undefined, where: string): Principal | undefined {
  const id = p?.id ?? undefined;
  const name = p?.name ?? undefined;
  if (id !== undefined && name !== undefined)
    throw new UnsupportedConfigError(`${where}: both an id and a name are set (set one)`);
  if (id !== undefined) return { id: checkId(id, where) };
  return name === undefined || name === '' ? undefined : { name };
}

/** A uid or gid: 0 to 2^32-2 (-1 means "no change" to chown). */
function checkId(id: number, where: string): number {
  if (!Number.isInteger(id) || id < 0 || id >= 0xffffffff)
    throw new UnsupportedConfigError(`${where}: id ${id} is not a user or group id`);
  return id;
}

/** The owner a node asks for, resolved on the host; undefined when it names none (root, as the agent writes). */
export function ownerOf(
  node: { user?: IgnPrincipal | null; group?: IgnPrincipal | null },
  where: string,
  facts: HostFacts,
): Owner | undefined {
  const user = principalOf(node.user, `${where}.user`);
  const group = principalOf(node.group, `${where}.group`);
  if (!user && !group) return undefined;
  // Ignition's default for the one not named is root.
  return facts.owner({ user: user ?? { id: 0 }, group: group ?? { id: 0 } }, where);
}

/** A mode the agent writes: permission bits, never setuid or setgid, never sticky on a file (see the top). */
export function checkMode(mode: number, where: string, kind: 'file' | 'dir'): number {
  if (!Number.isInteger(mode) || mode < 0 || mode > 0o7777)
    throw new UnsupportedConfigError(`${where}: mode ${mode} is not a file mode (0 to 0o7777)`);
  if (mode & 0o6000)
    throw new UnsupportedConfigError(
      `${where}: mode 0o${mode.toString(8)} sets setuid or setgid, which the agent refuses (a tenant's program running as another user on every host)`,
    );
  if (kind === 'file' && mode & 0o1000)
    throw new UnsupportedConfigError(`${where}: mode 0o${mode.toString(8)} sets the sticky bit on a file`);
  return mode;
}

/** The host's accounts: each user's uid and primary gid, each group's gid, by name. */
export interface Accounts {
  users: ReadonlyMap<string, Owner>;
  groups: ReadonlyMap<string, number>;
}

/** `name:password:id[:gid…]` lines (passwd(5), group(5)); the first line of a name wins, as with getpwnam. */
function records(text: string): Map<string, number[]> {
  const out = new Map<string, number[]>();
  for (const line of text.split('\n')) {
    const [name = '', , ...ids] = line.split(':');
    const nums = ids.slice(0, 2).map((v) => (/^\d+$/.test(v) ? Number(v) : NaN));
    if (name !== '' && !name.startsWith('#') && !out.has(name) && !Number.isNaN(nums[0])) out.set(name, nums);
  }
  return out;
}

/** Accounts from the text of passwd and group files (as many as the host has, in lookup order). */
export function parseAccounts(passwd: string, group: string): Accounts {
  const users = new Map<string, Owner>();
  for (const [name, [uid = 0, gid = NaN]] of records(passwd)) if (!Number.isNaN(gid)) users.set(name, { uid, gid });
  const groups = new Map<string, number>();
  for (const [name, [gid = 0]] of records(group)) groups.set(name, gid);
  return { users, groups };
}

/** uid and gid of an ownership on a host with these accounts (HostFacts.owner). */
export function resolveOwner(accounts: Accounts, want: Ownership, where: string): Owner {
  const userOf = (name: string): Owner => {
    const user = accounts.users.get(name);
    if (!user) throw new UnsupportedConfigError(`${where}: user "${name}" is not in the host's /etc/passwd`);
    return user;
  };
  const uid = 'id' in want.user ? want.user.id : userOf(want.user.name).uid;
  if (want.group === 'primary') {
    if ('id' in want.user) throw new UnsupportedConfigError(`${where}: a primary group needs a user name`);
    return { uid, gid: userOf(want.user.name).gid };
  }
  if ('id' in want.group) return { uid, gid: want.group.id };
  const gid = accounts.groups.get(want.group.name);
  if (gid === undefined)
    throw new UnsupportedConfigError(`${where}: group "${want.group.name}" is not in the host's /etc/group`);
  return { uid, gid };
}
