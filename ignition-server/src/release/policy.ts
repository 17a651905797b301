/**
 * Which release references the ignition server may read. A token Secret's `release` is chosen by whoever can
 * write that Secret, and reading it makes the server open files or connect out: so local image layouts are
 * refused unless the operator allows them (`--allow-local-releases`, for tests and the local environment),
 * and registries must be named (`--allowed-registries`). Nothing is allowed by default.
 */
import { ConfigError } from '../../../support/src/config.js';
import { parseReference, type ReleaseReference } from './reference.js';
import { InvalidReleaseError } from './types.js';

export interface ReleasePolicy {
  /** `oci:` and `oci-archive:` references: files on the server's own disk. */
  allowLocal: boolean;
  /** Registry hosts (`host[:port]`, lower case) references may name; 'any' allows every host. */
  registries: ReadonlySet<string> | 'any';
}

/** A reference this server refuses to read: a terminal generation failure (InvalidConfig), never retried. */
export class ReleaseRefusedError extends InvalidReleaseError {}

const HOST = /^(?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*|\[[0-9a-f:]+\])(?::\d{1,5})?$/;

/** `--allowed-registries`: host[:port] entries, or `*` alone for any registry. */
export function parseAllowedRegistries(entries: readonly string[]): ReleasePolicy['registries'] {
  const hosts = entries.map((e) => e.trim().toLowerCase()).filter((e) => e !== '');
  if (hosts.includes('*')) {
    if (hosts.length > 1)
      throw new ConfigError('--allowed-registries: "*" allows every registry and cannot be combined with hosts');
    return 'any';
  }
  for (const host of hosts) {
    if (!HOST.test(host))
      throw new ConfigError(`--allowed-registries: "${host}" is not a registry host (host[:port], no scheme or path)`);
  }
  return new Set(hosts);
}

/** Throws ReleaseRefusedError unless the policy allows the parsed reference. */
function checkReference(ref: ReleaseReference, policy: ReleasePolicy): void {
  if (ref.kind !== 'registry') {
    if (policy.allowLocal) return;
    throw new ReleaseRefusedError(
      'the release names a file on the ignition server (oci:/oci-archive:), which this server refuses; use a registry reference (or start the server with --allow-local-releases)',
    );
  }
  if (policy.registries === 'any' || policy.registries.has(ref.host.toLowerCase())) return;
  throw new ReleaseRefusedError(
    `registry ${ref.host} is not in the ignition server's --allowed-registries, so the release is not read`,
  );
}

/** Parses and checks a reference: what the payload store asks before it resolves, reads or serves from cache. */
export function admitRelease(ref: string, policy: ReleasePolicy): void {
  checkReference(parseReference(ref), policy);
}
