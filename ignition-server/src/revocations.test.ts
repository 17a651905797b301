import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type * as k8s from '#k8s';
import { SECRET_KEYS } from '../../api/src/keys.js';
import { createKeyQueue } from '../../support/src/controller.js';
import { createLogger } from '../../support/src/logger.js';
import { manualClock, type ManualClock } from '../../support/testing/index.js';
import type { GuestJoin } from './join.js';
import { BootstrapRevocations, type FailedMint } from './revocations.js';
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
  keys: string[];
  logged: string[];
  /** The token Secret as the management apiserver holds it (undefined: gone). */
  stored: { secret: k8s.V1Secret | undefined };
}

function harness(): Harness {
  const clock = manualClock(Date.UTC(2026, 10, 28, 10));
  const destination = memoryDestination();
  const log = createLogger({ name: 'test', destination });
  const revoked: string[][] = [];
  const guestErrors = { count: 0 };
  const keys: string[] = [];
  const stored: Harness['stored'] = { secret: { metadata: { resourceVersion: '7' }, data: {} } };
  const join: GuestJoin = {
    mint: () => Promise.reject(new Error('not in this test')),
    revoke: async ({ tokens }) => {
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
    join,
    clock,
    log,
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
  return { revocations, clock, revoked, guestErrors, keys, logged: destination.lines, stored };
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
