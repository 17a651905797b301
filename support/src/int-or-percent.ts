/**
 * Kubernetes' int-or-percent fields (maxUnavailable, maxSurge, and the same values carried as annotation
 * text) resolved against a count, the way the Deployment controller does: a number as it is, "N%" as N percent
 * of the count, rounded down unless the caller rounds up (maxSurge).
 */
import type { IntOrPercent } from '../../api/src/nodepool.js';

/** The value as a whole number; undefined when it is absent or neither an integer nor "N%" ("3" counts as 3). */
export function resolveIntOrPercent(value: IntOrPercent | undefined, total: number, round: 'down' | 'up' = 'down'): number | undefined {
  if (typeof value === 'number') return Number.isFinite(value) ? Math.floor(value) : undefined;
  const text = (value ?? '').trim();
  const percent = /^(\d+)%$/.exec(text);
  if (percent) return (round === 'up' ? Math.ceil : Math.floor)((total * Number(percent[1])) / 100);
  return /^\d+$/.test(text) ? Number(text) : undefined;
}

/** An in-place pool's maxUnavailable: at least 1 (else nothing would ever move), and 1 when absent or unreadable. */
export function resolveMaxUnavailable(value: IntOrPercent | undefined, total: number): number {
  return Math.max(1, resolveIntOrPercent(value, total) ?? 1);
}
