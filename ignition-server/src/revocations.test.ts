import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type * as k8s from '#k8s';
import { SECRET_KEYS } from '../../api/src/keys.js';
import { createKeyQueue } from '../../support/src/controller.js';
import { createLogger } from '../../support/src/logger.js';
import { manualClock, type ManualClock } from '../../support/testing/index.js';
import { GuestKubeconfigRefusedError } from '../../support/src/guest-kubeconfig-parse.js';
import type { GuestKubeConfigs } from '../../support/src/guest-kubeconfigs.js';
import { createGuestJoin, GuestKubeconfigError, type GuestJoin } from './join.js';
import {
  BootstrapRevocations,
  bootstrapTokensExpireAtMs,
  decideRevoke,
  guestFailureOf,
  withoutSettled,
  withRevocation,
  type FailedMint,
  type Revocation,
} from './revocations.js';
import { PATCH_SETTLED_MS } from './unmint-decision.js';
import { memoryDestination } from '../testing/index.js';

const MINTED = 'abcdef.mintedsecret0001';
const RECORDED = 'ghijkl.recordedsecret01';
const ROTATED = 'mnopqr.rotatedsecret001';

interface Harness {
  revocations: BootstrapRevocations;
  clock: ManualClock;
  /** Tokens deleted from the guest, one array per successful call. */
  revoked: string[][];
  /** Guest deletions still to fail before one succeeds. */
  guestErrors: { count: number };
  /** Calls of the guest's deletion, failed ones included. */
  attempts: { count: number };
  keys: string[];
  logged: string[];
  /** The token Secret as the management apiserver holds it (undefined: gone). */
  stored: { secret: k8s.V1Secret | undefined };
}

interface HarnessOptions {
  /** The guest join in place of the fake one (whose deletions fail `guestErrors` times). */
  join?: GuestJoin;
  ttlMs?: number;
}

function harness(opts: HarnessOptions = {}): Harness {
  const clock = manualClock(Date.UTC(2026, 10, 28, 10));
  const destination = memoryDestination();
  const log = createLogger({ name: 'test', destination });
  const revoked: string[][] = [];
  const guestErrors = { count: 0 };
  const attempts = { count: 0 };
  const keys: string[] = [];
  const stored: Harness['stored'] = { secret: { metadata: { resourceVersion: '7' }, data: {} } };
  const join: GuestJoin = {
    mint: () => Promise.reject(new Error('not in this test')),
    revoke: async ({ tokens }) => {
      attempts.count++;
      if (guestErrors.count > 0) {
        guestErrors.count--;
        throw new Error('guest apiserver unreachable');
      }
      revoked.push(tokens);
    },
  };
  const core = {
    readNamespacedSecret: async (): Promise<k8s.V1Secret> => {
      if (stored.secret) return stored.secret;
      throw Object.assign(new Error('not found'), { code: 404 });
    },
  } as unknown as k8s.CoreV1Api;
  const revocations = new BootstrapRevocations({
    core,
    join: opts.join ?? join,
    clock,
    log,
    ttlMs: opts.ttlMs,
    // As the controller makes it: the key named `secret` in its failure line.
    queue: (reconcile) =>
      createKeyQueue({
        name: 'ignition-bootstrap-revoke',
        log,
        clock,
        keyField: 'secret',
        reconcile: (key) => (keys.push(key), reconcile(key)),
      }),
  });
  return { revocations, clock, revoked, guestErrors, attempts, keys, logged: destination.lines, stored };
}

const failedMint = (status?: number): FailedMint => ({
  secret: 'ns/tok',
  cluster: 'guest',
  token: MINTED,
  expiresAtMs: Date.UTC(2026, 10, 29, 10),
  patch: { status, baseVersion: '7', sentAtMs: Date.UTC(2026, 10, 28, 10) },
});

async function later(h: Harness, ms: number): Promise<void> {
  h.clock.advance(ms);
  await h.revocations.drained();
}

