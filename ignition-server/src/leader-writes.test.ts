import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type * as k8s from '#k8s';
import { SECRET_KEYS } from '../../api/src/keys.js';
import { createLogger } from '../../support/src/logger.js';
import type { Applier } from '../../support/src/apply.js';
import { WorkQueue } from '../../support/src/queue.js';
import { manualClock, type ManualClock } from '../../support/testing/index.js';
import { LeaderWrites, retiredSecret, type Refused } from './leader-writes.js';
import { BootstrapRevocations } from './revocations.js';
import { TokenIndex, type TokenSecret, type TokenSecretEntry } from './token-index.js';
import { createTokenAuthority } from './tokens.js';
import type { GuestJoin } from './join.js';
import type { TokenSecretEvents } from './events.js';
import { PATCH_SETTLED_MS, RECHECK_MS } from './unmint-decision.js';
import { ecKeyPem } from '../testing/index.js';

const TTL_MS = 3_600_000;

const tokenSecret = (over: Partial<TokenSecret> = {}): TokenSecret => ({
  key: 'ns/tok',
  namespace: 'ns',
  name: 'tok',
  uid: 'u1',
  pool: 'ns/pool',
  hash: 'h1',
  release: 'r',
  configSha256: 'c',
  inputsHash: 'h1',
  cluster: 'guest',
  resourceVersion: '1',
  ...over,
});

type PatchBody = { metadata: { resourceVersion: string }; data: Record<string, string> };
/**
 * How the next patch fails: a 409, a 500 or a connection reset after or before the write was stored, or `late`:
 * the client gives up (a reset) while the apiserver still holds the patch, to commit it when the test says.
 */
type Failure = 'conflict' | 'server-error' | 'reset-after-write' | 'reset-before-write' | 'late' | undefined;

interface FakeApiserver {
  core: k8s.CoreV1Api;
  applier: Pick<Applier, 'mergePatch'>;
  patches: PatchBody[];
  /** What each patch named. */
  targets: string[];
  /** Reads of the Secret (read-backs). */
  reads: { count: number };
  /** The preconditions of each delete of the Secret. */
  deletes: unknown[];
  fail: (how: Failure) => void;
  /** Someone else writes the Secret: its version moves on. */
  bump: () => void;
  /** The patch held by a `late` failure commits now, if its precondition still holds. */
  commitLate: () => void;
  remove: () => void;
}

/**
 * The management apiserver's side of one Secret: a merge patch is refused (409) unless it carries the stored
 * resourceVersion; `fail` makes the next patch fail.
 */
function fakeApiserver(storedVersion: number): FakeApiserver {
  let version = storedVersion;
  let failure: Failure;
  let held: PatchBody | undefined;
  let gone = false;
  const data: Record<string, string> = {};
  const patches: PatchBody[] = [];
  const targets: string[] = [];
  const reads = { count: 0 };
  const deletes: unknown[] = [];
  const reset = (): Error => Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' });
  const commit = (body: PatchBody): boolean => {
    if (gone || body.metadata.resourceVersion !== String(version)) return false;
    Object.assign(data, body.data);
    version++;
    return true;
  };
  const applier = {
    mergePatch: async <T>(target: k8s.KubernetesObject, body: PatchBody): Promise<T> => {
      targets.push(`${target.kind} ${target.metadata?.namespace}/${target.metadata?.name}`);
      patches.push(body);
      const how = failure;
      failure = undefined;
      if (how === 'late') held = body;
      if (how === 'reset-before-write' || how === 'late') throw reset();
      if (how === 'server-error') throw Object.assign(new Error('etcdserver: request timed out'), { code: 500 });
      if (how === 'conflict' || !commit(body))
        throw Object.assign(new Error('the object has been modified'), { code: 409 });
      if (how === 'reset-after-write') throw reset();
      return { metadata: { resourceVersion: String(version) }, data: { ...data } } as T;
    },
  };
  const core = {
    readNamespacedSecret: async (): Promise<k8s.V1Secret> => {
      reads.count++;
      if (gone) throw Object.assign(new Error('not found'), { code: 404 });
      return { metadata: { resourceVersion: String(version) }, data: { ...data } };
    },
    deleteNamespacedSecret: async ({ body }: { body: { preconditions: unknown } }): Promise<void> => {
      deletes.push(body.preconditions);
    },
  };
  return {
    core: core as unknown as k8s.CoreV1Api,
    applier,
    patches,
    targets,
    reads,
    deletes,
    fail: (how) => void (failure = how),
    bump: () => void version++,
    commitLate: () => void (held && commit(held)),
    remove: () => void (gone = true),
  };
}

