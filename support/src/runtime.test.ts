import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { runtimeSupport, runtimeWarning } from './runtime.js';

describe('runtimeSupport', () => {
  const on = (day: string): Date => new Date(`${day}T12:00:00Z`);

  it('when the line is more than three months from its end, it should be supported', () => {
    assert.deepEqual(runtimeSupport('v24.21.0', on('2026-11-27')), { state: 'supported', endOfLife: '2028-04-30' });
  });

  it('when the line ends within three months, it should be ending, with the days left', () => {
    assert.deepEqual(runtimeSupport('v22.22.0', on('2027-02-28')), {
      state: 'ending',
      endOfLife: '2027-04-30',
      days: 62,
    });
  });

  it('when it is the last day of support, it should still be ending, not ended', () => {
    assert.equal(runtimeSupport('v20.20.2', on('2026-04-30')).state, 'ending');
  });

  it('when the line is past its end of life, it should be ended', () => {
    assert.deepEqual(runtimeSupport('v20.20.2', on('2026-11-27')), { state: 'ended', endOfLife: '2026-04-30' });
  });

  it('when the release line is not in the table, it should be unknown', () => {
    assert.deepEqual(runtimeSupport('v99.0.0', on('2026-11-27')), { state: 'unknown' });
  });
});

describe('runtimeWarning', () => {
  it('when the runtime is past its end of life, it should say so in one line with the date', () => {
    const warning = runtimeWarning('v20.20.2', new Date('2026-11-27T00:00:00Z'));
    assert.match(warning ?? '', /^Node\.js v20\.20\.2 reached its end of life on 2026-04-30/);
    assert.doesNotMatch(warning ?? '', /\n/);
  });

  it('when the runtime is supported for more than three months, it should say nothing', () => {
    assert.equal(runtimeWarning('v24.21.0', new Date('2026-11-27T00:00:00Z')), undefined);
  });
});
