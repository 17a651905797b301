/**
 * OCI image layouts (image-spec "image-layout"): a directory with `oci-layout`, `index.json` and
 * `blobs/sha256/<hex>`, or the same tree in a tar file. The reference's tag selects the index entry whose
 * `org.opencontainers.image.ref.name` matches; without tag or digest the index must hold one manifest.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { extract } from 'tar-stream';
import { createReadStream } from 'node:fs';
import { isDigest } from './reference.js';
import { MAX_BLOB_BYTES, type ImageSource, type ManifestBytes } from './image.js';
import {
  InvalidReleaseError,
  REF_NAME_ANNOTATION,
  ReleaseUnavailableError,
  type Descriptor,
  type ImageIndex,
} from './types.js';

type ReadFile = (path: string) => Promise<Buffer>;

function selectEntry(index: ImageIndex, tag?: string, digest?: string): Descriptor {
  const manifests = Array.isArray(index.manifests) ? index.manifests : [];
  if (digest) {
    const byDigest = manifests.find((m) => m.digest === digest);
    return byDigest ?? { mediaType: '', digest, size: 0 };
  }
  if (tag) {
    const byTag = manifests.find((m) => m.annotations?.[REF_NAME_ANNOTATION] === tag);
    if (!byTag) throw new ReleaseUnavailableError(`the image layout has no manifest tagged "${tag}"`);
    return byTag;
  }
  if (manifests.length !== 1)
    throw new InvalidReleaseError(`the image layout holds ${manifests.length} manifests: name one with :<tag>`);
  return manifests[0] as Descriptor;
}

function blobPath(digest: string): string {
  // Not quoted: it comes from the layout's files.
  if (!isDigest(digest))
    throw new InvalidReleaseError('the image layout names a blob by something other than a sha256 digest');
  return `blobs/sha256/${digest.slice('sha256:'.length)}`;
}

function layoutSource(read: ReadFile, tag?: string, digest?: string): ImageSource {
  const blob = async (d: string): Promise<Buffer> => {
    try {
      return await read(blobPath(d));
    } catch (err) {
      if (err instanceof InvalidReleaseError) throw err;
      throw new ReleaseUnavailableError(`blob ${d} is missing from the image layout`, { cause: err });
    }
  };
  const manifest = async (d: string): Promise<ManifestBytes> => ({ bytes: await blob(d), mediaType: '' });
  return {
    blob,
    manifest,
    async root() {
      let indexBytes: Buffer;
      try {
        indexBytes = await read('index.json');
      } catch (err) {
        throw new ReleaseUnavailableError('the image layout has no index.json', { cause: err });
      }
      let index: ImageIndex;
      try {
        index = JSON.parse(indexBytes.toString('utf8')) as ImageIndex;
      } catch {
        // No cause: the parser's message quotes the file's bytes.
        throw new InvalidReleaseError("the image layout's index.json is not JSON");
      }
      const entry = selectEntry(index, tag, digest);
      return { bytes: await blob(entry.digest), mediaType: entry.mediaType };
    },
  };
}

export function layoutDirSource(dir: string, tag?: string, digest?: string): ImageSource {
  return layoutSource((p) => readFile(join(dir, p)), tag, digest);
}

/** Reads the tar once, keeping only what a layout holds (bounded). */
async function readTarFiles(path: string): Promise<Map<string, Buffer>> {
  const files = new Map<string, Buffer>();
  let total = 0;
  const ex = extract();
  await new Promise<void>((resolve, reject) => {
    ex.on('entry', (header, stream, next) => {
      const chunks: Buffer[] = [];
      stream.on('data', (c: unknown) => {
        total += (c as Buffer).length;
        if (total > MAX_BLOB_BYTES * 4) ex.destroy(new InvalidReleaseError('the image archive is too large'));
        chunks.push(c as Buffer);
      });
      stream.on('end', () => {
        if (header.type === 'file') files.set(header.name.replace(/^(\.\/|\/)+/, ''), Buffer.concat(chunks));
        next();
      });
    });
    ex.on('finish', resolve);
    ex.on('error', reject);
    const input = createReadStream(path);
    input.on('error', (err) =>
      reject(new ReleaseUnavailableError(`cannot read the image archive ${path}`, { cause: err })),
    );
    input.pipe(ex);
  });
  return files;
}

export function layoutTarSource(path: string, tag?: string, digest?: string): ImageSource {
  let files: Promise<Map<string, Buffer>> | undefined;
  const read: ReadFile = async (p) => {
    files ??= readTarFiles(path);
    const body = (await files).get(p);
    if (!body) throw new Error(`${p} is not in the archive`);
    return body;
  };
  return layoutSource(read, tag, digest);
}
