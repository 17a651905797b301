/** spec.pausedUntil: "true" (until unset), "false", or an RFC3339 date until which the children are paused. */
export interface PauseState {
  paused: boolean;
  /** "true" or the date, for the condition message. */
  until?: string;
  /** When the pause ends, for a requeue at that moment. */
  resumeInMs?: number;
}

export function pauseState(pausedUntil: string | undefined, nowMs: number): PauseState {
  if (pausedUntil === undefined || pausedUntil === '' || pausedUntil.toLowerCase() === 'false')
    return { paused: false };
  if (pausedUntil.toLowerCase() === 'true') return { paused: true, until: 'true' };
  const at = Date.parse(pausedUntil);
  if (Number.isNaN(at) || at <= nowMs) return { paused: false };
  return { paused: true, until: pausedUntil, resumeInMs: at - nowMs };
}
