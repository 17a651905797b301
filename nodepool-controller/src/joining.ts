/**
 * Hosts that booted but never joined (the usual failure of a hosted control plane's node join: Machines
 * created, hosts up, no CSR ever approved). A Machine counts as booted once Cluster API reports its
 * infrastructure provisioned, and as late once that is older than the join timeout without a Node.
 */
import { ANNOTATIONS } from '../../api/src/keys.js';
import type { Machine } from '../../api/src/capi.js';

interface LateJoin {
  machine: string;
  /** When the host booted (RFC3339). */
  since: string;
  reason: string;
}

export interface JoinStatus {
  /** Booted hosts without a Node yet, late or not. */
  waiting: number;
  /** Those past the timeout, oldest first. */
  late: LateJoin[];
  /** When the next waiting host becomes late (ms from now), so the condition flips on time. */
  nextLateInMs?: number;
}

function bootedAt(m: Machine): number | undefined {
  const c = m.status?.conditions?.find((x) => x.type === 'InfrastructureReady');
  if (c?.status !== 'True' || !c.lastTransitionTime) return undefined;
  const t = Date.parse(c.lastTransitionTime);
  return Number.isNaN(t) ? undefined : t;
}

export function joinStatus(machines: readonly Machine[], nowMs: number, timeoutMs: number): JoinStatus {
  const waiting = machines
    .filter((m) => !m.metadata.deletionTimestamp && !m.status?.nodeRef?.name)
    .flatMap((m) => {
      const at = bootedAt(m);
      return at === undefined ? [] : [{ m, at }];
    })
    .sort((a, b) => a.at - b.at || a.m.metadata.name.localeCompare(b.m.metadata.name));
  const late = waiting
    .filter((w) => nowMs - w.at >= timeoutMs)
    .map((w) => ({
      machine: w.m.metadata.name,
      since: new Date(w.at).toISOString(),
      reason:
        w.m.metadata.annotations?.[ANNOTATIONS.joinFailure] ?? 'no client certificate request was approved for it',
    }));
  const next = waiting.find((w) => nowMs - w.at < timeoutMs);
  return { waiting: waiting.length, late, ...(next ? { nextLateInMs: next.at + timeoutMs - nowMs } : {}) };
}
