/**
 * Generated payloads shared by every replica, in a store that outlives any pod: an OCI repository (the
 * registry that serves the releases, for example). Each entry is a small OCI artifact, content-addressed
 * twice over: tagged by its name (`payload-<sha256(release digest, config)>`, `pin-<sha256(ref, config)>`,
 * see store.ts) and holding one blob named by the digest of its bytes, which a reader checks. A replica or a
 * rescheduled pod that finds an entry there reads it instead of generating, so a (release, config) pair is
 * generated once per fleet rather than once per pod.
 */
import { sha256Digest } from '../release/image.js';
import { RegistryClient, type RegistryOptions } from '../release/registry.js';
import { parseReference } from '../release/reference.js';
import { InvalidReleaseError, MEDIA_TYPES, type ImageManifest } from '../release/types.js';

/** Named byte strings every replica reads and writes; a name always holds the same bytes once written. */
export interface SharedPayloads {
  /** Where, for log lines. */
  readonly where: string;
  get(name: string): Promise<Buffer | undefined>;
  put(name: string, bytes: Buffer): Promise<void>;
}

/** The artifact's type, its blob's media type, and the empty config of an artifact with nothing to configure. */
const ARTIFACT_TYPE = 'application/vnd.kindling.ignition.payload.v1';
const EMPTY_CONFIG = { mediaType: 'application/vnd.oci.empty.v1+json', bytes: Buffer.from('{}') };
const NAME = /^(?:payload|pin)-[a-f0-9]{64}$/;

function checkName(name: string): string {
  if (!NAME.test(name)) throw new Error(`"${name}" is not the name of a shared payload entry`);
  return name;
}

/** `host[:port]/repository` → the repository's client (a tag or digest there is refused: entries are tags). */
export function registryPayloads(repository: string, opts: RegistryOptions): SharedPayloads {
  const ref = parseReference(repository);
  if (
    ref.kind !== 'registry' ||
    ref.digest !== undefined ||
    !/^[^@]*\/[^:@]+$/.test(repository.replace(/^docker:\/\//, ''))
  ) {
    throw new InvalidReleaseError(`"${repository}" is not a registry repository (host[:port]/repository, no tag)`);
  }
  const client = new RegistryClient(ref.host, ref.repository, opts);
  return {
    where: `${ref.host}/${ref.repository}`,
    async get(name) {
      const found = await client.findManifest(checkName(name));
      if (!found) return undefined;
      const manifest = JSON.parse(found.bytes.toString('utf8')) as ImageManifest & { artifactType?: string };
      const layer = manifest.layers?.[0];
      if (manifest.artifactType !== ARTIFACT_TYPE || manifest.layers.length !== 1 || !layer)
        throw new InvalidReleaseError(`${name} in ${ref.host}/${ref.repository} is not a Kindling payload entry`);
      const bytes = await client.getBlob(layer.digest);
      if (sha256Digest(bytes) !== layer.digest)
        throw new InvalidReleaseError(`${name} in ${ref.host}/${ref.repository} does not match its digest`);
      return bytes;
    },
    async put(name, bytes) {
      const digest = sha256Digest(bytes);
      await client.putBlob(sha256Digest(EMPTY_CONFIG.bytes), EMPTY_CONFIG.bytes);
      await client.putBlob(digest, bytes);
      const manifest = {
        schemaVersion: 2,
        mediaType: MEDIA_TYPES.ociManifest,
        artifactType: ARTIFACT_TYPE,
        config: {
          mediaType: EMPTY_CONFIG.mediaType,
          digest: sha256Digest(EMPTY_CONFIG.bytes),
          size: EMPTY_CONFIG.bytes.length,
        },
        layers: [{ mediaType: ARTIFACT_TYPE, digest, size: bytes.length }],
      };
      await client.putManifest(checkName(name), Buffer.from(JSON.stringify(manifest)), MEDIA_TYPES.ociManifest);
    },
  };
}
