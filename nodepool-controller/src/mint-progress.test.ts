import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ANNOTATIONS } from '../../api/src/keys.js';
import { MintProgress } from './mint-progress.js';
import { answerExpected } from './phases/secrets.js';

const secret = (issuedAt?: string): { metadata: { annotations: Record<string, string> } } => ({
  metadata: { annotations: issuedAt === undefined ? {} : { [ANNOTATIONS.tokenIssuedAt]: issuedAt } },
});

describe('MintProgress', () => {
  it('when a newer mint arrives, it should count as progress at the moment it is seen, whatever its own time', () => {
    const mints = new MintProgress();
    assert.equal(mints.seenMs, Number.NEGATIVE_INFINITY);
    mints.observe(secret('2026-11-24T00:00:05Z'), 1_000);
    assert.equal(mints.seenMs, 1_000);
    mints.observe(secret('2026-11-24T00:00:06Z'), 9_000);
    assert.equal(mints.seenMs, 9_000);
  });

  it('when an older or the same mint arrives again (a relist), it should not count as progress', () => {
    const mints = new MintProgress();
    mints.observe(secret('2026-11-24T00:00:05Z'), 1_000);
    mints.observe(secret('2026-11-24T00:00:05Z'), 7_000);
    mints.observe(secret('2026-11-24T00:00:02Z'), 8_000);
    assert.equal(mints.seenMs, 1_000);
  });

  it('when a Secret has no mint time or an unreadable one, it should ignore it', () => {
    const mints = new MintProgress();
    mints.observe(secret(), 1_000);
    mints.observe(secret('yesterday'), 2_000);
    assert.equal(mints.seenMs, Number.NEGATIVE_INFINITY);
  });
});

describe('answerExpected', () => {
  const created = Date.parse('2026-11-24T00:00:00Z');
  const none = Number.NEGATIVE_INFINITY;
  const minutes = (m: number): number => created + m * 60_000;

  it('when the Secret was written within the retry, it should expect the answer whatever the server did', () => {
    assert.equal(answerExpected(created + 4_999, created, none), true);
  });

  it('when the retry has passed and the server minted nothing lately, it should not expect it', () => {
    assert.equal(answerExpected(created + 5_000, created, none), false);
    assert.equal(answerExpected(created + 60_000, created, created + 29_000), false);
  });

  it('when the server minted in the last 30 s, it should expect the answer up to five minutes, not longer', () => {
    assert.equal(answerExpected(minutes(4), created, minutes(4) - 29_000), true);
    assert.equal(answerExpected(minutes(5), created, minutes(5) - 1_000), false);
  });
});
