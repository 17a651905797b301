/**
 * spec.management.maintenanceWindow as pure functions of a time: is the window open at t, when does it close,
 * when does it next open. The schedule is a 5-field cron read in the window's time zone by croner (DST
 * included: a start in the skipped hour moves to the first minute after it, a start in the repeated hour
 * happens once, at its first occurrence); nothing here does calendar arithmetic of its own.
 */
import { Cron } from 'croner';
import type { ConditionReason } from '../../api/src/conditions.js';
import type { MaintenanceWindow } from '../../api/src/nodepool.js';
import { ConditionError } from './condition-error.js';
import { durationSeconds } from './capi.js';

const DEFAULT_TIME_ZONE = 'UTC';

/** A window that parsed: its schedule and how long each opening lasts. */
export interface ParsedWindow {
  readonly cron: Cron;
  readonly durationMs: number;
  readonly timeZone: string;
}

export type WindowState = { open: true; closesAt: number } | { open: false; opensAt?: number };

const problem = (
  reason: ConditionReason<'ValidMaintenanceWindow'>,
  message: string,
  cause?: unknown,
): ConditionError<'ValidMaintenanceWindow'> =>
  new ConditionError(message, 'ValidMaintenanceWindow', reason, cause === undefined ? undefined : { cause });

function checkTimeZone(timeZone: string): void {
  try {
    new Intl.DateTimeFormat('en', { timeZone });
  } catch (err) {
    throw problem(
      'InvalidTimeZone',
      `spec.management.maintenanceWindow.timeZone "${timeZone}" is not a time zone: use an IANA name such as Europe/Berlin or UTC`,
      err,
    );
  }
}

function durationMsOf(duration: string): number {
  let seconds: number | undefined;
  try {
    seconds = durationSeconds(duration);
  } catch (err) {
    throw problem(
      'InvalidDuration',
      `spec.management.maintenanceWindow.duration "${duration}" is not a duration such as 4h or 90m`,
      err,
    );
  }
  if (seconds === undefined || seconds < 60)
    throw problem(
      'InvalidDuration',
      `spec.management.maintenanceWindow.duration "${duration}" is shorter than a minute: a window must stay open at least 1m`,
    );
  return seconds * 1000;
}

/** The window, or a ConditionError of ValidMaintenanceWindow that says what is wrong in words a person reads. */
export function parseWindow(spec: MaintenanceWindow): ParsedWindow {
  const timeZone = spec.timeZone ?? DEFAULT_TIME_ZONE;
  checkTimeZone(timeZone);
  const durationMs = durationMsOf(spec.duration);
  try {
    return { cron: new Cron(spec.schedule, { timezone: timeZone, mode: '5-part' }), durationMs, timeZone };
  } catch (err) {
    const why = err instanceof Error ? err.message.replace(/^CronPattern: /, '') : String(err);
    throw problem(
      'InvalidSchedule',
      `spec.management.maintenanceWindow.schedule "${spec.schedule}" is not a 5-field cron expression (minute hour day-of-month month day-of-week, such as "0 2 * * 6"): ${why}`,
      err,
    );
  }
}

/** Open at t (an opening less than the duration before t, or at t), or when it next opens (none: a schedule
 * that never fires again, such as the 30th of February). With openings closer than the duration, closesAt is
 * the end of the first: the pool is looked at again then and finds the window open still. */
export function windowAt(w: ParsedWindow, t: number): WindowState {
  const start = w.cron.nextRun(new Date(t - w.durationMs))?.getTime();
  if (start !== undefined && start <= t) return { open: true, closesAt: start + w.durationMs };
  const next = w.cron.nextRun(new Date(t))?.getTime();
  return next === undefined ? { open: false } : { open: false, opensAt: next };
}

/** "2026-12-01T02:00Z": a window's times to the minute, as the status and the CLI show them. */
export const isoMinutes = (ms: number): string => new Date(ms).toISOString().replace(/:\d\d\.\d+Z$/, 'Z');
