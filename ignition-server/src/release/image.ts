/**
 * Reading a release out of an OCI image, wherever it lives: an ImageSource gives the manifest the reference
 * names and blobs by digest; this resolves an index to one manifest, verifies every blob against its digest,
 * unpacks the layers in order and takes the release manifest and the base Ignition fragments from them.
 */
import { extract } from 'tar-stream';
import { DEFAULT_MAX_RELEASE_BYTES, DEFAULT_MAX_RELEASE_LAYERS } from '../../../api/src/limits.js';
import { InflateBudget, InflateLimitError } from '../../../support/src/inflate.js';
import { sha256Digest } from './digest.js';
import {
  FRAGMENT_DIR,
  InvalidReleaseError,
  MEDIA_TYPES,
  RELEASE_MANIFEST_PATH,
  type Descriptor,
  type IgnitionFragment,
  type ImageIndex,
  type ImageManifest,
  type Release,
  type ReleaseManifest,
} from './types.js';

/** Release images hold text; anything near this is not one. */
export const MAX_BLOB_BYTES = 64 * 1024 * 1024;

/** What one release may take: its layers, and their bytes once inflated, summed (see api/src/limits.ts). */
export interface ReleaseLimits {
  maxLayers: number;
  maxBytes: number;
}

export const DEFAULT_RELEASE_LIMITS: ReleaseLimits = Object.freeze({
  maxLayers: DEFAULT_MAX_RELEASE_LAYERS,
  maxBytes: DEFAULT_MAX_RELEASE_BYTES,
});

export interface ManifestBytes {
  bytes: Buffer;
  mediaType: string;
}

export interface ImageSource {
  /** The manifest or index the reference names. */
  root(): Promise<ManifestBytes>;
  /** A manifest by digest (an index's child). */
  manifest(digest: string): Promise<ManifestBytes>;
  blob(digest: string): Promise<Buffer>;
}

/** Throws unless the bytes hash to the digest. */
function verifyDigest(bytes: Buffer, digest: string): Buffer {
  if (sha256Digest(bytes) !== digest) throw new InvalidReleaseError(`content does not match its digest ${digest}`);
  return bytes;
}

function parseJson<T>(bytes: Buffer, what: string): T {
  try {
    return JSON.parse(bytes.toString('utf8')) as T;
  } catch {
    // No cause: the parser's message quotes the bytes, and a manifest's bytes are whatever the host answered.
    throw new InvalidReleaseError(`${what} is not JSON`);
  }
}

const isIndex = (m: ManifestBytes, parsed: { mediaType?: string; manifests?: unknown }): boolean =>
  m.mediaType === MEDIA_TYPES.ociIndex ||
  m.mediaType === MEDIA_TYPES.dockerList ||
  parsed.mediaType === MEDIA_TYPES.ociIndex ||
  Array.isArray(parsed.manifests);

/** linux/amd64 when the index says platforms, else the only (or first) image manifest. */
function pickManifest(index: ImageIndex): Descriptor {
  const images = index.manifests.filter(
    (d) => d.mediaType === MEDIA_TYPES.ociManifest || d.mediaType === MEDIA_TYPES.dockerManifest,
  );
  const chosen = images.find((d) => d.platform?.os === 'linux' && d.platform.architecture === 'amd64') ?? images[0];
  if (!chosen) throw new InvalidReleaseError('the image index holds no image manifest');
  return chosen;
}

/** Resolves the reference to an image manifest and its digest. */
export async function resolveManifest(source: ImageSource): Promise<{ digest: string; manifest: ImageManifest }> {
  let current = await source.root();
  for (let depth = 0; depth < 3; depth++) {
    const parsed = parseJson<ImageManifest & ImageIndex>(current.bytes, 'the image manifest');
    if (!isIndex(current, parsed)) return { digest: sha256Digest(current.bytes), manifest: checkManifest(parsed) };
    const child = pickManifest(parsed);
    current = await source.manifest(child.digest);
    verifyDigest(current.bytes, child.digest);
  }
  throw new InvalidReleaseError('image indexes nest too deep');
}

function checkManifest(m: ImageManifest): ImageManifest {
  if (m.schemaVersion !== 2 || !Array.isArray(m.layers) || typeof m.config?.digest !== 'string') {
    throw new InvalidReleaseError('the image manifest is not an OCI/Docker schema 2 image manifest');
  }
  return m;
}

/** Reads a tar's regular files into a map, applying OCI whiteouts against what earlier layers left. */
async function applyLayer(tarBytes: Buffer, files: Map<string, Buffer>): Promise<void> {
  const ex = extract();
  const done = new Promise<void>((resolve, reject) => {
    ex.on('entry', (header, stream, next) => {
      const chunks: Buffer[] = [];
      stream.on('data', (c: unknown) => chunks.push(c as Buffer));
      stream.on('end', () => {
        applyEntry(files, header.name, header.type, Buffer.concat(chunks));
        next();
      });
      stream.on('error', reject);
    });
    ex.on('finish', resolve);
    ex.on('error', (err) => reject(new InvalidReleaseError('a layer is not a valid tar', { cause: err })));
  });
  ex.end(tarBytes);
  await done;
}

