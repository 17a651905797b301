import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { inspect } from 'node:util';
import { createCertificateAuthority } from '../../../test/bed/src/pki.js';
import { pack } from 'tar-stream';
import { buildRelease, pushRelease, writeLayoutDir, writeLayoutTar } from './build.js';
import { readRelease, resolveRelease } from './open.js';
import { parseReference } from './reference.js';
import { parsePullSecret, parseChallenge } from './registry.js';
import { InvalidReleaseError, MEDIA_TYPES, ReleaseUnavailableError } from './types.js';
import { BASE_FRAGMENTS, RELEASE_MANIFEST, writeReleaseFolder } from '../../testing/index.js';
import { startRegistry, REGISTRY_USER, type RegistryFixture } from '../../testing/registry-fixture.js';

describe('release references', () => {
  it('when given each transport spelling, it should parse host, repository, tag, digest and path', () => {
    const d = `sha256:${'a'.repeat(64)}`;
    assert.deepEqual(parseReference('127.0.0.1:5000/releases/kindling:4.18'), {
      kind: 'registry',
      host: '127.0.0.1:5000',
      repository: 'releases/kindling',
      tag: '4.18',
      digest: undefined,
    });
    assert.deepEqual(parseReference(`docker://quay.io/k/r@${d}`), {
      kind: 'registry',
      host: 'quay.io',
      repository: 'k/r',
      tag: undefined,
      digest: d,
    });
    assert.equal(parseReference('quay.io/k/r').tag, 'latest');
    assert.deepEqual(parseReference('oci:/tmp/a:b/layout:v1'), {
      kind: 'layout-dir',
      path: '/tmp/a:b/layout',
      tag: 'v1',
      digest: undefined,
    });
    assert.deepEqual(parseReference(`oci-archive:/tmp/r.tar@${d}`), {
      kind: 'layout-tar',
      path: '/tmp/r.tar',
      tag: undefined,
      digest: d,
    });
  });

  it('when a reference is malformed, it should refuse it as an invalid release', () => {
    for (const bad of ['', 'noslash', 'Quay.io/UPPER/case', 'host/repo@sha256:xyz', 'oci:', 'host/repo:bad tag']) {
      assert.throws(() => parseReference(bad), InvalidReleaseError, bad);
    }
  });

  it('when a pull secret and challenges are parsed, it should find credentials by host and the realm', () => {
    const creds = parsePullSecret(
      JSON.stringify({
        auths: {
          'https://r.example:5000/v1/': { auth: Buffer.from('u:p:q').toString('base64') },
          'o.example': { username: 'a', password: 'b' },
        },
      }),
    );
    assert.deepEqual(creds('r.example:5000'), { username: 'u', password: 'p:q' });
    assert.deepEqual(creds('o.example'), { username: 'a', password: 'b' });
    assert.equal(creds('x.example'), undefined);
    assert.deepEqual(parseChallenge('Bearer realm="https://a/token",service="reg",scope="repository:r:pull"'), {
      scheme: 'bearer',
      params: { realm: 'https://a/token', service: 'reg', scope: 'repository:r:pull' },
    });
  });
});

