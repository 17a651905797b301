/**
 * Builds a release image from a folder (release.json + ignition/*.json) as an OCI image layout — a directory
 * or a tar — and optionally pushes it to a registry. The layer is deterministic (sorted entries, zero times
 * and owners), so the same folder always gives the same digest.
 */
import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { pack } from 'tar-stream';
import { sha256Digest } from './digest.js';
import { RegistryClient, type RegistryOptions } from './registry.js';
import {
  FRAGMENT_DIR,
  InvalidReleaseError,
  MEDIA_TYPES,
  REF_NAME_ANNOTATION,
  RELEASE_MANIFEST_PATH,
  type Descriptor,
  type ReleaseManifest,
} from './types.js';

export interface BuiltImage {
  /** Manifest digest. */
  digest: string;
  tag: string;
  manifest: ReleaseManifest;
  /** Every blob by digest (config, layer, manifest). */
  blobs: Map<string, Buffer>;
  manifestDescriptor: Descriptor;
  /** index.json of the layout. */
  index: Buffer;
}

async function tarOf(files: [string, Buffer][]): Promise<Buffer> {
  const p = pack();
  const chunks: Buffer[] = [];
  p.on('data', (c: unknown) => chunks.push(c as Buffer));
  const done = new Promise<void>((resolve, reject) => {
    p.on('end', resolve);
    p.on('error', reject);
  });
  const dirs = [...new Set(files.map(([n]) => n.slice(0, n.lastIndexOf('/') + 1)).filter((d) => d !== ''))].sort();
  const stamp = { mtime: new Date(0), uid: 0, gid: 0, uname: '', gname: '' };
  for (const d of dirs) p.entry({ name: d, type: 'directory', mode: 0o755, ...stamp });
  for (const [name, body] of files) p.entry({ name, mode: 0o644, ...stamp }, body);
  p.finalize();
  await done;
  return Buffer.concat(chunks);
}

async function readFolder(folder: string): Promise<{ manifest: ReleaseManifest; files: [string, Buffer][] }> {
  const releaseBytes = await readFile(join(folder, RELEASE_MANIFEST_PATH)).catch((err: unknown) => {
    throw new InvalidReleaseError(`${folder} has no ${RELEASE_MANIFEST_PATH}`, { cause: err });
  });
  const manifest = JSON.parse(releaseBytes.toString('utf8')) as ReleaseManifest;
  for (const key of ['version', 'kubeletVersion', 'osImage'] as const) {
    if (typeof manifest[key] !== 'string' || manifest[key] === '')
      throw new InvalidReleaseError(`${RELEASE_MANIFEST_PATH} needs a "${key}" string`);
  }
  const fragDir = join(folder, FRAGMENT_DIR);
  const names = (await readdir(fragDir).catch(() => [] as string[])).filter((n) => n.endsWith('.json')).sort();
  const files: [string, Buffer][] = [[RELEASE_MANIFEST_PATH, releaseBytes]];
  for (const n of names) {
    const body = await readFile(join(fragDir, n));
    JSON.parse(body.toString('utf8'));
    files.push([`${FRAGMENT_DIR}${n}`, body]);
  }
  return { manifest, files };
}

export async function buildRelease(folder: string, tag = 'latest'): Promise<BuiltImage> {
  const { manifest, files } = await readFolder(folder);
  const tar = await tarOf(files);
  const layer = gzipSync(tar, { level: 9 });
  const config = Buffer.from(
    JSON.stringify({
      architecture: 'amd64',
      os: 'linux',
      config: {
        Labels: {
          'dev.kindling.release.version': manifest.version,
          'dev.kindling.release.kubelet-version': manifest.kubeletVersion,
        },
      },
      rootfs: { type: 'layers', diff_ids: [sha256Digest(tar)] },
    }),
  );
  const imageManifest = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: MEDIA_TYPES.ociManifest,
      config: { mediaType: MEDIA_TYPES.ociConfig, digest: sha256Digest(config), size: config.length },
      layers: [{ mediaType: MEDIA_TYPES.ociLayerGzip, digest: sha256Digest(layer), size: layer.length }],
      annotations: { 'org.opencontainers.image.version': manifest.version },
    }),
  );
  const digest = sha256Digest(imageManifest);
  const manifestDescriptor: Descriptor = {
    mediaType: MEDIA_TYPES.ociManifest,
    digest,
    size: imageManifest.length,
    annotations: { [REF_NAME_ANNOTATION]: tag },
  };
  const index = Buffer.from(
    JSON.stringify({ schemaVersion: 2, mediaType: MEDIA_TYPES.ociIndex, manifests: [manifestDescriptor] }),
  );
  const blobs = new Map([config, layer, imageManifest].map((b) => [sha256Digest(b), b]));
  return { digest, tag, manifest, blobs, manifestDescriptor, index };
}

const OCI_LAYOUT = Buffer.from(JSON.stringify({ imageLayoutVersion: '1.0.0' }));

export async function writeLayoutDir(image: BuiltImage, dir: string): Promise<void> {
  await mkdir(join(dir, 'blobs', 'sha256'), { recursive: true });
  await writeFile(join(dir, 'oci-layout'), OCI_LAYOUT);
  for (const [digest, bytes] of image.blobs)
    await writeFile(join(dir, 'blobs', 'sha256', digest.slice('sha256:'.length)), bytes);
  await writeFile(join(dir, 'index.json'), image.index);
}

export async function writeLayoutTar(image: BuiltImage, path: string): Promise<void> {
  const files: [string, Buffer][] = [
    ['oci-layout', OCI_LAYOUT],
    ['index.json', image.index],
    ...[...image.blobs].map(([d, b]): [string, Buffer] => [`blobs/sha256/${d.slice('sha256:'.length)}`, b]),
  ];
  await writeFile(path, await tarOf(files));
}

/** Pushes blobs then the manifest under the tag; returns the pushed manifest digest. */
export async function pushRelease(
  image: BuiltImage,
  host: string,
  repository: string,
  opts: RegistryOptions & { tag?: string } = {},
): Promise<string> {
  const client = new RegistryClient(host, repository, opts);
  for (const [digest, bytes] of image.blobs) {
    if (digest !== image.digest) await client.putBlob(digest, bytes);
  }
  await client.putManifest(opts.tag ?? image.tag, image.blobs.get(image.digest) as Buffer, MEDIA_TYPES.ociManifest);
  return image.digest;
}