/** The guest's bootstrap tokens: minted ones, and those deleted again. */
function fakeGuest(): { join: GuestJoin; minted: string[]; revoked: string[] } {
  const minted: string[] = [];
  const revoked: string[] = [];
  const join: GuestJoin = {
    mint: async () => {
      const bootstrapToken = `abcdef.${String(minted.length).padStart(16, '0')}`;
      minted.push(bootstrapToken);
      return { server: 'https://guest:6443', caPem: 'CA', bootstrapToken };
    },
    revoke: async ({ tokens }) => void revoked.push(...tokens),
  };
  return { join, minted, revoked };
}

interface Leader {
  writes: LeaderWrites;
  revocations: BootstrapRevocations;
  copy: { secret: TokenSecret };
  index: TokenIndex;
  entry: TokenSecretEntry;
  clock: ManualClock;
}

/**
 * A leader whose informer copy of the Secret is whatever `copy.secret` holds, and whose failed mints go to the
 * controller's kind of revoke queue (a real WorkQueue on the manual clock).
 */
async function leader(
  apiserver: FakeApiserver,
  guest: ReturnType<typeof fakeGuest>,
  refused?: Refused,
): Promise<Leader> {
  const clock = manualClock(Date.UTC(2026, 10, 23, 8));
  const log = createLogger({ name: 'test', level: 'silent' });
  const index = new TokenIndex();
  const copy = { secret: tokenSecret() };
  const entry = index.upsert(copy.secret);
  const revocations = new BootstrapRevocations({
    core: apiserver.core,
    join: guest.join,
    clock,
    log,
    queue: (reconcile) => new WorkQueue({ name: 'revoke', reconcile, clock }),
  });
  const writes = new LeaderWrites({
    core: apiserver.core,
    applier: apiserver.applier,
    authority: await createTokenAuthority(ecKeyPem(), clock),
    index,
    ttlMs: TTL_MS,
    join: guest.join,
    events: { record: async () => undefined } as unknown as TokenSecretEvents,
    clock,
    log,
    current: async () => copy.secret,
    refused: () => refused,
    forgetBootstrap: () => undefined,
    unmint: (mint) => revocations.failedMint(mint),
  });
  return { writes, revocations, copy, index, entry, clock };
}

/** A leader over a fake apiserver holding the Secret at `storedVersion`, and a fake guest. */
async function setUp(
  storedVersion = 1,
): Promise<{ apiserver: FakeApiserver; guest: ReturnType<typeof fakeGuest>; l: Leader }> {
  const apiserver = fakeApiserver(storedVersion);
  const guest = fakeGuest();
  return { apiserver, guest, l: await leader(apiserver, guest) };
}

/** A leader's pass whose patch fails, and the revoke queue's first look at what it minted. */
async function failedPass({ writes, revocations }: Leader): Promise<void> {
  await assert.rejects(writes.reconcile('ns/tok'), /failed to patch the token Secret/);
  await revocations.drained();
}

/** Moves the clock on, at most one of the revoke queue's looks at a time, and lets the queue run what came due. */
async function later(l: Leader, ms: number): Promise<void> {
  for (let left = ms; left > 0; left -= RECHECK_MS) {
    l.clock.advance(Math.min(left, RECHECK_MS));
    await l.revocations.drained();
  }
}

