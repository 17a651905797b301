/** From a release reference to the release: pick the source its transport names, then read it. */
import { DEFAULT_RELEASE_LIMITS, loadRelease, resolveManifest, type ImageSource, type ReleaseLimits } from './image.js';
import { layoutDirSource, layoutTarSource } from './layout.js';
import { parseReference, type ReleaseReference } from './reference.js';
import { RegistryClient, registrySource, type RegistryOptions } from './registry.js';
import type { Release } from './types.js';

function sourceFor(ref: ReleaseReference, opts: RegistryOptions = {}): ImageSource {
  switch (ref.kind) {
    case 'layout-dir':
      return layoutDirSource(ref.path, ref.tag, ref.digest);
    case 'layout-tar':
      return layoutTarSource(ref.path, ref.tag, ref.digest);
    default:
      return registrySource(new RegistryClient(ref.host, ref.repository, opts), ref.digest ?? ref.tag ?? 'latest');
  }
}

/** The manifest digest a reference names now (a tag may move; a digest never does). */
export async function resolveRelease(ref: string, opts: RegistryOptions = {}): Promise<string> {
  const parsed = parseReference(ref);
  return (await resolveManifest(sourceFor(parsed, opts))).digest;
}

/** Reads the release within `limits`; `digest` pins it (the result's digest always matches it, or this throws). */
export async function readRelease(
  ref: string,
  opts: RegistryOptions = {},
  digest?: string,
  limits: ReleaseLimits = DEFAULT_RELEASE_LIMITS,
): Promise<Release> {
  const parsed = parseReference(ref);
  const pinned: ReleaseReference = digest ? { ...parsed, digest } : parsed;
  return loadRelease(sourceFor(pinned, opts), limits);
}
