/**
 * Kindling's Cluster API bootstrap provider, the pure part: what a KindlingConfig's status says. Cluster API
 * clones a KindlingConfig per Machine from the pool's KindlingConfigTemplate (and rewrites its spec for an
 * in-place update); the answer is the pool's own user-data Secret for the config's hash, the one Secret the
 * pool's Machines share, so there is no per-Machine copy to keep in step with token rotations.
 */
import { ANNOTATIONS, userDataSecretName } from '../../api/src/keys.js';
import type { KindlingConfig, KindlingConfigStatus } from '../../api/src/bootstrap.js';

/** The v1beta2 bootstrap contract's answer for one KindlingConfig: the user-data Secret of its pool and hash, once it exists. */
export function kindlingConfigStatus(config: KindlingConfig, secretExists: boolean, now: string): KindlingConfigStatus {
  const name = userDataSecretName(config.spec.nodePool, config.spec.configHash);
  const generation = config.metadata.generation;
  const ready = secretExists
    ? {
        status: 'True' as const,
        reason: 'DataSecretAvailable',
        message: `User-data Secret ${name} holds the Ignition stub of pool ${config.spec.nodePool} at ${config.spec.configHash}`,
      }
    : {
        status: 'False' as const,
        reason: 'WaitingForDataSecret',
        message: `User-data Secret ${name} does not exist: the pool's config hash ${config.spec.configHash} is not (or no longer) deployed`,
      };
  const previous = config.status?.conditions?.find((c) => c.type === 'Ready');
  const lastTransitionTime = previous?.status === ready.status ? previous.lastTransitionTime : now;
  return {
    ...(secretExists ? { dataSecretName: name } : {}),
    initialization: { dataSecretCreated: secretExists },
    ...(generation === undefined ? {} : { observedGeneration: generation }),
    conditions: [
      {
        type: 'Ready',
        ...ready,
        lastTransitionTime,
        ...(generation === undefined ? {} : { observedGeneration: generation }),
      },
    ],
  };
}

/** What a status says that a write would change (timestamps aside). */
const gist = (s: KindlingConfigStatus | undefined): string => {
  const ready = s?.conditions?.[0];
  return JSON.stringify([
    s?.dataSecretName,
    s?.initialization?.dataSecretCreated,
    s?.observedGeneration,
    ready?.status,
    ready?.reason,
    ready?.message,
  ]);
};

/** Would writing `b` change what `a` says (timestamps aside)? */
export const sameStatus = (a: KindlingConfigStatus | undefined, b: KindlingConfigStatus): boolean =>
  gist(a) === gist(b);

/**
 * The data Secret a Machine of a ClusterAPI-engine pool should name: its KindlingConfig's, once an in-place
 * update is over. Cluster API copies the name onto the Machine only at first boot, so after an update the
 * Machine would keep naming the Secret it first booted from (which then could never be cleaned up). During an
 * update, and before Cluster API set one, the Machine keeps what it has (undefined: leave it alone).
 */
export function machineDataSecret(
  machine: { metadata: { annotations?: Record<string, string> }; spec: { bootstrap: { dataSecretName?: string } } },
  config: KindlingConfig | undefined,
): string | undefined {
  const current = machine.spec.bootstrap.dataSecretName;
  if (current === undefined) return undefined;
  const updating = machine.metadata.annotations?.[ANNOTATIONS.capiUpdateInProgress] !== undefined;
  return !updating && config?.status?.initialization?.dataSecretCreated && config.status.dataSecretName
    ? config.status.dataSecretName
    : current;
}
