import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { pauseState } from './pause-state.js';

describe('pauseState', () => {
  const now = Date.parse('2026-11-23T10:00:00Z');
  it('when pausedUntil is unset or false, it should not pause', () => {
    assert.deepEqual(
      [undefined, 'false', 'False'].map((v) => pauseState(v, now)),
      [{ paused: false }, { paused: false }, { paused: false }],
    );
  });
  it('when pausedUntil is true, it should pause with no end', () => {
    assert.deepEqual(pauseState('true', now), { paused: true, until: 'true' });
  });
  it('when pausedUntil is a future date, it should pause until then and say how long', () => {
    assert.deepEqual(pauseState('2026-11-23T10:05:00Z', now), {
      paused: true,
      until: '2026-11-23T10:05:00Z',
      resumeInMs: 300_000,
    });
  });
  it('when pausedUntil is in the past, it should not pause', () => {
    assert.deepEqual(pauseState('2026-11-23T09:00:00Z', now), { paused: false });
  });
});
