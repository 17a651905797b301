import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type * as k8s from '#k8s';
import { ANNOTATIONS, LABELS } from '../../api/src/keys.js';
import { MAX_MINT_SKEW_MS, MintProgress } from './mint-progress.js';
import { answerExpected } from './phases/secrets.js';

/** The controller's clock in these tests: a little after the mint times below. */
const T0 = Date.parse('2026-11-24T00:00:10Z');

/** A token Secret as the controller writes it (labels, name) with the mint time the server stamped. */
const secret = (issuedAt?: string, patch: (s: k8s.V1Secret) => void = () => {}): k8s.V1Secret => {
  const s: k8s.V1Secret = {
    metadata: {
      name: 'token-workers-0123abcd',
      namespace: 'tenant-a',
      labels: { [LABELS.nodePool]: 'workers', [LABELS.tokenSecret]: 'true' },
      annotations: issuedAt === undefined ? {} : { [ANNOTATIONS.tokenIssuedAt]: issuedAt },
    },
  };
  patch(s);
  return s;
};

const iso = (ms: number): string => new Date(ms).toISOString();

describe('MintProgress', () => {
  it('when a newer mint arrives, it should count as progress at the moment it is seen, whatever its own time', () => {
    const mints = new MintProgress();
    assert.equal(mints.seenMsIn('tenant-a'), Number.NEGATIVE_INFINITY);
    mints.observe(secret('2026-11-24T00:00:05Z'), T0 + 1_000);
    assert.equal(mints.seenMsIn('tenant-a'), T0 + 1_000);
    mints.observe(secret('2026-11-24T00:00:06Z'), T0 + 9_000);
    assert.equal(mints.seenMsIn('tenant-a'), T0 + 9_000);
  });

  it('when an older or the same mint arrives again (a relist), it should not count as progress', () => {
    const mints = new MintProgress();
    mints.observe(secret('2026-11-24T00:00:05Z'), T0 + 1_000);
    mints.observe(secret('2026-11-24T00:00:05Z'), T0 + 7_000);
    mints.observe(secret('2026-11-24T00:00:02Z'), T0 + 8_000);
    assert.equal(mints.seenMsIn('tenant-a'), T0 + 1_000);
  });

  it('when a Secret has no mint time or an unreadable one, it should ignore it', () => {
    const mints = new MintProgress();
    mints.observe(secret(), T0 + 1_000);
    mints.observe(secret('yesterday'), T0 + 2_000);
    assert.equal(mints.seenMsIn('tenant-a'), Number.NEGATIVE_INFINITY);
  });

  it('when a mint time is further ahead of the clock than the skew allows (year 9999), it should ignore it and keep counting real mints', () => {
    const mints = new MintProgress();
    mints.observe(secret('9999-12-31T23:59:59Z'), T0);
    mints.observe(secret(iso(T0 + MAX_MINT_SKEW_MS + 1_000)), T0);
    assert.equal(mints.seenMsIn('tenant-a'), Number.NEGATIVE_INFINITY);
    mints.observe(secret(iso(T0 + MAX_MINT_SKEW_MS)), T0 + 1_000);
    assert.equal(mints.seenMsIn('tenant-a'), T0 + 1_000, 'a server a little ahead still counts');
    mints.observe(secret(iso(T0 + MAX_MINT_SKEW_MS + 1_000)), T0 + 2_000);
    assert.equal(mints.seenMsIn('tenant-a'), T0 + 2_000, 'a mint time becomes acceptable as the clock reaches it');
  });

  it('when a Secret is not a token Secret (no or another token label, or not named as a token Secret of its pool), it should ignore it', () => {
    const mints = new MintProgress();
    const at = '2026-11-24T00:00:05Z';
    mints.observe(
      secret(at, (s) => delete s.metadata?.labels?.[LABELS.tokenSecret]),
      T0,
    );
    mints.observe(
      secret(at, (s) => ((s.metadata as k8s.V1ObjectMeta).labels = { [LABELS.tokenSecret]: 'true' })),
      T0,
    );
    mints.observe(
      secret(at, (s) => ((s.metadata?.labels ?? {})[LABELS.tokenSecret] = 'yes')),
      T0,
    );
    mints.observe(
      secret(at, (s) => ((s.metadata as k8s.V1ObjectMeta).name = 'user-data-workers-0123abcd')),
      T0,
    );
    mints.observe(
      secret(at, (s) => ((s.metadata as k8s.V1ObjectMeta).name = 'token-other-0123abcd')),
      T0,
    );
    mints.observe(
      secret(at, (s) => ((s.metadata as k8s.V1ObjectMeta).name = 'token-workers-')),
      T0,
    );
    assert.equal(mints.seenMsIn('tenant-a'), Number.NEGATIVE_INFINITY);
  });

  it('when mints arrive in one namespace, it should count them as progress there and not in another namespace', () => {
    const mints = new MintProgress();
    mints.observe(secret('2026-11-24T00:00:05Z'), T0 + 1_000);
    const other = (s: k8s.V1Secret): void => void ((s.metadata as k8s.V1ObjectMeta).namespace = 'tenant-b');
    mints.observe(secret('2026-11-24T00:00:09Z', other), T0 + 2_000);
    mints.observe(secret('2026-11-24T00:00:07Z'), T0 + 3_000);
    assert.equal(mints.seenMsIn('tenant-a'), T0 + 3_000, 'newer than any of tenant-a, though older than tenant-b');
    assert.equal(mints.seenMsIn('tenant-b'), T0 + 2_000);
    assert.equal(mints.seenMsIn('tenant-c'), Number.NEGATIVE_INFINITY);
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
