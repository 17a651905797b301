import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readdir, rm, stat, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger } from '../../../support/src/logger.js';
import {
  configDigest,
  GenerationError,
  NotGeneratedYetError,
  PayloadStore,
  payloadBytes,
  type ConfigSource,
  type PayloadStoreOptions,
} from './store.js';
import { createValidator } from './validate.js';
import { BASE_FRAGMENTS, RELEASE_MANIFEST } from '../../testing/index.js';
import { ReleaseUnavailableError, type Release } from '../release/types.js';
import { joinFileBytes } from '../join.js';
import { admitRelease } from '../release/policy.js';
import { signedPayloads, type EntryRepository, type SharedPayloads, type StoredEntry } from './shared.js';
import { createEntrySeal, type EntrySeal, type RejectReason } from './signature.js';
import { ecKeyPem } from '../../testing/index.js';

const log = createLogger({ name: 'test', level: 'silent' });
const DIGEST = `sha256:${'2'.repeat(64)}`;
const release: Release = {
  digest: DIGEST,
  manifest: RELEASE_MANIFEST,
  fragments: Object.entries(BASE_FRAGMENTS).map(([name, config]) => ({ name, config })),
};
const mcDoc = (name: string, path: string, size = 10): Record<string, unknown> => ({
  apiVersion: 'machineconfiguration.openshift.io/v1',
  kind: 'MachineConfig',
  metadata: { name },
  spec: {
    config: {
      ignition: { version: '3.2.0' },
      storage: { files: [{ path, mode: 420, contents: { source: `data:,${'x'.repeat(size)}` } }] },
    },
  },
});

interface Counting {
  opts: PayloadStoreOptions;
  calls: { resolve: number; read: number; config: number };
  /** Config documents as the store gets them: by digest, read (and counted) only to generate. */
  source: (docs: unknown[] | string) => ConfigSource;
}

function options(cacheDir: string, extra: Partial<PayloadStoreOptions> = {}): Counting {
  const calls = { resolve: 0, read: 0, config: 0 };
  const source = (docs: unknown[] | string): ConfigSource => {
    const text = typeof docs === 'string' ? docs : JSON.stringify(docs);
    return { sha256: configDigest(text), read: () => Promise.resolve(text).finally(() => calls.config++) };
  };
  return {
    calls,
    source,
    opts: {
      cacheDir,
      maxBytes: 10 * 1024 * 1024,
      maxDirBytes: 1024 * 1024 * 1024,
      log,
      resolve: async (ref) => {
        calls.resolve++;
        if (ref.includes('missing')) throw new ReleaseUnavailableError('no such image');
        return DIGEST;
      },
      read: async () => {
        calls.read++;
        await new Promise((r) => setTimeout(r, 20));
        return release;
      },
      ...extra,
    },
  };
}

