/**
 * Kubernetes' int-or-percent fields (maxUnavailable, maxSurge, and the same values carried as annotation
 * text) resolved against a count, the way the Deployment controller does: a number as it is, "N%" as N percent
 * of the count, rounded down unless the caller rounds up (maxSurge).
 */
import type { IntOrPercent } from '../../api/src/nodepool.js';

/** The value as a whole number; undefined when it is absent or neither an integer nor "N%" ("3" counts as 3). */
export function resolveIntOrPercent(
  value: IntOrPercent | undefined,
  total: number,
  round: 'down' | 'up' = 'down',
): number | undefined {
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

/** A rolling update's bounds, as Cluster API (like the Deployment controller) resolves them: maxSurge rounds up,
 * maxUnavailable down; both absent or 0 means maxUnavailable 1, or the rollout could never move. */
export function resolveFenceposts(
  surge: IntOrPercent | undefined,
  unavailable: IntOrPercent | undefined,
  replicas: number,
): { maxSurge: number; maxUnavailable: number } {
  const maxSurge = resolveIntOrPercent(surge, replicas, 'up') ?? 0;
  const maxUnavailable = resolveIntOrPercent(unavailable, replicas) ?? 0;
  return maxSurge === 0 && maxUnavailable === 0 ? { maxSurge, maxUnavailable: 1 } : { maxSurge, maxUnavailable };
}
