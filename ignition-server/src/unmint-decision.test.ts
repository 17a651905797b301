import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { decideUnmint, PATCH_SETTLED_MS, RECHECK_MS, type FailedPatch } from './unmint-decision.js';

const T0 = Date.UTC(2026, 10, 28, 10);
const TOKEN = 'abcdef.0000000000000001';
const OTHER = 'abcdef.0000000000000000';
const unanswered: FailedPatch = { baseVersion: '7', sentAtMs: T0 };
const EXPIRES = T0 + 24 * 3_600_000;

describe('unmint decision', () => {
  for (const status of [400, 403, 404, 409, 422])
    it(`when the patch was answered ${status}, it should revoke without reading the Secret back`, () => {
      assert.deepEqual(
        decideUnmint({ patch: { ...unanswered, status }, token: TOKEN, expiresAtMs: EXPIRES, nowMs: T0 }),
        {
          action: 'revoke',
          reason: 'PatchRefused',
        },
      );
    });

  for (const status of [undefined, 500, 503, 504])
    it(`when the patch was answered ${status ?? 'nothing'} and the Secret is not read yet, it should read it back`, () => {
      assert.deepEqual(
        decideUnmint({ patch: { ...unanswered, status }, token: TOKEN, expiresAtMs: EXPIRES, nowMs: T0 }),
        {
          action: 'read',
        },
      );
    });

  it('when the patch never reached the apiserver (connection refused), it should revoke without reading the Secret back', () => {
    const patch = { ...unanswered, neverSent: true };
    assert.deepEqual(decideUnmint({ patch, token: TOKEN, expiresAtMs: EXPIRES, nowMs: T0 }), {
      action: 'revoke',
      reason: 'PatchRefused',
    });
  });

  it('when the minted token has expired, it should give up deleting it, whatever the patch', () => {
    for (const status of [undefined, 409])
      assert.deepEqual(decideUnmint({ patch: { ...unanswered, status }, token: TOKEN, expiresAtMs: T0, nowMs: T0 }), {
        action: 'keep',
        reason: 'Expired',
      });
  });

  it('when the Secret is gone, it should revoke', () => {
    const decision = decideUnmint({
      patch: unanswered,
      token: TOKEN,
      expiresAtMs: EXPIRES,
      nowMs: T0,
      current: { gone: true },
    });
    assert.deepEqual(decision, { action: 'revoke', reason: 'SecretGone' });
  });

  it('when either bootstrap-token slot holds the token, it should keep it', () => {
    for (const slots of [{ bootstrapToken: TOKEN }, { bootstrapToken: OTHER, rotatedBootstrapToken: TOKEN }]) {
      const current = { gone: false as const, resourceVersion: '9', ...slots };
      assert.deepEqual(decideUnmint({ patch: unanswered, token: TOKEN, expiresAtMs: EXPIRES, nowMs: T0, current }), {
        action: 'keep',
        reason: 'Recorded',
      });
    }
  });

  it('when the version moved past the patch and neither slot holds the token, it should revoke at once', () => {
    const current = { gone: false as const, resourceVersion: '8', bootstrapToken: OTHER };
    assert.deepEqual(decideUnmint({ patch: unanswered, token: TOKEN, expiresAtMs: EXPIRES, nowMs: T0 + 1, current }), {
      action: 'revoke',
      reason: 'Superseded',
    });
  });

  it('when the version is still the patch’s within the apiserver’s deadline, it should look again later, never past that deadline', () => {
    const current = { gone: false as const, resourceVersion: '7', bootstrapToken: OTHER };
    assert.deepEqual(decideUnmint({ patch: unanswered, token: TOKEN, expiresAtMs: EXPIRES, nowMs: T0, current }), {
      action: 'wait',
      reason: 'OutcomeUnknown',
      afterMs: RECHECK_MS,
    });
    assert.deepEqual(
      decideUnmint({
        patch: unanswered,
        token: TOKEN,
        expiresAtMs: EXPIRES,
        nowMs: T0 + PATCH_SETTLED_MS - 3,
        current,
      }),
      {
        action: 'wait',
        reason: 'OutcomeUnknown',
        afterMs: 3,
      },
    );
  });

  it('when the version is still the patch’s once the apiserver’s deadline has passed, it should revoke', () => {
    const current = { gone: false as const, resourceVersion: '7' };
    assert.deepEqual(
      decideUnmint({ patch: unanswered, token: TOKEN, expiresAtMs: EXPIRES, nowMs: T0 + PATCH_SETTLED_MS, current }),
      {
        action: 'revoke',
        reason: 'NeverCommitted',
      },
    );
  });

  it('when the deadline passed but a slot holds the token, it should keep it', () => {
    const current = { gone: false as const, resourceVersion: '7', bootstrapToken: TOKEN };
    const decision = decideUnmint({
      patch: unanswered,
      token: TOKEN,
      expiresAtMs: EXPIRES,
      nowMs: T0 + 10 * PATCH_SETTLED_MS,
      current,
    });
    assert.equal(decision.action, 'keep');
  });
});
