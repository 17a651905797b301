/**
 * The agent's side of the node disruption policy (api/src/disruption.ts): what each change of a plan touches
 * as the policy names it, and the least action covering them all. A removal (record.ts) is a change like a
 * write. A unit's file, its drop-ins (`<unit>.d/*.conf`) and its enablement links (`<target>.wants/<unit>`)
 * are all that unit's.
 */
import { basename, dirname } from 'node:path';
import {
  leastDisruption,
  type ChangeTarget,
  type Disruption,
  type EffectiveDisruptionPolicy,
} from '../../api/src/disruption.js';
import type { EntryOrigin } from '../../support/src/ignition/ignition.js';
import type { UnitActions } from './host.js';

/** The unit a path under /etc/systemd/system belongs to. */
function unitOfPath(path: string): string {
  const folder = basename(dirname(path));
  return folder.endsWith('.d') ? folder.slice(0, -'.d'.length) : basename(path);
}

export function targetOf(change: { path: string; origin: EntryOrigin }): ChangeTarget {
  switch (change.origin) {
    case 'ssh':
      return { kind: 'sshKeys' };
    case 'unit':
      return { kind: 'unit', name: unitOfPath(change.path) };
    default:
      return { kind: 'file', path: change.path };
  }
}

/** The least action covering every change of a plan under the pool's policy. */
export function disruptionOf(
  policy: EffectiveDisruptionPolicy,
  changes: readonly { path: string; origin: EntryOrigin }[],
): Disruption {
  return leastDisruption(policy, changes.map(targetOf));
}

/**
 * Why a plan may not run now: it drains or reboots, and the rollout's ceiling (PAYLOAD_KEYS.rolloutCeiling, why
 * no node may do either now) forbids both. The controller let the change through judging from the pool's config;
 * the host can need more (the config it booted with unknown, a file drifted). Undefined when the plan may run.
 */
export function beyondCeiling(d: Disruption, ceiling: string | undefined): string | undefined {
  if (ceiling === undefined || (!d.drain && !d.reboot)) return undefined;
  return `the update needs ${d.reboot ? 'a reboot' : 'a drain'}; ${ceiling}: nothing applied until the rollout allows it`;
}

/** The unit actions of a disruption, when it runs any and does not reboot (a reboot covers them). */
export function unitActionsOf(d: Disruption): UnitActions | undefined {
  if (d.reboot || (!d.daemonReload && d.reload.length === 0 && d.restart.length === 0)) return undefined;
  return { daemonReload: d.daemonReload, reload: d.reload, restart: d.restart };
}

/** The systemctl commands that carry unit actions out, in order: daemon-reload, reloads, restarts. */
export function systemctlCommands(units: UnitActions): string[][] {
  return [
    ...(units.daemonReload ? [['daemon-reload']] : []),
    ...units.reload.map((u) => ['reload', u]),
    ...units.restart.map((u) => ['restart', u]),
  ];
}
