import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type * as k8s from '#k8s';
import { SECRET_KEYS } from '../../api/src/keys.js';
import { createLogger } from '../../support/src/logger.js';
import { LeaderWrites } from './leader-writes.js';
import { TokenIndex, type TokenSecret, type TokenSecretEntry } from './token-index.js';
import { createTokenAuthority } from './tokens.js';
import type { GuestJoin } from './join.js';
import type { TokenSecretEvents } from './events.js';
import { ecKeyPem, manualClock } from '../testing/index.js';

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
type Failure = 'conflict' | 'reset-after-write' | 'reset-before-write' | undefined;

/**
 * The management apiserver's side of one Secret: a merge patch is refused (409) unless it carries the stored
 * resourceVersion. `fail` makes the next patch fail: with a 409, or with a connection reset after or before the
 * write was stored.
 */
function fakeApiserver(storedVersion: number): {
  core: k8s.CoreV1Api;
  patches: PatchBody[];
  fail: (how: Failure) => void;
} {
  let version = storedVersion;
  let failure: Failure;
  const data: Record<string, string> = {};
  const patches: PatchBody[] = [];
  const reset = (): Error => Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' });
  const core = {
    patchNamespacedSecret: async ({ body }: { body: PatchBody }): Promise<k8s.V1Secret> => {
      patches.push(body);
      const how = failure;
      failure = undefined;
      if (how === 'reset-before-write') throw reset();
      if (how === 'conflict' || body.metadata.resourceVersion !== String(version))
        throw Object.assign(new Error('the object has been modified'), { code: 409 });
      Object.assign(data, body.data);
      version++;
      if (how === 'reset-after-write') throw reset();
      return { metadata: { resourceVersion: String(version) }, data };
    },
    readNamespacedSecret: async (): Promise<k8s.V1Secret> => ({ metadata: { resourceVersion: String(version) }, data }),
  };
  return { core: core as unknown as k8s.CoreV1Api, patches, fail: (how) => void (failure = how) };
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
  copy: { secret: TokenSecret };
  index: TokenIndex;
  entry: TokenSecretEntry;
  clock: ReturnType<typeof manualClock>;
}

/** A leader whose informer copy of the Secret is whatever `copy.secret` holds. */
async function leader(
  apiserver: ReturnType<typeof fakeApiserver>,
  guest: ReturnType<typeof fakeGuest>,
): Promise<Leader> {
  const clock = manualClock();
  const index = new TokenIndex();
  const copy = { secret: tokenSecret() };
  const entry = index.upsert(copy.secret);
  const writes = new LeaderWrites({
    core: apiserver.core,
    authority: await createTokenAuthority(ecKeyPem(), clock),
    index,
    ttlMs: TTL_MS,
    join: guest.join,
    events: { record: async () => undefined } as unknown as TokenSecretEvents,
    clock,
    log: createLogger({ name: 'test', level: 'silent' }),
    current: async () => copy.secret,
    refused: () => undefined,
    forgetBootstrap: () => undefined,
  });
  return { writes, copy, index, entry, clock };
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
    assert.equal(apiserver.patches[1]?.metadata.resourceVersion, '2');
    assert.equal(apiserver.patches[1]?.data[SECRET_KEYS.token], undefined, 'the verdict alone');
    assert.deepEqual(guest.revoked, []);
  });

  it('when the token Secret changed under a mint (409), it should delete the minted bootstrap token from the guest and fail the pass', async () => {
    // Someone else (a replica recording a first fetch) wrote the Secret after the informer's copy: rv 5 against 1.
    const apiserver = fakeApiserver(5);
    const guest = fakeGuest();
    const { writes } = await leader(apiserver, guest);
    await assert.rejects(writes.reconcile('ns/tok'), /failed to patch the token Secret/);
    assert.equal(guest.minted.length, 1);
    assert.deepEqual(guest.revoked, guest.minted, 'no bootstrap token left that no Secret records');
  });

  it('when a patch after a mint gets no answer, it should keep the bootstrap token if the Secret holds it and delete it otherwise', async () => {
    const applied = fakeApiserver(1);
    const keptGuest = fakeGuest();
    applied.fail('reset-after-write');
    await assert.rejects((await leader(applied, keptGuest)).writes.reconcile('ns/tok'), /failed to patch/);
    assert.deepEqual(keptGuest.revoked, [], 'the Secret records it: hosts join with it');

    const lost = fakeApiserver(1);
    const lostGuest = fakeGuest();
    lost.fail('reset-before-write');
    await assert.rejects((await leader(lost, lostGuest)).writes.reconcile('ns/tok'), /failed to patch/);
    assert.deepEqual(lostGuest.revoked, lostGuest.minted);
  });
});