describe('bootstrap revocations', () => {
  it('when a token Secret is deleted, it should delete its bootstrap tokens from the guest, retrying after a guest error', async () => {
    const h = harness();
    h.guestErrors.count = 1;
    h.revocations.secretDeleted('ns/tok', { namespace: 'ns', cluster: 'guest', tokens: [RECORDED, ROTATED] });
    await h.revocations.drained();
    assert.deepEqual(h.revoked, []);
    await later(h, 200);
    assert.deepEqual(h.revoked, [[RECORDED, ROTATED]]);
    assert.deepEqual(h.keys, ['ns/tok', 'ns/tok'], 'keyed by the Secret, as before');
  });

  it('when a failed mint and its Secret’s deletion are pending at once, it should delete the tokens of both', async () => {
    const h = harness();
    h.guestErrors.count = 2;
    h.revocations.secretDeleted('ns/tok', { namespace: 'ns', cluster: 'guest', tokens: [RECORDED] });
    h.revocations.failedMint(failedMint(409));
    await h.revocations.drained();
    await later(h, 200);
    assert.deepEqual(h.revoked.flat().sort(), [MINTED, RECORDED].sort(), 'neither entry overwrote the other');
  });

  it('when the guest fails the deletion of a failed mint, it should retry with backoff until it succeeds', async () => {
    const h = harness();
    h.guestErrors.count = 1;
    h.revocations.failedMint(failedMint(409));
    await h.revocations.drained();
    assert.deepEqual(h.revoked, [], 'the first attempt failed');
    await later(h, 200);
    assert.deepEqual(h.revoked, [[MINTED]]);
  });

  it('when a patch got no answer and the Secret stays at its version, it should look again and delete the token only at the deadline', async () => {
    const h = harness();
    h.revocations.failedMint(failedMint());
    await h.revocations.drained();
    for (let waited = 0; waited < PATCH_SETTLED_MS - 10_000; waited += 10_000) {
      await later(h, 10_000);
      assert.deepEqual(h.revoked, [], `kept at ${waited + 10_000} ms`);
    }
    await later(h, 10_000);
    assert.deepEqual(h.revoked, [[MINTED]]);
  });

  it('when the Secret records the minted token in its rotated slot, it should keep it', async () => {
    const h = harness();
    const data = {
      [SECRET_KEYS.bootstrapToken]: Buffer.from(RECORDED).toString('base64'),
      [SECRET_KEYS.rotatedBootstrapToken]: Buffer.from(MINTED).toString('base64'),
    };
    h.stored.secret = { metadata: { resourceVersion: '9' }, data };
    h.revocations.failedMint(failedMint(504));
    await h.revocations.drained();
    await later(h, PATCH_SETTLED_MS);
    assert.deepEqual(h.revoked, []);
  });

  it('when it handles a failed mint, it should put no bootstrap token in a queue key or a log line', async () => {
    const h = harness();
    h.guestErrors.count = 1;
    h.revocations.failedMint(failedMint(409));
    await h.revocations.drained();
    await later(h, 200);
    assert.deepEqual(h.revoked, [[MINTED]]);
    assert.ok(h.logged.some((line) => line.includes('"reason":"PatchRefused"')));
    assert.ok(
      h.logged.some((line) => line.includes('Reconcile failed')),
      'the failure line was written',
    );
    for (const text of [...h.keys, ...h.logged]) {
      assert.ok(!text.includes('mintedsecret'), `no token in ${text}`);
      assert.ok(!text.includes(Buffer.from(MINTED).toString('base64')), `no encoded token in ${text}`);
    }
  });
});

const MINUTE = 60_000;
const T0 = Date.UTC(2026, 10, 28, 10);
const revocation = (tokens: string[], expiresAtMs?: number): Revocation => ({
  namespace: 'ns',
  cluster: 'guest',
  tokens,
  expiresAtMs,
});