describe('leader writes', () => {
  it('when a pass runs again before the echo of its mint reached the informer, it should not mint a second time', async () => {
    const apiserver = fakeApiserver(1);
    const guest = fakeGuest();
    const { writes, copy, index, entry, clock } = await leader(apiserver, guest);
    await writes.reconcile('ns/tok');
    assert.equal(guest.minted.length, 1);
    // The payload's generation finishes right after the mint and wakes the Secret; the informer still holds rv 1.
    index.setPayload(entry, { state: 'ready', key: 'payload-key' });
    const early = await writes.reconcile('ns/tok');
    assert.deepEqual(guest.minted.length, 1, 'no second bootstrap token in the guest');
    assert.equal(apiserver.patches.length, 1, 'no patch computed from the copy before the mint');
    assert.ok(early && early.requeueAfterMs !== undefined && early.requeueAfterMs <= 1_000, 'looks again soon');
    // The echo arrives: the verdict goes out in a patch guarded by the echo's version, and nothing is minted.
    const echo = tokenSecret({
      resourceVersion: '2',
      token: 'minted',
      issuedAtMs: clock.now(),
      bootstrapToken: guest.minted[0],
    });
    copy.secret = echo;
    index.upsert(echo);
    await writes.reconcile('ns/tok');
    assert.equal(guest.minted.length, 1);
    assert.equal(apiserver.patches.length, 2);
    assert.deepEqual(apiserver.targets, ['Secret ns/tok', 'Secret ns/tok']);
    assert.equal(apiserver.patches[1]?.metadata.resourceVersion, '2');
    assert.equal(apiserver.patches[1]?.data[SECRET_KEYS.token], undefined, 'the verdict alone');
    assert.deepEqual(guest.revoked, []);
  });

  it('when the token Secret changed under a mint (409), it should delete the minted bootstrap token from the guest without reading the Secret back', async () => {
    // Someone else (a replica recording a first fetch) wrote the Secret after the informer's copy: rv 5 against 1.
    const { apiserver, guest, l } = await setUp(5);
    await failedPass(l);
    assert.equal(apiserver.reads.count, 0, 'the answer settles it');
    assert.equal(guest.minted.length, 1);
    assert.deepEqual(guest.revoked, guest.minted, 'no bootstrap token left that no Secret records');
  });

  it('when a patch after a mint gets no answer but was applied, it should keep the bootstrap token the Secret holds', async () => {
    const { apiserver, guest, l } = await setUp();
    apiserver.fail('reset-after-write');
    await failedPass(l);
    await later(l, PATCH_SETTLED_MS);
    assert.deepEqual(guest.revoked, [], 'the Secret records it: hosts join with it');
  });

  it('when a patch after a mint gets no answer and the Secret is still at its version, it should keep the token until the apiserver surely dropped the patch, then delete it', async () => {
    const { apiserver, guest, l } = await setUp();
    apiserver.fail('reset-before-write');
    await failedPass(l);
    assert.deepEqual(guest.revoked, [], 'the patch may still commit');
    await later(l, PATCH_SETTLED_MS - 1);
    assert.deepEqual(guest.revoked, [], 'still unknown within the deadline');
    await later(l, 1);
    assert.deepEqual(guest.revoked, guest.minted, 'never committed: nothing records it');
  });

  it('when a patch our client gave up on commits later, it should keep the bootstrap token the Secret then records', async () => {
    const { apiserver, guest, l } = await setUp();
    apiserver.fail('late');
    await failedPass(l);
    await later(l, 35_000);
    apiserver.commitLate();
    await later(l, PATCH_SETTLED_MS);
    assert.deepEqual(guest.revoked, [], 'hosts of the pool join with the token the Secret serves');
  });

  it('when the Secret moved on without the token after an unanswered patch, it should delete the token before the deadline', async () => {
    const { apiserver, guest, l } = await setUp();
    apiserver.fail('late');
    await failedPass(l);
    apiserver.bump();
    apiserver.commitLate();
    await later(l, 10_000);
    assert.deepEqual(guest.revoked, guest.minted, 'the patch can no longer commit');
  });

  it('when the Secret is gone after a patch that answered 500, it should delete the token', async () => {
    const { apiserver, guest, l } = await setUp();
    apiserver.fail('server-error');
    apiserver.remove();
    await failedPass(l);
    assert.deepEqual(guest.revoked, guest.minted);
  });

  it('when a patch after a mint got no answer, the next pass should not mint again from the same copy until the version moves or the deadline passes', async () => {
    const { apiserver, guest, l } = await setUp();
    apiserver.fail('reset-after-write');
    await failedPass(l);
    // The queue's retry runs on the copy the patch was computed from (the echo not in yet).
    const retry = await l.writes.reconcile('ns/tok');
    assert.equal(guest.minted.length, 1, 'no second bootstrap token');
    assert.equal(apiserver.patches.length, 1);
    assert.ok(retry?.requeueAfterMs !== undefined && retry.requeueAfterMs <= PATCH_SETTLED_MS, 'looks again');
    // The echo arrives: the Secret holds the token, so the pass mints nothing.
    l.copy.secret = tokenSecret({
      resourceVersion: '2',
      token: 'minted',
      issuedAtMs: l.clock.now(),
      bootstrapToken: guest.minted[0],
    });
    await l.writes.reconcile('ns/tok');
    assert.equal(guest.minted.length, 1);
  });

  it('when a patch after a mint got no answer and never committed, the next pass should mint again once the deadline has passed', async () => {
    const { apiserver, guest, l } = await setUp();
    apiserver.fail('reset-before-write');
    await failedPass(l);
    await l.writes.reconcile('ns/tok');
    assert.equal(guest.minted.length, 1, 'not while the outcome is unknown');
    await later(l, PATCH_SETTLED_MS);
    await l.writes.reconcile('ns/tok');
    assert.equal(guest.minted.length, 2, 'a patch that never committed does not hold the Secret back for good');
    assert.equal(apiserver.patches.length, 2);
    assert.deepEqual(guest.revoked, [guest.minted[0]]);
  });

  it('when the issue time of the token is far ahead of the clock (a tenant edit), it should rotate now instead of waiting for it', async () => {
    const { apiserver, guest, l } = await setUp();
    l.copy.secret = tokenSecret({
      token: 'old',
      issuedAtMs: Date.UTC(2099, 0, 1),
      bootstrapToken: 'abcdef.0123456789abcdef',
    });
    const result = await l.writes.reconcile('ns/tok');
    assert.equal(guest.minted.length, 1);
    assert.equal(apiserver.patches[0]?.data[SECRET_KEYS.rotatedToken], Buffer.from('old').toString('base64'));
    assert.ok(result && result.requeueAfterMs !== undefined && result.requeueAfterMs <= TTL_MS / 2 + 50);
  });

  it('when the issue time is a little ahead of the clock (another replica), it should wait for the rotation', async () => {
    const { guest, l } = await setUp();
    l.copy.secret = tokenSecret({ token: 'old', issuedAtMs: l.clock.now() + 60_000 });
    await l.writes.reconcile('ns/tok');
    assert.equal(guest.minted.length, 0);
  });

  it('when a retired Secret has not reached its expiry, it should wait for it without an Event or a delete', async () => {
    const apiserver = fakeApiserver(1);
    const clock0 = Date.UTC(2026, 10, 23, 8);
    const secret = tokenSecret({ expiresAtMs: clock0 + 7_200_000 });
    const l = await leader(apiserver, fakeGuest(), { secret, reason: 'Retired', message: 'm', sinceMs: clock0 });
    const result = await l.writes.reconcile('ns/tok');
    assert.deepEqual(apiserver.deletes, []);
    assert.equal(result?.requeueAfterMs, 7_200_050);
  });

  it('when a retired Secret has passed its expiry, it should delete it, guarded by its UID', async () => {
    const apiserver = fakeApiserver(1);
    const clock0 = Date.UTC(2026, 10, 23, 8);
    const secret = tokenSecret({ expiresAtMs: clock0 - 1 });
    const l = await leader(apiserver, fakeGuest(), { secret, reason: 'Retired', message: 'm', sinceMs: clock0 });
    await l.writes.reconcile('ns/tok');
    assert.deepEqual(apiserver.deletes, [{ uid: 'u1' }]);
    assert.equal(apiserver.patches.length, 0, 'nothing minted for it');
  });

  it("when a retired Secret goes, its bootstrap tokens should go to its pool's cluster, not the one its label names", () => {
    const secret = tokenSecret({ cluster: 'label-says', owner: { name: 'pool', uid: 'p1' }, bootstrapToken: 'b' });
    const pools = {
      get: (ns: string, name: string) =>
        ns === 'ns' && name === 'pool' ? { spec: { clusterName: 'guest' } } : undefined,
    };
    const retired = { secret, reason: 'Retired' as const, message: 'm', sinceMs: 0 };
    assert.equal(retiredSecret(retired, pools)?.cluster, 'guest');
    assert.equal(retiredSecret({ ...retired, reason: 'ReleaseNotOfPool' }, pools), undefined, 'only a retired one');
    assert.equal(retiredSecret(retired, { get: () => undefined }), undefined, 'no pool: no cluster to reach');
  });

  it('when a patch after a mint was refused, the next pass should not be held back', async () => {
    const { apiserver, guest, l } = await setUp();
    apiserver.fail('conflict');
    await failedPass(l);
    l.copy.secret = tokenSecret({ resourceVersion: '1' });
    await l.writes.reconcile('ns/tok');
    assert.equal(guest.minted.length, 2, 'a refused patch committed nothing: no guard');
  });
});
