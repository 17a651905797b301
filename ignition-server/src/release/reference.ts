/**
 * Release references, in the transports' usual spelling:
 *   oci:<dir>[:<tag>|@<digest>]             an OCI image-layout directory
 *   oci-archive:<file.tar>[:<tag>|@<digest>] an OCI image layout in a tar file
 *   [docker://]<host>[:port]/<repo>[:<tag>][@<digest>]   a registry (HTTPS, distribution API)
 */
import { InvalidReleaseError } from './types.js';

export type ReleaseReference =
  | { kind: 'layout-dir' | 'layout-tar'; path: string; tag?: string; digest?: string }
  | { kind: 'registry'; host: string; repository: string; tag?: string; digest?: string };

const DIGEST = /^sha256:[a-f0-9]{64}$/;
const TAG = /^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$/;
const REPOSITORY = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:\/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$/;

export function isDigest(value: string): boolean {
  return DIGEST.test(value);
}

/** Splits "<name>[:tag][@digest]"; the tag colon is the last one after the last slash. */
function splitTagDigest(text: string): { name: string; tag?: string; digest?: string } {
  let name = text;
  let digest: string | undefined;
  const at = name.lastIndexOf('@');
  if (at >= 0) {
    digest = name.slice(at + 1);
    name = name.slice(0, at);
    if (!DIGEST.test(digest)) throw new InvalidReleaseError(`"${digest}" is not a sha256 digest`);
  }
  const colon = name.lastIndexOf(':');
  if (colon > name.lastIndexOf('/')) {
    const tag = name.slice(colon + 1);
    if (!TAG.test(tag)) throw new InvalidReleaseError(`"${tag}" is not a valid tag`);
    return { name: name.slice(0, colon), tag, digest };
  }
  return { name, digest };
}

function parseRegistry(text: string): ReleaseReference {
  const slash = text.indexOf('/');
  if (slash <= 0)
    throw new InvalidReleaseError(`"${text}" names no registry host (expected host[:port]/repository[:tag])`);
  const host = text.slice(0, slash);
  if (!/^[A-Za-z0-9.-]+(?::\d+)?$|^\[[0-9a-fA-F:]+\](?::\d+)?$/.test(host))
    throw new InvalidReleaseError(`"${host}" is not a registry host`);
  const { name, tag, digest } = splitTagDigest(text.slice(slash + 1));
  if (!REPOSITORY.test(name)) throw new InvalidReleaseError(`"${name}" is not a valid repository name`);
  return { kind: 'registry', host, repository: name, tag: tag ?? (digest ? undefined : 'latest'), digest };
}

export function parseReference(ref: string): ReleaseReference {
  const text = ref.trim();
  if (text === '') throw new InvalidReleaseError('the release reference is empty');
  for (const [prefix, kind] of [
    ['oci:', 'layout-dir'],
    ['oci-archive:', 'layout-tar'],
  ] as const) {
    if (!text.startsWith(prefix)) continue;
    const rest = text.slice(prefix.length);
    // A path may hold colons; only a suffix that looks like a tag or digest is one.
    const m = /^(.*?)(?::([A-Za-z0-9_][A-Za-z0-9._-]{0,127}))?(?:@(sha256:[a-f0-9]{64}))?$/.exec(rest);
    const path = m?.[1] ?? '';
    if (path === '') throw new InvalidReleaseError(`"${ref}" names no path`);
    return { kind, path, tag: m?.[2], digest: m?.[3] };
  }
  return parseRegistry(text.startsWith('docker://') ? text.slice('docker://'.length) : text);
}