function applyEntry(files: Map<string, Buffer>, rawName: string, type: string | null | undefined, body: Buffer): void {
  const name = rawName.replace(/^(\.\/|\/)+/, '');
  const base = name.slice(name.lastIndexOf('/') + 1);
  const dir = name.slice(0, name.lastIndexOf('/') + 1);
  if (base === '.wh..wh..opq') {
    for (const k of [...files.keys()]) if (k.startsWith(dir)) files.delete(k);
  } else if (base.startsWith('.wh.')) {
    const target = dir + base.slice(4);
    for (const k of [...files.keys()]) if (k === target || k.startsWith(`${target}/`)) files.delete(k);
  } else if (type === 'file' || type === 'contiguous-file') {
    files.set(name, body);
  }
}

function checkMediaType(layer: Descriptor): void {
  const known = [MEDIA_TYPES.ociLayerTar, MEDIA_TYPES.ociLayerGzip, MEDIA_TYPES.dockerLayerGzip] as string[];
  if (known.includes(layer.mediaType)) return;
  // Quoted only when it looks like a media type: the field comes from whatever the host answered.
  const named = /^[\w.+-]{1,64}\/[\w.+-]{1,127}$/.test(String(layer.mediaType)) ? ` ${layer.mediaType}` : '';
  throw new InvalidReleaseError(`layer media type${named} is not a (gzip'd) tar`);
}

/** The layer's tar, spent from the release's budget; a gzip layer is inflated in the thread pool, never past it. */
async function unpackLayer(layer: Descriptor, bytes: Buffer, budget: InflateBudget): Promise<Buffer> {
  checkMediaType(layer);
  const what = `layer ${layer.digest}`;
  try {
    if (layer.mediaType !== MEDIA_TYPES.ociLayerTar) return await budget.gunzip(bytes, what);
    budget.spend(bytes.length, what);
    return bytes;
  } catch (err) {
    if (err instanceof InflateLimitError)
      throw new InvalidReleaseError(`the release image's ${err.message}: its layers may take that much in all`, {
        cause: err,
      });
    throw new InvalidReleaseError(`${what} is not valid gzip`, { cause: err });
  }
}

function readReleaseManifest(files: Map<string, Buffer>): ReleaseManifest {
  const bytes = files.get(RELEASE_MANIFEST_PATH);
  if (!bytes) throw new InvalidReleaseError(`the image holds no ${RELEASE_MANIFEST_PATH}`);
  const m = parseJson<Partial<ReleaseManifest>>(bytes, RELEASE_MANIFEST_PATH);
  for (const key of ['version', 'kubeletVersion', 'osImage'] as const) {
    if (typeof m[key] !== 'string' || m[key] === '')
      throw new InvalidReleaseError(`${RELEASE_MANIFEST_PATH} has no "${key}" string`);
  }
  if (!/^v?\d+\.\d+\.\d+/.test(m.kubeletVersion ?? ''))
    throw new InvalidReleaseError(`kubeletVersion "${m.kubeletVersion}" is not a version`);
  return { version: m.version as string, kubeletVersion: m.kubeletVersion as string, osImage: m.osImage as string };
}

function readFragments(files: Map<string, Buffer>): IgnitionFragment[] {
  const names = [...files.keys()].filter(
    (k) => k.startsWith(FRAGMENT_DIR) && k.endsWith('.json') && !k.slice(FRAGMENT_DIR.length).includes('/'),
  );
  return names.sort().map((path) => {
    const config = parseJson<unknown>(files.get(path) as Buffer, path);
    if (typeof config !== 'object' || config === null || Array.isArray(config))
      throw new InvalidReleaseError(`${path} is not a JSON object`);
    return { name: path.slice(FRAGMENT_DIR.length), config: config as Record<string, unknown> };
  });
}

/** Reads the whole release the source names, within `limits` (InvalidReleaseError past them, with the sizes). */
export async function loadRelease(source: ImageSource, limits = DEFAULT_RELEASE_LIMITS): Promise<Release> {
  const { digest, manifest } = await resolveManifest(source);
  if (manifest.layers.length > limits.maxLayers)
    throw new InvalidReleaseError(
      `the release image has ${manifest.layers.length} layers, more than the limit of ${limits.maxLayers}`,
    );
  const budget = new InflateBudget(limits.maxBytes);
  const files = new Map<string, Buffer>();
  for (const layer of manifest.layers) {
    const bytes = verifyDigest(await source.blob(layer.digest), layer.digest);
    await applyLayer(await unpackLayer(layer, bytes, budget), files);
  }
  return { digest, manifest: readReleaseManifest(files), fragments: readFragments(files) };
}
