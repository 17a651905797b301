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
import { Registry } from 'prom-client';
import { startCluster, eventually, installKindlingCrds, type Cluster } from '../../test/bed/src/index.js';
import { createLogger } from '../../support/src/logger.js';
import { SECRET_KEYS } from '../../api/src/keys.js';
import { TokenSecretController, type ControllerOptions } from './controller.js';
import { PayloadStore } from './payload/store.js';
import { readRelease, resolveRelease } from './release/open.js';
import { buildRelease, writeLayoutDir } from './release/build.js';
import { TokenIndex } from './token-index.js';
import { createTokenAuthority, type TokenAuthority } from './tokens.js';
import { ecKeyPem, writeReleaseFolder } from '../testing/index.js';
import { ensureNodePool, ownedTokenSecret } from '../testing/pools.js';
import { createIgnitionMetrics } from './metrics.js';
import type { GuestJoin } from './join.js';
import { NODEPOOL_API_VERSION, NODEPOOL_PLURAL, type NodePool } from '../../api/src/nodepool.js';

const NS = 'clusters';
/** Another tenant's namespace, not served by the controllers here. */
const OTHER_NS = 'other-tenant';
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

/** A pool's token Secret as the controller writes it, then edited by hand. */
function handWritten(
  pool: NodePool,
  release: string,
  config: unknown[],
  edit: (s: k8s.V1Secret) => void,
): k8s.V1Secret {
  const { secret } = ownedTokenSecret(pool, release, config);
  edit(secret);
  return secret;
}

/** An edit that points the Secret's owner reference at another UID. */
const ownedBy =
  (uid: string) =>
  (s: k8s.V1Secret): void => {
    for (const ref of s.metadata?.ownerReferences ?? []) ref.uid = uid;
  };

/** Join material without a guest: this test counts the bootstrap tokens asked for (server.cluster.test.ts has a guest). */
function countingJoin(): { guestJoin: GuestJoin; minted: string[] } {
  const minted: string[] = [];
  const fake: Pick<GuestJoin, 'mint' | 'revoke'> = {
    mint: (o) => {
      minted.push(o.pool);
      return Promise.resolve({ bootstrapToken: 'abcdef.0123456789abcdef', server: 'https://guest', caPem: 'ca' });
    },
    revoke: () => Promise.resolve(),
  };
  return { guestJoin: fake, minted };
}

