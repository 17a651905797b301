/**
 * What the node agent cannot apply to a running host, by section of an Ignition config: what would reformat or
 * repartition it, kernel arguments, and what Ignition itself applies only at first boot. One rule set, read by
 * the agent (it refuses such a payload), by the ClusterAPI engine's extension (through the agent's
 * inPlaceBlockers over the rendered payload: such a payload rolls instead) and by the NodePool controller, which
 * records in status.rollout that a ClusterAPI-engine pool's payload rolls when its config documents hold any.
 */

/** The sections of an Ignition 3.x config the rules read. */
export interface InPlaceSections {
  ignition?: { config?: { merge?: unknown[] | null; replace?: unknown } | null } | null;
  storage?: {
    disks?: unknown[] | null;
    raid?: unknown[] | null;
    filesystems?: unknown[] | null;
    luks?: unknown[] | null;
  } | null;
  passwd?: { users?: { name: string; [field: string]: unknown }[] | null; groups?: unknown[] | null } | null;
  kernelArguments?: { shouldExist?: unknown[] | null; shouldNotExist?: unknown[] | null } | null;
}

const nonEmpty = (v: unknown): boolean => (Array.isArray(v) ? v.length > 0 : v !== undefined && v !== null);

/** Sections that would reformat or repartition the host, or that Ignition itself applies only at first boot. */
function unsupportedSections(config: InPlaceSections): string[] {
  const storage = config.storage ?? {};
  const kargs = config.kernelArguments ?? {};
  const sections: [string, unknown][] = [
    ['storage.disks', storage.disks],
    ['storage.raid', storage.raid],
    ['storage.filesystems', storage.filesystems],
    ['storage.luks', storage.luks],
    ['kernelArguments', [...(kargs.shouldExist ?? []), ...(kargs.shouldNotExist ?? [])]],
    ['passwd.groups', config.passwd?.groups],
    ['ignition.config.merge', config.ignition?.config?.merge],
    ['ignition.config.replace', config.ignition?.config?.replace],
  ];
  return sections.filter(([, v]) => nonEmpty(v)).map(([name]) => name);
}

/** Of a user, only SSH keys can be changed in place; creating users or changing passwords cannot. */
function unsupportedUserFields(config: InPlaceSections): string[] {
  return (config.passwd?.users ?? []).flatMap((user) =>
    Object.keys(user)
      .filter((k) => k !== 'name' && k !== 'sshAuthorizedKeys' && nonEmpty(user[k]))
      .map((k) => `passwd.users[${user.name}].${k}`),
  );
}

/** The sections of a config the agent cannot apply in place, by name ("kernelArguments", "storage.disks"…); empty: none. */
export function unsupportedInPlace(config: InPlaceSections): string[] {
  return [...unsupportedSections(config), ...unsupportedUserFields(config)];
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * The same rules over a pool's config documents (SECRET_KEYS.config: MachineConfig and KubeletConfig documents
 * as one JSON array), as the ignition server renders them into the payload: a MachineConfig's
 * spec.kernelArguments become the payload's kernelArguments, its spec.config fragment is merged in.
 */
export function documentsUnsupportedInPlace(config: string): string[] {
  const docs = JSON.parse(config) as unknown[];
  const found = docs.filter(isObject).flatMap((doc) => {
    const spec = isObject(doc.spec) ? doc.spec : {};
    const kargs = Array.isArray(spec.kernelArguments) && spec.kernelArguments.length > 0 ? ['kernelArguments'] : [];
    return [...kargs, ...(isObject(spec.config) ? unsupportedInPlace(spec.config) : [])];
  });
  return [...new Set(found)];
}