describe('release images', () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'release-'));
    await writeReleaseFolder(join(dir, 'src'));
  });
  after(() => rm(dir, { recursive: true, force: true }));

  it('when a folder is built twice, it should give the same digest', async () => {
    const a = await buildRelease(join(dir, 'src'), 'v1');
    const b = await buildRelease(join(dir, 'src'), 'v1');
    assert.equal(a.digest, b.digest);
  });

  it('when written as a layout directory and read back, it should give the manifest and the sorted fragments', async () => {
    const image = await buildRelease(join(dir, 'src'), 'v1');
    await writeLayoutDir(image, join(dir, 'layout'));
    const release = await readRelease(`oci:${join(dir, 'layout')}:v1`);
    assert.equal(release.digest, image.digest);
    assert.deepEqual(release.manifest, RELEASE_MANIFEST);
    assert.deepEqual(
      release.fragments.map((f) => f.name),
      Object.keys(BASE_FRAGMENTS).sort(),
    );
    assert.deepEqual(release.fragments[0]?.config, BASE_FRAGMENTS['00-base.json']);
    assert.equal(await resolveRelease(`oci:${join(dir, 'layout')}`), image.digest);
    const index = JSON.parse(await readFile(join(dir, 'layout', 'index.json'), 'utf8')) as {
      manifests: { annotations: Record<string, string> }[];
    };
    assert.equal(index.manifests[0]?.annotations['org.opencontainers.image.ref.name'], 'v1');
  });

  it('when written as a layout tar and read back by tag and by digest, it should give the same release', async () => {
    const image = await buildRelease(join(dir, 'src'), 'v2');
    await writeLayoutTar(image, join(dir, 'release.tar'));
    const byTag = await readRelease(`oci-archive:${join(dir, 'release.tar')}:v2`);
    const byDigest = await readRelease(`oci-archive:${join(dir, 'release.tar')}@${image.digest}`);
    assert.deepEqual(byTag, byDigest);
    assert.equal(byTag.digest, image.digest);
  });

  it('when a blob was altered, the tag is unknown or release.json is missing, it should say which', async () => {
    const image = await buildRelease(join(dir, 'src'), 'v3');
    await writeLayoutDir(image, join(dir, 'bad'));
    await assert.rejects(readRelease(`oci:${join(dir, 'bad')}:nope`), ReleaseUnavailableError);
    const layer = [...image.blobs.keys()].find((d) => d !== image.digest && image.blobs.get(d)?.[0] === 0x1f) as string;
    await writeFile(join(dir, 'bad', 'blobs', 'sha256', layer.slice(7)), gzipSync(Buffer.from('tampered')));
    await assert.rejects(readRelease(`oci:${join(dir, 'bad')}:v3`), /does not match its digest/);
    await writeFile(join(dir, 'src2-release.json'), '{}');
    await assert.rejects(buildRelease(join(dir, 'missing')), InvalidReleaseError);
  });

  it('when a later layer overrides and whites out files, it should read the merged tree', async () => {
    const { applyLayersForTest } = await layerHelpers();
    const files = await applyLayersForTest([
      [
        ['release.json', JSON.stringify(RELEASE_MANIFEST)],
        ['ignition/00-a.json', '{"ignition":{"version":"3.0.0"}}'],
        ['ignition/01-b.json', '{}'],
      ],
      [
        ['ignition/.wh.01-b.json', ''],
        ['ignition/00-a.json', '{"ignition":{"version":"3.1.0"}}'],
      ],
    ]);
    assert.deepEqual(
      files.fragments.map((f) => [f.name, f.config]),
      [['00-a.json', { ignition: { version: '3.1.0' } }]],
    );
  });
});

