/**
 * A MachineHealthCheck must not remediate a Machine whose node is being updated in place: the drain, the
 * reboot and the health gate make the node look unhealthy for a while, and Cluster API v1.14's MHC does not
 * spare a Machine under an in-place update on its own. It does honour `cluster.x-k8s.io/skip-remediation`
 * (its presence). Both engines set it when they hand the node a target and remove it once the node is done;
 * only the value Kindling writes is ever removed.
 */
import * as k8s from '#k8s';
import { type Machine } from '../../api/src/capi.js';
import { ANNOTATIONS, SKIP_REMEDIATION_INPLACE } from '../../api/src/keys.js';
import { isNotFound } from '../../support/src/errors.js';
import { RESOURCES } from '../../api/src/resources.js';

const merge = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch);

type MachineLike = Pick<Machine, 'metadata'>;

/** The annotation change `want` (skip or not) needs on this Machine, or undefined when none. */
export function skipRemediationChange(machine: MachineLike, want: boolean): string | null | undefined {
  const now = machine.metadata.annotations?.[ANNOTATIONS.capiSkipRemediation];
  if (want) return now === undefined ? SKIP_REMEDIATION_INPLACE : undefined;
  return now === SKIP_REMEDIATION_INPLACE ? null : undefined;
}

/** Sets or clears Kindling's skip-remediation on a Machine (from what the cache shows: nothing to do is free). */
async function setSkipRemediation(custom: k8s.CustomObjectsApi, machine: MachineLike, want: boolean): Promise<boolean> {
  const value = skipRemediationChange(machine, want);
  if (value === undefined) return false;
  await annotateMachine(custom, machine, { [ANNOTATIONS.capiSkipRemediation]: value });
  return true;
}

/** Kindling's skip-remediation onto a Machine whose node it updates; false when it was there already. */
export const spareFromRemediation = (custom: k8s.CustomObjectsApi, machine: MachineLike): Promise<boolean> =>
  setSkipRemediation(custom, machine, true);

/** Kindling's skip-remediation off a Machine whose node is done; false when it was not there. */
export const returnToRemediation = (custom: k8s.CustomObjectsApi, machine: MachineLike): Promise<boolean> =>
  setSkipRemediation(custom, machine, false);

/** Merge-patches a Machine's annotations (null removes one); a Machine deleted meanwhile needs nothing. */
export async function annotateMachine(
  custom: k8s.CustomObjectsApi,
  machine: MachineLike,
  annotations: Record<string, string | null>,
): Promise<void> {
  const { namespace = '', name } = machine.metadata;
  const body = { metadata: { annotations } };
  try {
    await custom.patchNamespacedCustomObject({ ...RESOURCES.machines, namespace, name, body }, merge);
  } catch (err) {
    if (!isNotFound(err)) throw err;
  }
}