/** The real guest join over a kubeconfig Secret that cannot be had; counts the reads. */
function joinWithoutKubeconfig(err: Error): { join: GuestJoin; reads: { count: number } } {
  const reads = { count: 0 };
  const kubeConfigs: GuestKubeConfigs = {
    get: () => (reads.count++, Promise.reject(err)),
    forget: () => undefined,
  };
  return { join: createGuestJoin(kubeConfigs), reads };
}

const notFound = (): Error => Object.assign(new Error('secrets "guest-kubeconfig" not found'), { code: 404 });
const lines = (h: Harness): { level: number; msg: string; reason?: string }[] =>
  h.logged.map((line) => JSON.parse(line) as { level: number; msg: string; reason?: string });

describe('bootstrap revocations of deleted token Secrets', () => {
  it("when the cluster's kubeconfig Secret is gone (the cluster was deleted), it should give up at once and never ask again", async () => {
    const { join, reads } = joinWithoutKubeconfig(notFound());
    const h = harness({ join });
    h.revocations.secretDeleted('ns/tok', revocation([RECORDED], T0 + 60 * MINUTE));
    await h.revocations.drained();
    for (let i = 0; i < 5; i++) await later(h, MINUTE);
    assert.equal(reads.count, 1);
    assert.deepEqual(h.keys, ['ns/tok']);
    assert.ok(lines(h).some((l) => l.reason === 'KubeconfigMissing' && l.level === 30));
    assert.ok(!h.logged.some((line) => line.includes('Reconcile failed')), 'no failure line: the end is normal');
    await h.revocations.stop();
    assert.ok(!h.logged.some((line) => line.includes('still to delete')), 'nothing left pending');
  });

  it("when the cluster's kubeconfig is refused, it should give up at once with a warning", async () => {
    const { join, reads } = joinWithoutKubeconfig(new GuestKubeconfigRefusedError('users[0].user.exec', 'runs'));
    const h = harness({ join });
    h.revocations.secretDeleted('ns/tok', revocation([RECORDED], T0 + 60 * MINUTE));
    await h.revocations.drained();
    for (let i = 0; i < 5; i++) await later(h, MINUTE);
    assert.equal(reads.count, 1);
    assert.ok(lines(h).some((l) => l.reason === 'KubeconfigRefused' && l.level === 40));
  });

  it('when the guest stays unreachable, it should retry with backoff until the tokens expire, then give up', async () => {
    const h = harness();
    h.guestErrors.count = Infinity;
    h.revocations.secretDeleted('ns/tok', revocation([RECORDED, ROTATED], T0 + 10 * MINUTE));
    await h.revocations.drained();
    for (let i = 0; i < 9; i++) await later(h, MINUTE);
    const before = h.attempts.count;
    assert.ok(before > 5, `retried (${before} attempts)`);
    for (let i = 0; i < 30; i++) await later(h, MINUTE);
    const after = h.attempts.count;
    for (let i = 0; i < 30; i++) await later(h, MINUTE);
    assert.equal(h.attempts.count, after, 'no attempt once given up');
    assert.ok(after <= before + 2, `stopped at the expiry (${after} attempts)`);
    assert.ok(lines(h).some((l) => l.reason === 'Expired'));
    await h.revocations.stop();
    assert.ok(!h.logged.some((line) => line.includes('still to delete')), 'nothing left pending');
  });

  it('when a revocation comes without its expiry, it should end at the token TTL from then', async () => {
    const h = harness({ ttlMs: 5 * MINUTE });
    h.guestErrors.count = Infinity;
    h.revocations.secretDeleted('ns/tok', revocation([RECORDED]));
    await h.revocations.drained();
    for (let i = 0; i < 4; i++) await later(h, MINUTE);
    assert.ok(!lines(h).some((l) => l.reason === 'Expired'), 'still trying within the TTL');
    for (let i = 0; i < 3; i++) await later(h, MINUTE);
    assert.ok(
      lines(h).some((l) => l.reason === 'Expired'),
      'given up past it',
    );
  });

  it('when the tokens have expired already, it should not ask the guest', async () => {
    const h = harness();
    h.revocations.secretDeleted('ns/tok', revocation([RECORDED], T0));
    await h.revocations.drained();
    assert.equal(h.attempts.count, 0);
    assert.ok(lines(h).some((l) => l.reason === 'Expired'));
  });

  it('when a token Secret of the same name is deleted again while the first is pending, it should delete the tokens of both', async () => {
    const h = harness();
    h.guestErrors.count = 1;
    h.revocations.secretDeleted('ns/tok', revocation([RECORDED], T0 + 60 * MINUTE));
    await h.revocations.drained();
    h.revocations.secretDeleted('ns/tok', revocation([ROTATED], T0 + 60 * MINUTE));
    await h.revocations.drained();
    await later(h, 200);
    assert.deepEqual(h.revoked.flat().sort(), [RECORDED, ROTATED].sort());
  });

  it('when pending deletions of one key meet, it should merge their tokens per guest and keep the later expiry', () => {
    const first = { namespace: 'ns', cluster: 'guest', tokens: [RECORDED], expiresAtMs: T0 + 2 };
    const other = { namespace: 'ns', cluster: 'other', tokens: [MINTED], expiresAtMs: T0 };
    const merged = withRevocation(withRevocation([first], other), {
      ...first,
      tokens: [RECORDED, ROTATED],
      expiresAtMs: T0 + 1,
    });
    assert.deepEqual(merged, [{ ...first, tokens: [RECORDED, ROTATED] }, other]);
  });

  it('when some tokens of a key are settled, it should keep the ones added meanwhile and drop emptied guests', () => {
    const pending = [{ namespace: 'ns', cluster: 'guest', tokens: [RECORDED, ROTATED], expiresAtMs: T0 }];
    assert.deepEqual(withoutSettled(pending, revocation([RECORDED])), [{ ...pending[0], tokens: [ROTATED] }]);
    assert.deepEqual(withoutSettled(pending, revocation([RECORDED, ROTATED])), []);
  });

  it('when a deletion failed, it should give up only for a missing or refused kubeconfig, or past the expiry', () => {
    const before = { expiresAtMs: T0 + 1, nowMs: T0 };
    assert.deepEqual(decideRevoke(before), { action: 'revoke' });
    assert.deepEqual(decideRevoke({ ...before, failure: 'Failed' }), { action: 'retry' });
    assert.deepEqual(decideRevoke({ ...before, nowMs: T0 + 1 }), { action: 'give-up', reason: 'Expired' });
    assert.deepEqual(decideRevoke({ ...before, nowMs: T0 + 1, failure: 'Failed' }), {
      action: 'give-up',
      reason: 'Expired',
    });
    for (const failure of ['KubeconfigMissing', 'KubeconfigRefused'] as const)
      assert.deepEqual(decideRevoke({ ...before, failure }), { action: 'give-up', reason: failure });
  });

  it("when an error is read, it should call a 404 missing only when the guest's kubeconfig Secret gave it", () => {
    const kubeconfig = (cause: Error): Error => new GuestKubeconfigError('failed: no kubeconfig', { cause });
    assert.equal(guestFailureOf(kubeconfig(notFound())), 'KubeconfigMissing');
    assert.equal(
      guestFailureOf(kubeconfig(new GuestKubeconfigRefusedError('users[0].user.exec', 'runs'))),
      'KubeconfigRefused',
    );
    assert.equal(guestFailureOf(kubeconfig(Object.assign(new Error('unavailable'), { code: 503 }))), 'Failed');
    assert.equal(guestFailureOf(new Error('failed to delete', { cause: notFound() })), 'Failed');
    assert.equal(guestFailureOf(new Error('failed to delete', { cause: new Error('ECONNREFUSED') })), 'Failed');
  });

  it("when the expiry of a Secret's bootstrap tokens is computed, it should be its issue time plus the TTL in whole seconds", () => {
    assert.equal(bootstrapTokensExpireAtMs(T0, 11 * 3_600_000), T0 + 11 * 3_600_000);
    assert.equal(bootstrapTokensExpireAtMs(T0, 1_500), T0 + 2_000);
  });
});