/** The refusals counted, by reason. */
async function refusalsOf(registry: Registry): Promise<Record<string, number>> {
  const refused = await registry.getSingleMetric('kindling_ignition_token_secrets_refused_total')?.get();
  return Object.fromEntries((refused?.values ?? []).map((v) => [String(v.labels.reason), v.value]));
}

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
    await core.createNamespace({ body: { metadata: { name: OTHER_NS } } });
    await installKindlingCrds(cluster);
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

  /**
   * A token Secret of a pool (created if need be) as the nodepool-controller writes it, holding a token already
   * (as a leader would have written it) and 100 KiB of config; `variant` makes another config, so another hash.
   */
  async function tokenSecret(pool: string, variant: string): Promise<{ name: string; token: string; hash: string }> {
    const owner = await ensureNodePool(cluster.kubeConfig, { namespace: NS, name: pool, release });
    const { hash, secret } = ownedTokenSecret(owner, release, [{ ...MOTD, metadata: { name: `99-motd-${variant}` } }]);
    const { token } = await authority.mint({ pool: `${NS}/${pool}`, hash, ttlMs: 3_600_000 });
    secret.data = { ...secret.data, [SECRET_KEYS.token]: Buffer.from(token).toString('base64') };
    await core.createNamespacedSecret({ namespace: NS, body: secret });
    return { name: secret.metadata?.name as string, token, hash };
  }

  it('when it starts on existing Secrets, it should list their metadata only, read one on demand with its payload ready, then read the rest and follow changes from the watch', async () => {
    const secrets = [
      await tokenSecret('workers', 'h1'),
      await tokenSecret('workers', 'h2'),
      await tokenSecret('infra', 'h1'),
    ];
    const { index, controller } = await tokenController('cache');
    try {
      await controller.start();
      // Nothing has been read yet: a read is a round trip, and this runs right after the list.
      assert.deepEqual(
        index.unloadedKeys().sort(),
        secrets.map((s) => `${NS}/${s.name}`).sort(),
        'listed without their data',
      );
      assert.equal(index.find(secrets[0]?.token as string, Date.now()), undefined);
      await controller.load(`${NS}/workers`, secrets[0]?.hash as string);
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
      const infra = secrets[2] as { name: string; token: string; hash: string };
      const { token: next } = await authority.mint({ pool: `${NS}/infra`, hash: infra.hash, ttlMs: 3_600_000 });
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
    const lazy = await ensureNodePool(cluster.kubeConfig, { namespace: NS, name: 'lazy', release });
    const { secret } = ownedTokenSecret(lazy, release, [MOTD]);
    const name = secret.metadata?.name as string;
    await core.createNamespacedSecret({ namespace: NS, body: secret });
    const { index, controller } = await tokenController('cache-lead');
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

  it('when hand-written token Secrets name a release the pool does not use, no owner, an owner of another namespace or a stale UID, it should mint nothing, generate nothing, serve none of their tokens, and say why in a Warning Event', async () => {
    const pool = await ensureNodePool(cluster.kubeConfig, { namespace: NS, name: 'inplace', release });
    const elsewhere = await ensureNodePool(cluster.kubeConfig, { namespace: OTHER_NS, name: 'inplace', release });
    const broken = `${release}-broken-kubelet`;
    const other = (name: string): unknown[] => [{ ...MOTD, metadata: { name } }];
    const cases = [
      { secret: handWritten(pool, broken, [MOTD], () => undefined), reason: 'ReleaseNotOfPool' },
      {
        secret: handWritten(pool, release, other('no-owner'), (s) => delete s.metadata?.ownerReferences),
        reason: 'NoNodePoolOwner',
      },
      {
        secret: handWritten(pool, release, other('foreign-owner'), ownedBy(elsewhere.metadata.uid ?? '')),
        reason: 'NodePoolUidMismatch',
      },
      {
        secret: handWritten(pool, release, other('stale-uid'), ownedBy('00000000-0000-0000-0000-000000000000')),
        reason: 'NodePoolUidMismatch',
      },
    ];
    // The apiserver's garbage collector is not running here: a dangling owner reference stays as written.
    for (const c of cases) await core.createNamespacedSecret({ namespace: NS, body: c.secret });
    const { index, store, registry, minted, stop } = await leadingController('cache-refused');
    try {
      for (const c of cases) {
        const name = c.secret.metadata?.name as string;
        const event = await eventually(`the ${c.reason} Event of ${name}`, async () => {
          const events = await core.listNamespacedEvent({
            namespace: NS,
            fieldSelector: `involvedObject.name=${name},reason=${c.reason}`,
          });
          return events.items[0];
        });
        assert.equal(event.type, 'Warning');
      }
      // The pool's own Secret, after them, is minted: by then the refused ones had every chance.
      const own = ownedTokenSecret(pool, release, other('own'));
      await core.createNamespacedSecret({ namespace: NS, body: own.secret });
      await eventually(
        'the own Secret minted',
        async () =>
          (await core.readNamespacedSecret({ name: own.secret.metadata?.name as string, namespace: NS })).data?.[
            SECRET_KEYS.token
          ],
      );
      for (const c of cases) {
        const live = await core.readNamespacedSecret({ name: c.secret.metadata?.name as string, namespace: NS });
        assert.equal(live.data?.[SECRET_KEYS.token], undefined, `no token minted for ${c.reason}`);
        assert.equal(index.get(`${NS}/${live.metadata?.name}`), undefined, `${c.reason}: not served`);
      }
      assert.deepEqual(minted, ['inplace'], 'one bootstrap token, for the own Secret only');
      const ownKey = `${NS}/${own.secret.metadata?.name}`;
      await eventually('the own payload generated', () =>
        Promise.resolve(index.get(ownKey)?.payload.state === 'ready' ? true : undefined),
      );
      // The earlier tests' Secrets of the namespace are served here too, each of its own config: one generation
      // per Secret served, none for a refused one.
      assert.equal(store.generations, [...index.entries()].length);
      assert.deepEqual(await refusalsOf(registry), { ReleaseNotOfPool: 1, NoNodePoolOwner: 1, NodePoolUidMismatch: 2 });
    } finally {
      await stop();
    }
  });

  it("when a pool's release changes, it should decide again on that pool's token Secrets, admitting and refusing them, and leave another pool's as they were", async () => {
    const next = `${release}-next`;
    const moving = await ensureNodePool(cluster.kubeConfig, { namespace: NS, name: 'moving', release });
    const still = await ensureNodePool(cluster.kubeConfig, { namespace: NS, name: 'still', release });
    const secrets = [ownedTokenSecret(moving, next, [MOTD]).secret, ownedTokenSecret(still, next, [MOTD]).secret];
    for (const body of secrets) await core.createNamespacedSecret({ namespace: NS, body });
    const [movingKey, stillKey] = secrets.map((s) => `${NS}/${s.metadata?.name}`) as [string, string];
    const { index, stop } = await leadingController('cache-moving');
    const custom = cluster.kubeConfig.makeApiClient(k8s.CustomObjectsApi);
    const [group = '', version = ''] = NODEPOOL_API_VERSION.split('/');
    const moveTo = (image: string): Promise<unknown> =>
      custom.patchNamespacedCustomObject(
        {
          group,
          version,
          namespace: NS,
          plural: NODEPOOL_PLURAL,
          name: 'moving',
          body: { spec: { release: { image } } },
        },
        k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
      );
    const served = (key: string): Promise<true | undefined> =>
      Promise.resolve(index.get(key) === undefined ? undefined : true);
    const refused = (key: string): Promise<true | undefined> =>
      Promise.resolve(index.get(key) === undefined ? true : undefined);
    try {
      for (const name of secrets.map((x) => x.metadata?.name as string))
        await eventually(`${name} refused: its pool uses another release`, async () => {
          const events = await core.listNamespacedEvent({
            namespace: NS,
            fieldSelector: `involvedObject.name=${name},reason=ReleaseNotOfPool`,
          });
          return events.items[0];
        });
      await moveTo(next);
      await eventually("the moving pool's Secret served once its pool names its release", () => served(movingKey));
      assert.equal(index.get(stillKey), undefined, "the other pool's Secret still refused");
      await moveTo(release);
      await eventually("the moving pool's Secret refused again once its pool moved back", () => refused(movingKey));
      assert.equal(index.get(stillKey), undefined);
    } finally {
      await stop();
    }
  });

  /** A controller on its own index and cache, leading, that counts its refusals and the bootstrap tokens it asks for. */
  async function leadingController(cache: string): Promise<{
    index: TokenIndex;
    store: PayloadStore;
    registry: Registry;
    minted: string[];
    stop: () => Promise<void>;
  }> {
    const registry = new Registry();
    const { guestJoin, minted } = countingJoin();
    const { index, store, controller } = await tokenController(cache, {
      metrics: createIgnitionMetrics(registry),
      join: guestJoin,
    });
    await controller.start();
    const unlead = controller.lead();
    const stop = async (): Promise<void> => {
      await unlead();
      await controller.stop();
    };
    return { index, store, registry, minted, stop };
  }

  /** A controller of the namespace on its own index and payload cache (`cache` under the test's folder), not started. */
  async function tokenController(
    cache: string,
    more: Partial<ControllerOptions> = {},
  ): Promise<{ index: TokenIndex; store: PayloadStore; controller: TokenSecretController }> {
    const index = new TokenIndex();
    const store = new PayloadStore({
      cacheDir: join(dir, cache),
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
      ...more,
    });
    return { index, store, controller };
  }
});
