/**
 * What the drainer shows of a drain that a PodDisruptionBudget holds up: with nodeDrainTimeout 0 (the default)
 * such a drain waits forever, so each refusal must be seen on the Node (an annotation naming the pod and the
 * budget, rewritten only when that changes) and in a Warning Event, at most one per node and budget per
 * interval so a drain that retries every few seconds does not flood the guest's Events.
 */
import { formatDrainBlocked, parseDrainBlocked } from '../../api/src/drain-blocked.js';
import { formatDuration } from '../../support/src/config.js';
import type { Block } from './evict.js';

/** Default interval between two DrainBlocked Events of one node and budget. */
export const BLOCKED_EVENT_INTERVAL_MS = 5 * 60_000;

/** The Warning Event of one refusal: the pod, the budget, its disruptionsAllowed, and what the drain does next. */
export function blockedEvent(block: Block, timeoutMs: number): { type: 'Warning'; reason: string; message: string } {
  const allowed =
    block.disruptionsAllowed === undefined
      ? 'disruptionsAllowed not computed yet'
      : `disruptionsAllowed ${block.disruptionsAllowed}`;
  const next =
    timeoutMs > 0
      ? `retrying until nodeDrainTimeout ${formatDuration(timeoutMs)}`
      : 'no nodeDrainTimeout: retrying until the budget allows it';
  return {
    type: 'Warning',
    reason: 'DrainBlocked',
    message: `Eviction of ${block.pod} refused by PodDisruptionBudget ${block.pdb} (${allowed}: the budget ${block.detail}); ${next}`,
  };
}

/**
 * The drain-blocked annotation to write, given its current value and the blocks now: the oldest block, null
 * to remove it when nothing blocks, undefined when the current value says the same pod and budget already
 * (its time is kept, so a restarted drainer does not move it).
 */
export function blockedAnnotation(current: string | undefined, blocks: readonly Block[]): string | null | undefined {
  const first = blocks[0];
  if (!first) return current === undefined ? undefined : null;
  const shown = parseDrainBlocked(current);
  if (shown?.pod === first.pod && shown.pdb === first.pdb) return undefined;
  return formatDrainBlocked({ pod: first.pod, pdb: first.pdb, since: new Date(first.since).toISOString() });
}
