import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { gzipSync } from 'node:zlib';
import { pack } from 'tar-stream';
import { loadRelease, type ImageSource } from './image.js';
import { sha256Digest } from './digest.js';
import { InvalidReleaseError, MEDIA_TYPES } from './types.js';
import { RELEASE_MANIFEST } from '../../testing/index.js';

const MIB = 1024 * 1024;

async function tarOf(name: string, body: string): Promise<Buffer> {
  const p = pack();
  const chunks: Buffer[] = [];
  p.on('data', (c: unknown) => chunks.push(c as Buffer));
  const done = new Promise<void>((r) => p.on('end', () => r()));
  p.entry({ name }, body);
  p.finalize();
  await done;
  return Buffer.concat(chunks);
}

/** An image in memory whose manifest lists these gzip'd layers, in order. */
function imageOf(layers: Buffer[]): ImageSource {
  const blobs = new Map(layers.map((b) => [sha256Digest(b), b]));
  const manifest = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: MEDIA_TYPES.ociManifest,
      config: { mediaType: MEDIA_TYPES.ociConfig, digest: sha256Digest('{}'), size: 2 },
      layers: layers.map((b) => ({ mediaType: MEDIA_TYPES.ociLayerGzip, digest: sha256Digest(b), size: b.length })),
    }),
  );
  return {
    root: () => Promise.resolve({ bytes: manifest, mediaType: MEDIA_TYPES.ociManifest }),
    manifest: () => Promise.reject(new Error('no index here')),
    blob: (digest) => Promise.resolve(blobs.get(digest) as Buffer),
  };
}

describe('release layers within the budget', () => {
  it('when the layers inflate past the total, it should refuse the release with the sizes', async () => {
    // 60 MiB of zeros is a valid (empty) tar, and each layer alone stays under the old 64 MiB per blob.
    const zeros = gzipSync(Buffer.alloc(60 * MIB));
    const release = gzipSync(await tarOf('release.json', JSON.stringify(RELEASE_MANIFEST)));
    const source = imageOf([release, zeros, zeros, zeros, zeros, zeros]);
    await assert.rejects(loadRelease(source), (err) => {
      assert.ok(err instanceof InvalidReleaseError);
      assert.match(
        err.message,
        /^the release image's layer sha256:\w+ inflates past the limit of 256 MiB \(240.0 MiB of it already taken/,
      );
      return true;
    });
    const smaller = await loadRelease(source, { maxLayers: 16, maxBytes: 512 * MIB });
    assert.equal(smaller.manifest.version, RELEASE_MANIFEST.version);
  });

  it('when one layer is a gzip bomb, it should stop inflating at the limit', async () => {
    const member = gzipSync(Buffer.alloc(64 * MIB));
    const bomb = Buffer.concat(Array.from({ length: 11 }, () => member));
    await assert.rejects(loadRelease(imageOf([bomb]), { maxLayers: 16, maxBytes: 64 * MIB }), {
      message: /inflates past the limit of 64 MiB/,
    });
  });

  it('when the image has more layers than the limit, it should refuse it before reading any', async () => {
    const layer = gzipSync(await tarOf('x', 'x'));
    await assert.rejects(loadRelease(imageOf(Array.from({ length: 17 }, () => layer))), {
      message: 'the release image has 17 layers, more than the limit of 16',
    });
  });
});