/** Builds an image layout with the given layers (each a list of [path, content]) and reads it. */
async function layerHelpers(): Promise<{
  applyLayersForTest: (layers: [string, string][][]) => Promise<Awaited<ReturnType<typeof readRelease>>>;
}> {
  const { sha256Digest } = await import('./digest.js');
  const { MEDIA_TYPES } = await import('./types.js');
  const tarOf = async (files: [string, string][]): Promise<Buffer> => {
    const p = pack();
    const chunks: Buffer[] = [];
    p.on('data', (c: unknown) => chunks.push(c as Buffer));
    const done = new Promise<void>((r) => p.on('end', () => r()));
    for (const [name, body] of files) p.entry({ name }, body);
    p.finalize();
    await done;
    return Buffer.concat(chunks);
  };
  return {
    async applyLayersForTest(layers) {
      const dir = await mkdtemp(join(tmpdir(), 'layers-'));
      const blobs = await Promise.all(layers.map(async (l) => gzipSync(await tarOf(l))));
      const config = Buffer.from('{}');
      const manifest = Buffer.from(
        JSON.stringify({
          schemaVersion: 2,
          mediaType: MEDIA_TYPES.ociManifest,
          config: { mediaType: MEDIA_TYPES.ociConfig, digest: sha256Digest(config), size: 2 },
          layers: blobs.map((b) => ({ mediaType: MEDIA_TYPES.ociLayerGzip, digest: sha256Digest(b), size: b.length })),
        }),
      );
      const { mkdir } = await import('node:fs/promises');
      await mkdir(join(dir, 'blobs', 'sha256'), { recursive: true });
      for (const b of [...blobs, config, manifest])
        await writeFile(join(dir, 'blobs', 'sha256', sha256Digest(b).slice(7)), b);
      await writeFile(
        join(dir, 'index.json'),
        JSON.stringify({
          schemaVersion: 2,
          manifests: [{ mediaType: MEDIA_TYPES.ociManifest, digest: sha256Digest(manifest), size: manifest.length }],
        }),
      );
      try {
        return await readRelease(`oci:${dir}`);
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    },
  };
}

describe('release images in a real registry (docker-registry, TLS, token auth)', () => {
  let registry: RegistryFixture;
  let dir: string;
  before(async () => {
    registry = await startRegistry();
    dir = await mkdtemp(join(tmpdir(), 'release-reg-'));
    await writeReleaseFolder(join(dir, 'src'));
  });
  after(async () => {
    await registry?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it('when pushed with the pull secret and pulled anonymously from a public repository, it should read the same release', async () => {
    const image = await buildRelease(join(dir, 'src'), '4.18.2');
    const credentials = parsePullSecret(registry.pullSecret);
    await pushRelease(image, registry.host, 'public/release', { ca: registry.ca.certPem, credentials });
    assert.ok(registry.tokenRequests.authenticated > 0);
    const before = registry.tokenRequests.anonymous;
    const release = await readRelease(`${registry.host}/public/release:4.18.2`, { ca: registry.ca.certPem });
    assert.equal(release.digest, image.digest);
    assert.deepEqual(release.manifest, RELEASE_MANIFEST);
    assert.equal(release.fragments.length, 2);
    assert.ok(registry.tokenRequests.anonymous > before, 'the anonymous bearer-token path was taken');
    assert.equal(
      await resolveRelease(`${registry.host}/public/release:4.18.2`, { ca: registry.ca.certPem }),
      image.digest,
    );
  });

  it('when a private repository is pulled, it should need the pull secret', async () => {
    const image = await buildRelease(join(dir, 'src'), 'private');
    const credentials = parsePullSecret(registry.pullSecret);
    await pushRelease(image, registry.host, 'private/release', { ca: registry.ca.certPem, credentials });
    await assert.rejects(
      readRelease(`${registry.host}/private/release:private`, { ca: registry.ca.certPem }),
      ReleaseUnavailableError,
    );
    const release = await readRelease(`${registry.host}/private/release:private`, {
      ca: registry.ca.certPem,
      credentials,
    });
    assert.equal(release.digest, image.digest);
    const pinned = await readRelease(`${registry.host}/private/release@${image.digest}`, {
      ca: registry.ca.certPem,
      credentials,
    });
    assert.equal(pinned.digest, image.digest);
  });

  it('when the registry CA is not trusted or the tag is unknown, it should report the release unavailable', async () => {
    await assert.rejects(readRelease(`${registry.host}/public/release:4.18.2`), ReleaseUnavailableError);
    await assert.rejects(
      readRelease(`${registry.host}/public/release:nope`, { ca: registry.ca.certPem }),
      ReleaseUnavailableError,
    );
    assert.ok(REGISTRY_USER.username);
  });
});

describe('registry answers that carry bodies', () => {
  // A host that answers every way a reference could make it: its bodies hold a marker that must never come back.
  const MARKER = 'internal-secret-7f3a';
  let server: Server;
  let host: string;
  let ca: string;
  before(async () => {
    const authority = await createCertificateAuthority('body test CA');
    const serving = await authority.issue({ commonName: 'registry', ipAddresses: ['127.0.0.1'], usage: 'server' });
    ca = authority.certPem;
    server = createServer({ cert: serving.certPem, key: serving.keyPem }, (req, res) => {
      const page = `<html>${MARKER}</html>`;
      if (req.url?.startsWith('/token')) return void res.writeHead(200, { 'content-type': 'text/html' }).end(page);
      if (req.url?.startsWith('/v2/auth/'))
        return void res
          .writeHead(401, { 'www-authenticate': `Bearer realm="https://${host}/token",service="s"` })
          .end(page);
      // Short, so a JSON parser's message would quote all of it.
      if (req.url?.startsWith('/v2/garbage/'))
        return void res.writeHead(200, { 'content-type': MEDIA_TYPES.ociManifest }).end(MARKER);
      res
        .writeHead(404, { 'content-type': 'application/json' })
        .end(JSON.stringify({ errors: [{ code: 'MANIFEST_UNKNOWN', message: MARKER }] }));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    host = `127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(() => new Promise((r) => server.close(r)));

  /** The error and everything it carries (causes included), as a log or an annotation would show it. */
  const failure = async (ref: string): Promise<{ err: Error; shown: string }> => {
    const err = await readRelease(ref, { ca }).then(
      () => assert.fail(`${ref} read`),
      (e: unknown) => e as Error,
    );
    return { err, shown: inspect(err, { depth: 10 }) };
  };

  it('when the registry answers an error status with a body, it should name the registry, the status and the step, and nothing of the body', async () => {
    const { err, shown } = await failure(`${host}/missing/release:v1`);
    assert.ok(err instanceof ReleaseUnavailableError);
    assert.equal(err.message, `fetching manifest v1 of missing/release on registry ${host} failed: HTTP 404`);
    assert.ok(!shown.includes(MARKER) && !shown.includes('MANIFEST_UNKNOWN'), shown);
  });

  it('when the token service answers a page instead of JSON, it should say so without quoting it', async () => {
    const { err, shown } = await failure(`${host}/auth/release:v1`);
    assert.ok(err instanceof ReleaseUnavailableError);
    assert.match(
      err.message,
      new RegExp(`token service of ${host.replace(/\./g, '\\.')} answered 200 with a body that is not JSON`),
    );
    assert.ok(!shown.includes(MARKER), shown);
  });

  it('when the manifest is not JSON, it should be an invalid release whose error holds none of its bytes', async () => {
    const { err, shown } = await failure(`${host}/garbage/release:v1`);
    assert.ok(err instanceof InvalidReleaseError);
    assert.equal(err.message, 'the image manifest is not JSON');
    assert.ok(!shown.includes(MARKER), shown);
  });
});

describe('kindling release build', () => {
  it('when run on a folder with --output, it should write a layout that reads back with the printed reference', async () => {
    const { main } = await import('../../../cli/src/main.js');
    const dir = await mkdtemp(join(tmpdir(), 'release-cli-'));
    try {
      await writeReleaseFolder(join(dir, 'src'));
      let out = '';
      const io = { out: (t: string) => void (out += t), err: (t: string) => void (out += t), env: {} };
      assert.equal(
        await main(['release', 'build', join(dir, 'src'), '--output', join(dir, 'r.tar'), '--tag', 'v9'], io),
        0,
        out,
      );
      const [ref, digest] = out.trim().split(' ') as [string, string];
      assert.equal(ref, `oci-archive:${join(dir, 'r.tar')}:v9`);
      assert.equal((await readRelease(ref)).digest, digest);
      assert.equal(await main(['release', 'build', join(dir, 'src')], io), 2, 'needs --output or --push');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
