/**
 * The progress of an in-place rollout on the ClusterAPI engine, in the words the MachineSet engine's upgrader
 * writes on its MachineSet: "N of M updated", and where a paused rollout stopped. Cluster API keeps no such
 * count, so it is read from the pool's Machines: a Machine is at the target once its KindlingConfig names the
 * target's hash and no in-place update is under way on it (Cluster API rewrites the KindlingConfig when it
 * starts an update in place and keeps the update-in-progress annotation on the Machine until UpdateMachine
 * reports done; a Machine it created for a rollout boots the target). A rollout halts, as on the MachineSet
 * engine, on a node Degraded towards its target: the extension's UpdateMachine says so on the node's Machine.
 */
import type { Machine } from '../../api/src/capi.js';
import { ANNOTATIONS } from '../../api/src/keys.js';
import { pausedProgress } from '../../api/src/progress.js';

export interface ClusterApiProgressInput {
  machines: readonly Machine[];
  /** The config hash a KindlingConfig (by name) names; undefined when it is not known. */
  configHashOf: (kindlingConfig: string) => string | undefined;
  target: string;
  paused: boolean;
}

const updating = (m: Machine): boolean => m.metadata.annotations?.[ANNOTATIONS.capiUpdateInProgress] !== undefined;

export function clusterApiProgress({ machines, configHashOf, target, paused }: ClusterApiProgressInput): string {
  const alive = machines.filter((m) => !m.metadata.deletionTimestamp);
  const at = (m: Machine): boolean => {
    const ref = m.spec.bootstrap.configRef?.name;
    return ref !== undefined && configHashOf(ref) === target;
  };
  const done = alive.filter((m) => at(m) && !updating(m)).length;
  const pause = paused ? pausedProgress(done, alive.length, alive.filter(updating).length) : '';
  return `${done} of ${alive.length} updated${pause}`;
}

/** The annotation `key` of the first Machine (by name) still under an in-place update that carries it. */
function firstUpdating(machines: readonly Machine[], key: string): string | undefined {
  return machines
    .filter((m) => !m.metadata.deletionTimestamp && updating(m))
    .sort((a, b) => a.metadata.name.localeCompare(b.metadata.name))
    .map((m) => m.metadata.annotations?.[key])
    .find((f) => f !== undefined && f !== '');
}

/**
 * Where the rollout halted, "<node>: <reason>", as the MachineSet engine's upgrader writes it: the first Machine
 * (by name) still under an in-place update whose node the extension found Degraded (ANNOTATIONS.inPlaceFailure).
 */
export const clusterApiFailure = (machines: readonly Machine[]): string | undefined =>
  firstUpdating(machines, ANNOTATIONS.inPlaceFailure);

/** Where the rollout waits for the maintenance window, "<node>: <reason>": as clusterApiFailure, for a node whose
 * update the rollout's ceiling holds back (ANNOTATIONS.inPlaceWaiting). */
export const clusterApiWaiting = (machines: readonly Machine[]): string | undefined =>
  firstUpdating(machines, ANNOTATIONS.inPlaceWaiting);