describe('payload store', () => {
  let dir: string;
  before(async () => (dir = await mkdtemp(join(tmpdir(), 'store-'))));
  after(() => rm(dir, { recursive: true, force: true }));

  it('when many pools ask for the same pair at once, it should generate once and share the payload', async () => {
    const { opts, calls, source } = options(join(dir, 'a'));
    const store = new PayloadStore(opts);
    await store.init();
    const config = source([mcDoc('99-a', '/etc/a')]);
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        store.ensure(i % 2 === 0 ? 'r.example/rel:1' : 'r.example/rel@' + DIGEST, config),
      ),
    );
    assert.equal(store.generations, 1);
    assert.equal(calls.read, 1);
    assert.equal(calls.config, 1, 'the config documents were read once, for the one generation');
    assert.ok(results.every((p) => p === results[0]));
    assert.match(payloadBytes(results[0]!, '3.2.0').toString(), /^\{"ignition":\{"version":"3\.2\.0"\}/);
  });

  it('when replicas share a store, it should generate on the replica that generates only, the others waiting and then reading its pin and payload', async () => {
    const entries = new Map<string, Buffer>();
    const shared: SharedPayloads = {
      where: 'memory',
      get: (name) => Promise.resolve(entries.get(name)),
      put: (name, bytes) => Promise.resolve(void entries.set(name, bytes)),
    };
    const leader = options(join(dir, 'shared-leader'), { shared, generates: () => true });
    const follower = options(join(dir, 'shared-follower'), { shared, generates: () => false, sharedRetryMs: 50 });
    const [a, b] = [new PayloadStore(leader.opts), new PayloadStore(follower.opts)];
    await Promise.all([a.init(), b.init()]);
    const config = follower.source([mcDoc('99-s', '/etc/s')]);
    await assert.rejects(
      b.ensure('r.example/rel:1', config),
      (err: unknown) => err instanceof NotGeneratedYetError && err.retryAfterMs === 50,
    );
    const generated = await a.ensure('r.example/rel:1', leader.source([mcDoc('99-s', '/etc/s')]));
    const read = await b.ensure('r.example/rel:1', config);
    assert.deepEqual([a.generations, b.generations], [1, 0]);
    assert.deepEqual(
      follower.calls,
      { resolve: 0, read: 0, config: 0 },
      'the follower neither resolved the tag nor read the release or the config',
    );
    assert.ok(read.tail.equals(generated.tail) && read.key === generated.key && read.joinAt === generated.joinAt);
    assert.deepEqual([...entries.keys()].map((k) => k.split('-')[0]).sort(), ['payload', 'pin']);
    // A third replica on an empty disk, not generating either, reads it all from the shared store.
    const third = new PayloadStore(options(join(dir, 'shared-third'), { shared, generates: () => false }).opts);
    await third.init();
    assert.ok((await third.ensure('r.example/rel:1', config)).tail.equals(generated.tail));
  });

  it("when join files are spliced into a payload, it should stay valid Ignition with them after the payload's own files, and the offset should survive a restart", async () => {
    const { opts, source } = options(join(dir, 'join'), { validate: createValidator('ignition-validate') });
    const store = new PayloadStore(opts);
    await store.init();
    const payload = await store.ensure('r.example/rel:1', source([mcDoc('99-a', '/etc/a')]));
    const joinFiles = joinFileBytes({
      server: 'https://guest.example:6443',
      caPem: '-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n',
      bootstrapToken: 'abcdef.0123456789abcdef',
    });
    const served = payloadBytes(payload, '3.3.0', joinFiles);
    const validate = createValidator('ignition-validate');
    assert.equal(await validate(served), undefined);
    const paths = (JSON.parse(served.toString()) as { storage: { files: { path: string }[] } }).storage.files.map(
      (f) => f.path,
    );
    assert.deepEqual(paths.slice(-2), ['/etc/kubernetes/pki/ca.crt', '/etc/kubernetes/bootstrap-kubeconfig']);
    assert.ok(paths.includes('/etc/a'));
    assert.equal(
      payloadBytes(payload, '3.3.0').toString().includes('bootstrap-kubeconfig'),
      false,
      'the shared bytes hold no join material',
    );
    const restarted = new PayloadStore(options(join(dir, 'join')).opts);
    await restarted.init();
    const back = await restarted.lookup(payload.key);
    assert.deepEqual(back && payloadBytes(back, '3.3.0', joinFiles), served);
  });

  it('when a config spells the join marker itself, it should refuse it as invalid config rather than splice at the wrong place', async () => {
    const { opts, source } = options(join(dir, 'marker'));
    const store = new PayloadStore(opts);
    await store.init();
    const doc = mcDoc('99-a', '/etc/a');
    (
      doc.spec as { config: { storage: { files: { contents: { source: string } }[] } } }
    ).config.storage.files[0]!.contents.source = 'data:,@@KINDLING_JOIN_MATERIAL@@';
    await assert.rejects(
      store.ensure('r.example/rel:1', source([doc])),
      (err: unknown) =>
        err instanceof GenerationError && err.reason === 'InvalidConfig' && /reserved text/.test(err.message),
    );
  });

  it('when the server restarts on the same cache directory, it should regenerate nothing and not resolve the release again', async () => {
    const first = options(join(dir, 'b'));
    const store = new PayloadStore(first.opts);
    await store.init();
    const docs = [mcDoc('99-a', '/etc/a')];
    const original = await store.ensure('r.example/rel:1', first.source(docs));
    const second = options(join(dir, 'b'));
    const restarted = new PayloadStore(second.opts);
    await restarted.init();
    const again = await restarted.ensure('r.example/rel:1', second.source(docs));
    assert.equal(restarted.generations, 0);
    assert.deepEqual(second.calls, { resolve: 0, read: 0, config: 0 });
    assert.deepEqual(payloadBytes(again, '3.3.0'), payloadBytes(original, '3.3.0'));
    assert.ok((await readdir(join(dir, 'b', 'payloads'))).every((f) => !f.endsWith('.tmp')));
  });

  it('when the payloads exceed the byte bound, it should evict from memory and serve them back from disk', async () => {
    const { opts, source } = options(join(dir, 'c'), { maxBytes: 150_000 });
    const store = new PayloadStore(opts);
    await store.init();
    const keys: string[] = [];
    for (let i = 0; i < 5; i++)
      keys.push((await store.ensure('r.example/rel:1', source([mcDoc(`99-${i}`, `/etc/f${i}`, 60_000)]))).key);
    assert.ok(store.bytesInMemory <= 150_000, `${store.bytesInMemory} bytes in memory`);
    assert.equal(store.peek(keys[0]!), undefined, 'the oldest was evicted');
    const back = await store.lookup(keys[0]!);
    assert.ok(back && back.tail.length > 60_000);
    assert.equal(store.generations, 5);
  });

  it('when many requests miss a payload that is on disk but not in memory, it should read its file once for them all', async () => {
    const first = options(join(dir, 'reads'));
    const seed = new PayloadStore(first.opts);
    await seed.init();
    const key = (await seed.ensure('r.example/rel:1', first.source([mcDoc('99-a', '/etc/a', 60_000)]))).key;
    const restarted = new PayloadStore(options(join(dir, 'reads')).opts);
    await restarted.init();
    const cached: string[] = [];
    restarted.observe({ cached: (p) => cached.push(p.key), evicted: () => undefined });
    const found = await Promise.all(Array.from({ length: 10 }, () => restarted.lookup(key)));
    assert.ok(
      found.every((p) => p !== undefined && p === found[0]),
      'one payload, one SharedArrayBuffer, for every request',
    );
    assert.deepEqual(cached, [key], 'held and announced once');
    assert.equal(await restarted.lookup(key), found[0], 'then served from memory');
  });

  it('when a payload is larger than the memory cache, it should neither hold nor announce it, and serve it from disk, one read for concurrent lookups', async () => {
    const { opts, source } = options(join(dir, 'large'), { maxBytes: 10_000 });
    const store = new PayloadStore(opts);
    await store.init();
    const cached: string[] = [];
    store.observe({ cached: (p) => cached.push(p.key), evicted: () => undefined });
    const generated = await store.ensure('r.example/rel:1', source([mcDoc('99-a', '/etc/a', 60_000)]));
    assert.deepEqual([store.bytesInMemory, cached, store.peek(generated.key)], [0, [], undefined]);
    const found = await Promise.all(Array.from({ length: 10 }, () => store.lookup(generated.key)));
    assert.ok(found.every((p) => p !== undefined && p === found[0] && p.tail.equals(generated.tail)));
    const again = await store.lookup(generated.key);
    assert.ok(again && again !== found[0] && again.tail.equals(generated.tail), 'read from disk again, later');
    assert.deepEqual([store.bytesInMemory, cached, store.generations], [0, [], 1]);
  });

  it('when the config cannot be merged, it should fail with InvalidConfig once and not try again', async () => {
    const { opts, calls, source } = options(join(dir, 'd'));
    const store = new PayloadStore(opts);
    await store.init();
    const bad = source([
      {
        kind: 'MachineConfig',
        apiVersion: 'machineconfiguration.openshift.io/v1',
        metadata: { name: 'x' },
        spec: { osImageURL: 'x' },
      },
    ]);
    for (let i = 0; i < 3; i++)
      await assert.rejects(
        store.ensure('r.example/rel:1', bad),
        (err: unknown) => err instanceof GenerationError && err.reason === 'InvalidConfig',
      );
    assert.equal(calls.read, 1);
    await assert.rejects(
      store.ensure('r.example/rel:1', source('{not json')),
      (err: unknown) => err instanceof GenerationError && err.reason === 'InvalidConfig',
    );
  });

  it('when the release cannot be reached, it should fail with ReleaseUnavailable and try again next time', async () => {
    const { opts, calls, source } = options(join(dir, 'e'));
    const store = new PayloadStore(opts);
    await store.init();
    for (let i = 0; i < 2; i++)
      await assert.rejects(
        store.ensure('r.example/missing:1', source([])),
        (err: unknown) => err instanceof GenerationError && err.reason === 'ReleaseUnavailable',
      );
    assert.equal(calls.resolve, 2);
  });

  it('when the policy refuses the reference, it should fail with InvalidConfig before resolving, even for a payload pinned and on disk under a wider policy', async () => {
    const wide = options(join(dir, 'policy'));
    const store = new PayloadStore(wide.opts);
    await store.init();
    const docs = [mcDoc('99-a', '/etc/a')];
    await store.ensure('oci:/srv/layout:v1', wide.source(docs));
    const narrow = options(join(dir, 'policy'), {
      admit: (ref) => admitRelease(ref, { allowLocal: false, registries: new Set(['r.example']) }),
    });
    const restarted = new PayloadStore(narrow.opts);
    await restarted.init();
    for (let i = 0; i < 2; i++) {
      await assert.rejects(
        restarted.ensure('oci:/srv/layout:v1', narrow.source(docs)),
        (err: unknown) =>
          err instanceof GenerationError && err.reason === 'InvalidConfig' && /refuses/.test(err.message),
      );
    }
    await assert.rejects(
      restarted.ensure('10.1.2.3:5000/rel:1', narrow.source(docs)),
      (err: unknown) =>
        err instanceof GenerationError &&
        err.reason === 'InvalidConfig' &&
        /registry 10\.1\.2\.3:5000 is not in/.test(err.message),
    );
    assert.deepEqual(
      narrow.calls,
      { resolve: 0, read: 0, config: 0 },
      'nothing resolved, read or served for a refused reference',
    );
    assert.ok(
      (await restarted.ensure('r.example/rel:1', narrow.source(docs))).tail.length > 0,
      'an allowed registry still generates',
    );
  });

  it('when ignition-validate reports a problem with the merged payload, it should fail with its report', async () => {
    const { opts, source } = options(join(dir, 'f'), { validate: createValidator() });
    const store = new PayloadStore(opts);
    await store.init();
    const typo = source([
      { ...mcDoc('99-typo', '/etc/x'), spec: { config: { ignition: { version: '3.2.0' }, stroage: { files: [] } } } },
    ]);
    await assert.rejects(
      store.ensure('r.example/rel:1', typo),
      (err: unknown) =>
        err instanceof GenerationError && err.reason === 'InvalidConfig' && /Unused key stroage/.test(err.message),
    );
    const ok = await store.ensure('r.example/rel:1', source([mcDoc('99-a', '/etc/a')]));
    assert.ok(ok.tail.length > 0);
  });

  it('when the config documents read for a generation are not the ones the digest names, it should fail and generate nothing', async () => {
    const { opts, source } = options(join(dir, 'g'));
    const store = new PayloadStore(opts);
    await store.init();
    const changed: ConfigSource = {
      ...source([mcDoc('99-a', '/etc/a')]),
      read: () => Promise.resolve(JSON.stringify([mcDoc('99-b', '/etc/b')])),
    };
    await assert.rejects(
      store.ensure('r.example/rel:1', changed),
      (err: unknown) =>
        err instanceof GenerationError && err.reason === 'ReleaseUnavailable' && /config changed/.test(err.message),
    );
    assert.deepEqual(await readdir(join(dir, 'g', 'payloads')), []);
  });

  it('when the payload files exceed the directory budget, it should prune the least recently used, at start and after each write', async () => {
    const cacheDir = join(dir, 'h');
    const { opts, source } = options(cacheDir, { maxDirBytes: 150_000 });
    const files = join(cacheDir, 'payloads');
    const seed = new PayloadStore(opts);
    await seed.init();
    // Three ~60 KB payloads under a 150 KB budget: the third write prunes the least recently used.
    const [a, b] = [
      await seed.ensure('r.example/rel:1', source([mcDoc('99-a', '/etc/a', 60_000)])),
      await seed.ensure('r.example/rel:1', source([mcDoc('99-b', '/etc/b', 60_000)])),
    ];
    // `a` was served after `b` (a restart reads the order from the mtimes).
    await utimes(join(files, b.key), new Date(Date.now() - 3_600_000), new Date(Date.now() - 3_600_000));
    await utimes(join(files, a.key), new Date(Date.now() - 60_000), new Date(Date.now() - 60_000));
    await writeFile(join(files, `${a.key}.0123.tmp`), 'half a payload');
    const restarted = new PayloadStore(opts);
    await restarted.init();
    assert.deepEqual((await readdir(files)).sort(), [a.key, b.key].sort(), "a crash's temporary file removed at start");
    const c = await restarted.ensure('r.example/rel:1', source([mcDoc('99-c', '/etc/c', 60_000)]));
    assert.deepEqual((await readdir(files)).sort(), [a.key, c.key].sort(), 'the least recently used payload pruned');
    assert.ok(restarted.bytesOnDisk <= 150_000, `${restarted.bytesOnDisk} bytes on disk`);
    assert.equal(restarted.bytesOnDisk, (await stat(join(files, a.key))).size + (await stat(join(files, c.key))).size);
    // A budget smaller than what is there prunes at start, oldest first.
    const tight = new PayloadStore({ ...opts, maxDirBytes: 100_000 });
    await tight.init();
    assert.deepEqual(await readdir(files), [c.key]);
  });
});

