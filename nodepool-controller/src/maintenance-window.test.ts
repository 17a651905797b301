import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { isConditionError } from './condition-error.js';
import { isoMinutes, parseWindow, windowAt } from './maintenance-window.js';

const at = (iso: string): number => Date.parse(iso);
const iso = (ms: number | undefined): string | undefined => (ms === undefined ? undefined : new Date(ms).toISOString());

function stateAt(spec: Parameters<typeof parseWindow>[0], when: string): { open: boolean; at?: string } {
  const s = windowAt(parseWindow(spec), at(when));
  if (s.open) return { open: true, at: iso(s.closesAt) };
  return s.opensAt === undefined ? { open: false } : { open: false, at: iso(s.opensAt) };
}

function reasonOf(spec: Parameters<typeof parseWindow>[0]): string {
  try {
    parseWindow(spec);
  } catch (err) {
    assert.ok(isConditionError(err, 'ValidMaintenanceWindow'), String(err));
    return `${err.reason}: ${err.message}`;
  }
  return 'parsed';
}

describe('maintenance windows', () => {
  const nightly = { schedule: '0 2 * * *', duration: '3h' };

  it('when the time is inside a UTC window, it should be open and say when it closes', () => {
    assert.deepEqual(stateAt(nightly, '2026-12-01T03:30:00Z'), { open: true, at: '2026-12-01T05:00:00.000Z' });
  });

  it('when the time is the opening instant, it should be open; at the closing instant, closed until the next day', () => {
    assert.deepEqual(stateAt(nightly, '2026-12-01T02:00:00Z'), { open: true, at: '2026-12-01T05:00:00.000Z' });
    assert.deepEqual(stateAt(nightly, '2026-12-01T05:00:00Z'), { open: false, at: '2026-12-02T02:00:00.000Z' });
  });

  it('when the time is before the window, it should be closed and say when it opens', () => {
    assert.deepEqual(stateAt(nightly, '2026-12-01T01:59:59Z'), { open: false, at: '2026-12-01T02:00:00.000Z' });
  });

  it('when the window has a time zone, it should open at that zone’s local time (winter and summer offsets)', () => {
    const berlin = { ...nightly, timeZone: 'Europe/Berlin' };
    assert.deepEqual(stateAt(berlin, '2026-12-01T00:30:00Z'), { open: false, at: '2026-12-01T01:00:00.000Z' });
    assert.deepEqual(stateAt(berlin, '2026-07-01T00:30:00Z'), { open: true, at: '2026-07-01T03:00:00.000Z' });
  });

  it('when the opening time falls in the hour skipped by the spring DST change, it should open at the first minute after it', () => {
    const berlin = { ...nightly, timeZone: 'Europe/Berlin' };
    // 2026-03-29 02:00 does not exist in Berlin: clocks go from 02:00 CET to 03:00 CEST (01:00Z).
    assert.deepEqual(stateAt(berlin, '2026-03-29T00:30:00Z'), { open: false, at: '2026-03-29T01:00:00.000Z' });
    assert.deepEqual(stateAt(berlin, '2026-03-29T03:59:00Z'), { open: true, at: '2026-03-29T04:00:00.000Z' });
  });

  it('when the opening time falls in the hour repeated by the autumn DST change, it should open once, at the first one', () => {
    const berlin = { ...nightly, timeZone: 'Europe/Berlin' };
    // 02:00 happens at 00:00Z (CEST) and again at 01:00Z (CET).
    assert.deepEqual(stateAt(berlin, '2026-10-25T00:00:00Z'), { open: true, at: '2026-10-25T03:00:00.000Z' });
    assert.deepEqual(stateAt(berlin, '2026-10-25T03:00:00Z'), { open: false, at: '2026-10-26T01:00:00.000Z' });
  });

  it('when the schedule is weekly, it should stay closed until that weekday', () => {
    const saturdays = { schedule: '0 22 * * 6', duration: '6h', timeZone: 'America/New_York' };
    // Tuesday 2026-12-01: next Saturday 22:00 EST is 2026-12-06T03:00Z, open until 09:00Z.
    assert.deepEqual(stateAt(saturdays, '2026-12-01T12:00:00Z'), { open: false, at: '2026-12-06T03:00:00.000Z' });
    assert.deepEqual(stateAt(saturdays, '2026-12-06T08:59:00Z'), { open: true, at: '2026-12-06T09:00:00.000Z' });
  });

  it('when the schedule never fires again, it should be closed with no opening', () => {
    assert.deepEqual(stateAt({ schedule: '0 2 30 2 *', duration: '1h' }, '2026-12-01T00:00:00Z'), { open: false });
  });

  it('when the schedule, duration or time zone is wrong, it should refuse it with the reason and what to write instead', () => {
    assert.match(reasonOf({ schedule: '0 2 * *', duration: '1h' }), /^InvalidSchedule: .*5-field cron/);
    assert.match(reasonOf({ schedule: '0 0 2 * * *', duration: '1h' }), /^InvalidSchedule: /);
    assert.match(reasonOf({ schedule: '61 2 * * *', duration: '1h' }), /^InvalidSchedule: .*minute/);
    assert.match(reasonOf({ schedule: '0 2 * * *', duration: 'two hours' }), /^InvalidDuration: .*such as 4h/);
    assert.match(reasonOf({ schedule: '0 2 * * *', duration: '30s' }), /^InvalidDuration: .*at least 1m/);
    assert.match(reasonOf({ ...nightly, timeZone: 'Mars/Olympus' }), /^InvalidTimeZone: .*IANA/);
  });

  it('when a time is shown, it should be to the minute in UTC', () => {
    assert.equal(isoMinutes(at('2026-12-01T02:00:59.123Z')), '2026-12-01T02:00Z');
  });
});
