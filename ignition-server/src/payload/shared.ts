/**
 * Generated payloads shared by every replica, in a store that outlives any pod: an OCI repository (the
 * registry that serves the releases, for example). Each entry is a small OCI artifact, content-addressed
 * twice over: tagged by its name (`payload-<sha256(release digest, config)>`, `pin-<sha256(ref, config)>`,
 * see store.ts) and holding one blob named by the digest of its bytes, which a reader checks. A replica or a
 * rescheduled pod that finds an entry there reads it instead of generating, so a (release, config) pair is
 * generated once per fleet rather than once per pod.
 *
 * Whoever can push to the repository is not trusted: the leader signs each entry it pushes (signature.ts) and
 * the signature travels in the manifest's annotations, which any registry keeps as pushed. A replica uses an
 * entry only once the signature holds; a refused one is counted, logged (its name and why, never its bytes)
 * and is as good as absent, so the leader generates and pushes it again and the others wait for that.
 */
import { ANNOTATIONS } from '../../../api/src/keys.js';
import type { Logger } from '../../../support/src/logger.js';
import { sha256Digest } from '../release/digest.js';
import { RegistryClient, type RegistryOptions } from '../release/registry.js';
import { parseReference } from '../release/reference.js';
import { InvalidReleaseError, MEDIA_TYPES, type ImageManifest } from '../release/types.js';
import type { EntrySeal, RejectReason } from './signature.js';

/** Named byte strings every replica reads and writes; a name always holds the same bytes once written. */
export interface SharedPayloads {
  /** Where, for log lines. */
  readonly where: string;
  get(name: string): Promise<Buffer | undefined>;
  put(name: string, bytes: Buffer): Promise<void>;
}

/** An entry as the repository holds it: its bytes and the signature pushed beside them, if any. */
export interface StoredEntry {
  bytes: Buffer;
  signature?: string;
}

/** The repository itself: entries as pushed, signed or not, trusted by nobody until verified. */
export interface EntryRepository {
  readonly where: string;
  get(name: string): Promise<StoredEntry | undefined>;
  put(name: string, entry: Required<StoredEntry>): Promise<void>;
}

export interface SharedMetrics {
  /** An entry of the shared store refused before any use. */
  sharedRejected(reason: RejectReason): void;
}

/** The artifact's type, its blob's media type, and the empty config of an artifact with nothing to configure. */
const ARTIFACT_TYPE = 'application/vnd.kindling.ignition.payload.v1';
const EMPTY_CONFIG = { mediaType: 'application/vnd.oci.empty.v1+json', bytes: Buffer.from('{}') };
const NAME = /^(?:payload|pin)-[a-f0-9]{64}$/;

function checkName(name: string): string {
  if (!NAME.test(name)) throw new Error(`"${name}" is not the name of a shared payload entry`);
  return name;
}

/** The repository's entries, each verified against `seal` before anyone sees its bytes, and signed when pushed. */
export function signedPayloads(
  entries: EntryRepository,
  seal: EntrySeal,
  deps: { metrics?: SharedMetrics; log: Logger },
): SharedPayloads {
  return {
    where: entries.where,
    async get(name) {
      const entry = await entries.get(name);
      if (!entry) return undefined;
      const verdict = await seal.verify(name, entry.bytes, entry.signature);
      if (verdict.ok) return entry.bytes;
      deps.metrics?.sharedRejected(verdict.reason);
      deps.log.warn(
        { entry: name, reason: verdict.reason, store: entries.where },
        'Refused an entry of the shared payload store: its signature does not hold; generating or waiting for it instead',
      );
      return undefined;
    },
    async put(name, bytes) {
      await entries.put(name, { bytes, signature: await seal.sign(name, bytes) });
    },
  };
}

/** `host[:port]/repository` → the repository's client (a tag or digest there is refused: entries are tags). */
export function registryEntries(repository: string, opts: RegistryOptions): EntryRepository {
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
      const manifest = JSON.parse(found.bytes.toString('utf8')) as ImageManifest & {
        artifactType?: string;
        annotations?: Record<string, unknown>;
      };
      const layer = manifest.layers?.[0];
      if (manifest.artifactType !== ARTIFACT_TYPE || manifest.layers.length !== 1 || !layer)
        throw new InvalidReleaseError(`${name} in ${ref.host}/${ref.repository} is not a Kindling payload entry`);
      const bytes = await client.getBlob(layer.digest);
      if (sha256Digest(bytes) !== layer.digest)
        throw new InvalidReleaseError(`${name} in ${ref.host}/${ref.repository} does not match its digest`);
      const signature = manifest.annotations?.[ANNOTATIONS.payloadEntrySignature];
      return { bytes, signature: typeof signature === 'string' ? signature : undefined };
    },
    async put(name, { bytes, signature }) {
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
        annotations: { [ANNOTATIONS.payloadEntrySignature]: signature },
      };
      await client.putManifest(checkName(name), Buffer.from(JSON.stringify(manifest)), MEDIA_TYPES.ociManifest);
    },
  };
}
