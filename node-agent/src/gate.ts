/**
 * The health gate after an in-place update, and the rollback when it fails, as one pure decision over what
 * the agent knows: its journal (persisted in the host root, so it survives the reboots), this boot's ID, its
 * Node and the time. The agent carries out the decision and asks again at its next step.
 *
 *   applied, same boot ────────────────► reboot
 *   applied, new boot, gate not started ► startGate (the clock starts: now is written to the journal)
 *   applied, new boot, healthy ─────────► pass (written to the journal), then finish (uncordon, Done)
 *   applied, new boot, not healthy yet ─► wait, until the timeout: rollBack (restore the backup, journal
 *                                          phase rolledBack, reboot)
 *   rolledBack, same boot ──────────────► reboot
 *   rolledBack, new boot ───────────────► degrade with the reason (kept until desiredConfig changes)
 *
 * Healthy means the Node's status comes from this boot (status.nodeInfo.bootID is the host's boot ID: a
 * Ready written before the reboot proves nothing), its Ready condition is True, and its kubelet reports the
 * payload's kubelet version (from the payload's release file, when it has one).
 *
 * Without a reboot (the disruption policy's least action, disruption.ts): the unit actions run once the files
 * are written (runUnits), and a restart of any unit is gated like a reboot (the boot is the same, so the Node
 * must be Ready with the payload's kubelet version); a rollback restores the files and runs the same unit
 * actions again, so the units start from the previous files. A change that restarts nothing has no gate.
 */
import type * as k8s from '#k8s';
import { HOST_PATHS } from '../../api/src/host-paths.js';
import { DEFAULT_HEALTH_CHECK_TIMEOUT } from '../../api/src/nodepool.js';
import { formatDuration, parseDuration } from '../../support/src/config.js';
import type { Entry } from '../../support/src/ignition/ignition.js';
import type { Journal } from './host.js';

export const DEFAULT_HEALTH_CHECK_TIMEOUT_MS = parseDuration(DEFAULT_HEALTH_CHECK_TIMEOUT);

export type GateAction =
  | { kind: 'reboot' }
  | { kind: 'runUnits' }
  | { kind: 'startGate' }
  | { kind: 'pass' }
  | { kind: 'finish' }
  | { kind: 'wait'; why: string }
  | { kind: 'rollBack'; reason: string }
  | { kind: 'degrade'; reason: string };

export interface GateInput {
  journal: Journal;
  /** The host's boot ID now. */
  bootId: string;
  node: k8s.V1Node;
  now: number;
  timeoutMs: number;
}

function notReady(ready: k8s.V1NodeCondition | undefined): string | undefined {
  if (ready?.status === 'True') return undefined;
  if (!ready) return 'the Node is not Ready (no Ready condition)';
  const detail = [ready.reason, ready.message].filter(Boolean).join(': ');
  return `the Node is not Ready (Ready=${ready.status}${detail ? `, ${detail}` : ''})`;
}

/** Why the Node is not healthy yet for this boot and payload; undefined when it is. */
export function unhealthy(node: k8s.V1Node, bootId: string, kubeletVersion: string | undefined): string | undefined {
  const info: Partial<k8s.V1NodeSystemInfo> = node.status?.nodeInfo ?? {};
  if (info.bootID !== bootId)
    return `the kubelet has not reported since the reboot (the Node's bootID is ${JSON.stringify(info.bootID ?? '')}, the host's ${JSON.stringify(bootId)})`;
  const ready = notReady(node.status?.conditions?.find((c) => c.type === 'Ready'));
  if (ready) return ready;
  return otherVersion(info.kubeletVersion, kubeletVersion);
}

function otherVersion(reported: string | undefined, want: string | undefined): string | undefined {
  if (want === undefined || reported === want) return undefined;
  return `the kubelet reports ${reported || 'no version'}, not the payload's ${want}`;
}

/** Unit actions (no reboot) that have not run yet in this phase. */
const unitsPending = (journal: Journal): boolean => !journal.reboot && journal.units !== undefined && !journal.unitsRun;

/** A reboot or a restart of a unit: what the gate waits on. */
const gated = (journal: Journal): boolean => journal.reboot || (journal.units?.restart.length ?? 0) > 0;

/** After the rollback: its reboot (or its unit actions again), then Degraded for good (until desiredConfig changes). */
function afterRollback(journal: Journal, sameBoot: boolean): GateAction {
  if (sameBoot) return { kind: 'reboot' };
  if (unitsPending(journal)) return { kind: 'runUnits' };
  return { kind: 'degrade', reason: journal.reason ?? 'health check failed (rolled back)' };
}

function failed(journal: Journal, timeoutMs: number, why: string): GateAction {
  const restarts = journal.units?.restart.join(', ') ?? '';
  const after = journal.reboot ? `the reboot into ${journal.hash}` : `restarting ${restarts} for ${journal.hash}`;
  const undo = journal.reboot ? 'rebooted' : `restarted ${restarts} again`;
  return {
    kind: 'rollBack',
    reason: `health check failed: ${formatDuration(timeoutMs)} after ${after}, ${why}; restored the previous files and units and ${undo}`,
  };
}

export function gateAction(input: GateInput): GateAction {
  const { journal, bootId } = input;
  const sameBoot = journal.reboot && journal.bootId === bootId;
  if (journal.phase === 'rolledBack') return afterRollback(journal, sameBoot);
  if (sameBoot) return { kind: 'reboot' };
  if (unitsPending(journal)) return { kind: 'runUnits' };
  if (!gated(journal) || journal.healthy) return { kind: 'finish' };
  if (journal.gateStartedAt === undefined) return { kind: 'startGate' };
  const why = unhealthy(input.node, bootId, journal.kubeletVersion);
  if (why === undefined) return { kind: 'pass' };
  if (input.now - journal.gateStartedAt < input.timeoutMs) return { kind: 'wait', why };
  return failed(journal, input.timeoutMs, why);
}

/** The timeout a Node's annotation gives (a Go duration); the default when it is missing or unreadable. */
export function gateTimeoutMs(value: string | undefined): number {
  if (!value) return DEFAULT_HEALTH_CHECK_TIMEOUT_MS;
  try {
    return parseDuration(value);
  } catch {
    return DEFAULT_HEALTH_CHECK_TIMEOUT_MS;
  }
}

/** The kubelet version the payload's release file names, if it writes one. */
export function payloadKubeletVersion(entries: readonly Entry[]): string | undefined {
  const release = entries.find((e) => e.kind === 'file' && e.path === HOST_PATHS.releaseInfo);
  if (release?.kind !== 'file') return undefined;
  try {
    const version = (JSON.parse(release.data.toString('utf8')) as { kubeletVersion?: unknown }).kubeletVersion;
    return typeof version === 'string' && version !== '' ? version : undefined;
  } catch {
    return undefined;
  }
}
