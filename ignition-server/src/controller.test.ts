/**
 * The token-Secret controller against a real apiserver: Secrets listed by their metadata only (their config
 * is 100 KiB or more each), their data read on demand or in the background, changes taken from the watch.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as k8s from '#k8s';
import { startCluster, eventually, type Cluster } from '../../test/bed/src/index.js';
import { createLogger } from '../../support/src/logger.js';
import { LABELS, SECRET_KEYS, tokenSecretName } from '../../api/src/keys.js';
import { TokenSecretController } from './controller.js';
import { PayloadStore } from './payload/store.js';
import { readRelease, resolveRelease } from './release/open.js';
import { buildRelease, writeLayoutDir } from './release/build.js';
import { TokenIndex } from './token-index.js';
import { createTokenAuthority, type TokenAuthority } from './tokens.js';
import { ecKeyPem, writeReleaseFolder } from '../testing/index.js';

const NS = 'clusters';
const MOTD = {
  apiVersion: 'machineconfiguration.openshift.io/v1',
  kind: 'MachineConfig',
  metadata: { name: '99-motd' },
  spec: {
    config: {
      ignition: { version: '3.2.0' },
      storage: { files: [{ path: '/etc/motd', mode: 420, contents: { source: `data:,${'m'.repeat(100 * 1024)}` } }] },
    },
  },
};

describe('token-Secret controller on the test bed', { timeout: 180_000 }, () => {
  let cluster: Cluster;
  let dir: string;
  let core: k8s.CoreV1Api;
  let authority: TokenAuthority;
  let release: string;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'token-controller-'));
    cluster = await startCluster({ name: 'mgmt', controllerManager: false });
    core = cluster.kubeConfig.makeApiClient(k8s.CoreV1Api);
    await core.createNamespace({ body: { metadata: { name: NS } } });
    authority = await createTokenAuthority(ecKeyPem());
    await writeLayoutDir(
      await buildRelease(await writeReleaseFolder(join(dir, 'release-src')), 'v1'),
      join(dir, 'release'),
    );
    release = `oci:${join(dir, 'release')}:v1`;
  });

  after(async () => {
    await cluster?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  /** A token Secret holding a token already (as a leader would have written it) and 100 KiB of config. */
  async function tokenSecret(pool: string, hash: string): Promise<{ name: string; token: string }> {
    const { token } = await authority.mint({ pool: `${NS}/${pool}`, hash, ttlMs: 3_600_000 });
    const name = tokenSecretName(pool, hash);
    await core.createNamespacedSecret({
      namespace: NS,
      body: {
        metadata: {
          name,
          labels: { [LABELS.tokenSecret]: 'true', [LABELS.nodePool]: pool, [LABELS.configHash]: hash },
          annotations: {},
        },
        stringData: {
          [SECRET_KEYS.release]: release,
          [SECRET_KEYS.config]: JSON.stringify([MOTD]),
          [SECRET_KEYS.pool]: `${NS}/${pool}`,
          [SECRET_KEYS.token]: token,
        },
      },
    });
    return { name, token };
  }

  it('when it starts on existing Secrets, it should list their metadata only, read one on demand with its payload ready, then read the rest and follow changes from the watch', async () => {
    const secrets = [
      await tokenSecret('workers', 'h1'),
      await tokenSecret('workers', 'h2'),
      await tokenSecret('infra', 'h1'),
    ];
    const index = new TokenIndex();
    const store = new PayloadStore({
      cacheDir: join(dir, 'cache'),
      maxBytes: 64 * 1024 * 1024,
      maxDirBytes: 64 * 1024 * 1024,
      resolve: (ref) => resolveRelease(ref),
      read: (ref, digest) => readRelease(ref, {}, digest),
      log: createLogger({ name: 'test', level: 'silent' }),
    });
    await store.init();
    const controller = new TokenSecretController({
      kubeConfig: cluster.kubeConfig,
      log: createLogger({ name: 'test', level: 'silent' }),
      authority,
      index,
      store,
      ttlMs: 3_600_000,
      namespaces: [NS],
    });
    try {
      await controller.start();
      // Nothing has been read yet: a read is a round trip, and this runs right after the list.
      assert.deepEqual(
        index.unloadedKeys().sort(),
        secrets.map((s) => `${NS}/${s.name}`).sort(),
        'listed without their data',
      );
      assert.equal(index.find(secrets[0]?.token as string, Date.now()), undefined);
      await controller.load(`${NS}/workers`, 'h1');
      const entry = index.find(secrets[0]?.token as string, Date.now());
      assert.equal(entry?.secret.key, `${NS}/${secrets[0]?.name}`, 'read on demand: its token is known');
      assert.equal(entry?.payload.state, 'ready', 'and its payload is ready');
      await eventually(
        'every Secret read in the background',
        () =>
          Promise.resolve(
            index.unloadedKeys().length === 0 && secrets.every((s) => index.find(s.token, Date.now()))
              ? true
              : undefined,
          ),
        60_000,
      );
      // A rotation written by someone else arrives whole through the watch: the new token is known, no read.
      const { token: next } = await authority.mint({ pool: `${NS}/infra`, hash: 'h1', ttlMs: 3_600_000 });
      const infra = secrets[2] as { name: string; token: string };
      await core.patchNamespacedSecret(
        {
          name: infra.name,
          namespace: NS,
          body: {
            data: {
              [SECRET_KEYS.token]: Buffer.from(next).toString('base64'),
              [SECRET_KEYS.rotatedToken]: Buffer.from(infra.token).toString('base64'),
            },
          },
        },
        k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
      );
      await eventually(
        'the rotated token known',
        () => Promise.resolve(index.find(next, Date.now()) ? true : undefined),
        30_000,
      );
      assert.ok(index.find(infra.token, Date.now()), 'the previous token stays valid');
      await core.deleteNamespacedSecret({ name: infra.name, namespace: NS });
      await eventually(
        "the deleted Secret's tokens refused",
        () => Promise.resolve(index.find(next, Date.now()) ? undefined : true),
        30_000,
      );
    } finally {
      await controller.stop();
    }
  });

  it('when it leads, it should read a Secret known by metadata only before minting its token', async () => {
    const name = tokenSecretName('lazy', 'h1');
    await core.createNamespacedSecret({
      namespace: NS,
      body: {
        metadata: {
          name,
          labels: { [LABELS.tokenSecret]: 'true', [LABELS.nodePool]: 'lazy', [LABELS.configHash]: 'h1' },
        },
        stringData: {
          [SECRET_KEYS.release]: release,
          [SECRET_KEYS.config]: JSON.stringify([MOTD]),
          [SECRET_KEYS.pool]: `${NS}/lazy`,
        },
      },
    });
    const index = new TokenIndex();
    const store = new PayloadStore({
      cacheDir: join(dir, 'cache-lead'),
      maxBytes: 64 * 1024 * 1024,
      maxDirBytes: 64 * 1024 * 1024,
      resolve: (ref) => resolveRelease(ref),
      read: (ref, digest) => readRelease(ref, {}, digest),
      log: createLogger({ name: 'test', level: 'silent' }),
    });
    await store.init();
    const controller = new TokenSecretController({
      kubeConfig: cluster.kubeConfig,
      log: createLogger({ name: 'test', level: 'silent' }),
      authority,
      index,
      store,
      ttlMs: 3_600_000,
      namespaces: [NS],
    });
    await controller.start();
    const stop = controller.lead();
    try {
      const token = await eventually(
        'a minted token',
        async () => {
          const data = (await core.readNamespacedSecret({ name, namespace: NS })).data?.[SECRET_KEYS.token];
          return data === undefined ? undefined : Buffer.from(data, 'base64').toString();
        },
        60_000,
      );
      assert.equal((await authority.verify(token))?.pool, `${NS}/lazy`);
      await eventually(
        'the minted token served by this replica',
        () => Promise.resolve(index.find(token, Date.now()) ? true : undefined),
        30_000,
      );
    } finally {
      await stop();
      await controller.stop();
    }
  });
});
