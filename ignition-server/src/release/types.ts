/**
 * What a Kindling release image is. An OCI image (manifest schema 2) whose layers are gzip'd tars; merged in
 * layer order (a later layer's file wins, OCI whiteouts delete), they hold:
 *   release.json         { "version": "4.18.2", "kubeletVersion": "v1.31.4", "osImage": "..." }
 *   ignition/<name>.json  base Ignition 3.x fragments, merged in name order before the pool's MachineConfigs
 * The config blob is a plain OCI image config, so any OCI tool (skopeo, registries) handles the image.
 */

export const MEDIA_TYPES = {
  ociIndex: 'application/vnd.oci.image.index.v1+json',
  ociManifest: 'application/vnd.oci.image.manifest.v1+json',
  ociConfig: 'application/vnd.oci.image.config.v1+json',
  ociLayerGzip: 'application/vnd.oci.image.layer.v1.tar+gzip',
  ociLayerTar: 'application/vnd.oci.image.layer.v1.tar',
  dockerList: 'application/vnd.docker.distribution.manifest.list.v2+json',
  dockerManifest: 'application/vnd.docker.distribution.manifest.v2+json',
  dockerLayerGzip: 'application/vnd.docker.image.rootfs.diff.tar.gzip',
} as const;

/** Annotation naming a manifest's tag in an OCI layout's index.json. */
export const REF_NAME_ANNOTATION = 'org.opencontainers.image.ref.name';

export const RELEASE_MANIFEST_PATH = 'release.json';
export const FRAGMENT_DIR = 'ignition/';

export interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
  annotations?: Record<string, string>;
  platform?: { architecture?: string; os?: string };
}

export interface ImageManifest {
  schemaVersion: number;
  mediaType?: string;
  config: Descriptor;
  layers: Descriptor[];
  annotations?: Record<string, string>;
}

export interface ImageIndex {
  schemaVersion: number;
  mediaType?: string;
  manifests: Descriptor[];
}

/** The versions a release carries. */
export interface ReleaseManifest {
  version: string;
  kubeletVersion: string;
  osImage: string;
}

export interface IgnitionFragment {
  /** File name under ignition/, e.g. "00-base.json". */
  name: string;
  config: Record<string, unknown>;
}

export interface Release {
  /** Digest of the image manifest: what identifies the release's content. */
  digest: string;
  manifest: ReleaseManifest;
  /** Sorted by name. */
  fragments: IgnitionFragment[];
}

/** Raised when the image exists but is not a valid release (→ ValidGeneratedPayload InvalidConfig). */
export class InvalidReleaseError extends Error {
  override readonly name = 'InvalidReleaseError';
}

/** Raised when the image cannot be reached or found (→ ValidGeneratedPayload ReleaseUnavailable). */
export class ReleaseUnavailableError extends Error {
  override readonly name = 'ReleaseUnavailableError';
}