/** A repository anyone with push rights writes to: what the leader pushed, and what an attacker pushes over it. */
function memoryRepository(): EntryRepository & { entries: Map<string, StoredEntry> } {
  const entries = new Map<string, StoredEntry>();
  return {
    entries,
    where: 'memory',
    get: (name) => Promise.resolve(entries.get(name)),
    put: (name, entry) => Promise.resolve(void entries.set(name, entry)),
  };
}

describe('payload store sharing through a repository others can push to', () => {
  let dir: string;
  before(async () => (dir = await mkdtemp(join(tmpdir(), 'signed-'))));
  after(() => rm(dir, { recursive: true, force: true }));

  const REF = 'r.example/rel:1';
  const EVIL = Buffer.from('3.0.0 0\n,"storage":{"files":[{"path":"/etc/evil","contents":{"source":"data:,owned"}}]}}');
  const docs = [mcDoc('99-s', '/etc/s')];

  /** A replica whose shared store verifies with `seal`, counting what it refuses. */
  function replica(
    name: string,
    repository: EntryRepository,
    seal: EntrySeal,
    generates: boolean,
  ): { store: PayloadStore; rejected: RejectReason[]; counting: Counting } {
    const rejected: RejectReason[] = [];
    const shared = signedPayloads(repository, seal, { metrics: { sharedRejected: (r) => rejected.push(r) }, log });
    const counting = options(join(dir, name), { shared, generates: () => generates, sharedRetryMs: 50 });
    return { store: new PayloadStore(counting.opts), rejected, counting };
  }

  interface Pushed {
    repository: ReturnType<typeof memoryRepository>;
    seal: EntrySeal;
    key: string;
    otherKey: string;
  }

  /** The leader's entries, pushed and signed: the pin and payload of `docs`, and a payload of another config. */
  async function pushedByLeader(name: string): Promise<Pushed> {
    const repository = memoryRepository();
    const seal = await createEntrySeal(ecKeyPem());
    const leader = replica(`${name}-leader`, repository, seal, true);
    await leader.store.init();
    const key = (await leader.store.ensure(REF, leader.counting.source(docs))).key;
    const otherKey = (await leader.store.ensure(REF, leader.counting.source([mcDoc('99-o', '/etc/o')]))).key;
    return { repository, seal, key, otherKey };
  }

  it('when the leader pushed a pin and a payload, it should have signed both and another replica should serve them', async () => {
    const { repository, seal, key } = await pushedByLeader('good');
    assert.ok([...repository.entries.values()].every((e) => e.signature !== undefined));
    const follower = replica('good-follower', repository, seal, false);
    await follower.store.init();
    const served = await follower.store.ensure(REF, follower.counting.source(docs));
    assert.equal(served.key, key);
    assert.deepEqual(follower.rejected, []);
    assert.equal(follower.store.generations, 0);
  });

  const tampered: [string, RejectReason, (pushed: Pushed) => Promise<StoredEntry>][] = [
    [
      'foreign bytes under the tag, with its genuine signature',
      'other_bytes',
      async ({ seal, key }) => ({
        bytes: EVIL,
        signature: await seal.sign(`payload-${key}`, Buffer.from('what the leader pushed')),
      }),
    ],
    [
      'a genuine payload of another config under the tag',
      'other_entry',
      ({ repository, otherKey }) => Promise.resolve(repository.entries.get(`payload-${otherKey}`) ?? { bytes: EVIL }),
    ],
    [
      'foreign bytes signed with another key',
      'bad_signature',
      async ({ key }) => ({
        bytes: EVIL,
        signature: await (await createEntrySeal(ecKeyPem())).sign(`payload-${key}`, EVIL),
      }),
    ],
    ['foreign bytes without a signature', 'unsigned', () => Promise.resolve({ bytes: EVIL })],
  ];
  for (const [what, reason, forge] of tampered) {
    it(`when someone pushes ${what}, it should refuse it (${reason}), serve and cache nothing of it, and the leader should push its own again`, async () => {
      const pushed = await pushedByLeader(reason);
      const { repository, seal, key } = pushed;
      repository.entries.set(`payload-${key}`, await forge(pushed));
      const follower = replica(`${reason}-follower`, repository, seal, false);
      await follower.store.init();
      await assert.rejects(follower.store.ensure(REF, follower.counting.source(docs)), NotGeneratedYetError);
      assert.deepEqual(follower.rejected, [reason]);
      assert.equal(await follower.store.lookup(key), undefined, 'nothing of it in memory or on disk');
      assert.deepEqual(await readdir(join(dir, `${reason}-follower`, 'payloads')), []);
      // A leader that does not hold the payload (a new pod) treats the entry as a miss: it generates and pushes.
      const leader = replica(`${reason}-new-leader`, repository, seal, true);
      await leader.store.init();
      const genuine = await leader.store.ensure(REF, leader.counting.source(docs));
      assert.deepEqual([leader.store.generations, leader.rejected], [1, [reason]]);
      const served = await follower.store.ensure(REF, follower.counting.source(docs));
      assert.ok(served.tail.equals(genuine.tail) && served.tail.includes('/etc/s'), 'the genuine payload of docs');
    });
  }

  it('when someone pushes a pin of another digest signed with another key, it should refuse it and resolve nothing', async () => {
    const { repository, seal } = await pushedByLeader('pin');
    const pin = [...repository.entries.keys()].find((k) => k.startsWith('pin-')) ?? '';
    const evilDigest = Buffer.from(`sha256:${'6'.repeat(64)}`);
    repository.entries.set(pin, {
      bytes: evilDigest,
      signature: await (await createEntrySeal(ecKeyPem())).sign(pin, evilDigest),
    });
    const follower = replica('pin-follower', repository, seal, false);
    await follower.store.init();
    await assert.rejects(follower.store.ensure(REF, follower.counting.source(docs)), NotGeneratedYetError);
    assert.deepEqual(follower.rejected, ['bad_signature']);
    assert.deepEqual(await readdir(join(dir, 'pin-follower', 'pins')), [], 'the foreign pin is not cached');
  });
});
