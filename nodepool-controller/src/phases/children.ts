/**
 * The Cluster API children at the effective hash: the MachineSet or MachineDeployment (and its bootstrap
 * template), the KindlingConfigs' status, the MachineHealthCheck, and labels, taints and timeouts onto the
 * existing Machines and their guest Nodes.
 */
import { ANNOTATIONS, userDataSecretName } from '../../../api/src/keys.js';
import { hasMachineDeployment, inPlaceEngine } from '../../../api/src/nodepool.js';
import type { MachineDeployment, MachineSet } from '../../../api/src/capi.js';
import {
  BOOTSTRAP_API_VERSION,
  KINDLING_CONFIG_KIND,
  type KindlingConfig,
  type KindlingConfigTemplate,
} from '../../../api/src/bootstrap.js';
import { isConflict } from '../../../support/src/errors.js';
import { forEachLimited } from '../../../support/src/limited.js';
import { findKubeconfigRefusal } from '../../../support/src/guest-kubeconfig-parse.js';
import { kindlingConfigStatus, machineDataSecret, sameStatus } from '../bootstrap.js';
import {
  desiredBootstrapTemplate,
  desiredMachineDeployment,
  desiredMachineHealthCheck,
  desiredMachinePropagation,
  desiredMachineSet,
} from '../capi.js';
import { joinStatus } from '../joining.js';
import { keepLiveCapacity, scaleFromZero, type TemplateCapacity } from '../capacity.js';
import { applyIfNeeded, withKind } from '../apply.js';
import { CONTINUE, requeueAfter, type PhaseResult } from './result.js';
import { replacesMachines } from './observe.js';
import {
  DEFAULT_JOIN_TIMEOUT_MS,
  isoSeconds,
  liveChild,
  type Decision,
  type Effective,
  type PhaseDeps,
  type Scope,
  inPool,
} from './scope.js';

/** A pool that may scale to zero: what its infrastructure template reports of a node, else its spec's capacity. */
export async function observeCapacity(s: Scope, deps: PhaseDeps): Promise<void> {
  if (s.pool.spec.autoScaling?.min !== 0) return;
  let reported: TemplateCapacity | undefined;
  let unreadable: string | undefined;
  try {
    reported = await deps.templates?.capacityOf(s.ns, s.pool.spec.platform.infrastructureTemplateRef);
  } catch (err) {
    // The spec's capacity stands in for a template that cannot be read; the condition says why it was not read.
    unreadable = err instanceof Error ? err.message : String(err);
    s.log.info({ err: unreadable }, 'Cannot read the infrastructure template');
  }
  const computed = scaleFromZero(s.pool, reported, unreadable);
  s.obs.capacity =
    unreadable === undefined ? computed : keepLiveCapacity(computed, liveChild(s, deps)?.metadata.annotations);
}

/** The child as the reconcile applies it at the effective hash, with the bootstrap template it names (ClusterAPI engine). */
export function desiredChild(
  s: Scope,
  deps: PhaseDeps,
  effective: Effective,
  gate: Pick<Decision, 'hold' | 'ceiling'> = {},
): { child: MachineSet | MachineDeployment; template?: KindlingConfigTemplate } {
  const opts = {
    ...effective,
    liveReplicas: liveChild(s, deps)?.spec.replicas,
    ...(s.obs.capacity ? { capacity: s.obs.capacity.annotations } : {}),
    hold: gate.hold,
    ceiling: gate.ceiling,
    replacesMachines: replacesMachines(s, deps),
  };
  if (!hasMachineDeployment(s.pool)) return { child: desiredMachineSet(s.pool, opts) };
  const template =
    inPlaceEngine(s.pool) === 'ClusterAPI' ? desiredBootstrapTemplate(s.pool, effective.hash) : undefined;
  return { child: desiredMachineDeployment(s.pool, opts), ...(template ? { template } : {}) };
}

export async function phaseChildren(s: Scope, deps: PhaseDeps, d: Decision): Promise<PhaseResult> {
  if (!d.effective) return CONTINUE;
  await observeCapacity(s, deps);
  const live = liveChild(s, deps);
  const { child, template } = desiredChild(s, deps, d.effective, d);
  if (child.kind === 'MachineSet') {
    await applyIfNeeded(deps, live as MachineSet | undefined, child, deps.caches.machineSets);
  } else {
    // The template goes first: Cluster API reads it as soon as the MachineDeployment names it.
    if (template)
      await applyIfNeeded(
        deps,
        deps.caches.kindlingConfigTemplates.get(inPool(s, template.metadata.name)),
        template,
        deps.caches.kindlingConfigTemplates,
      );
    await applyIfNeeded(deps, live as MachineDeployment | undefined, child, deps.caches.machineDeployments);
  }
  return CONTINUE;
}

/** Kindling's bootstrap provider: each KindlingConfig gets its pool's user-data Secret. */
export async function phaseBootstrapConfigs(s: Scope, deps: PhaseDeps): Promise<PhaseResult> {
  const now = isoSeconds(s.now);
  for (const config of deps.caches.poolKindlingConfigs(s.ns, s.pool.metadata.name)) {
    if (config.metadata.deletionTimestamp) continue;
    const exists =
      deps.caches.secrets.get(inPool(s, userDataSecretName(config.spec.nodePool, config.spec.configHash))) !==
      undefined;
    const status = kindlingConfigStatus(config, exists, now);
    if (sameStatus(config.status, status)) continue;
    await deps.writer.applyStatus(
      {
        apiVersion: BOOTSTRAP_API_VERSION,
        kind: KINDLING_CONFIG_KIND,
        metadata: { name: config.metadata.name, namespace: s.ns },
        status,
      } as KindlingConfig,
      deps.caches.kindlingConfigs,
    );
  }
  return CONTINUE;
}

export async function phaseHealthCheck(s: Scope, deps: PhaseDeps, d: Decision): Promise<PhaseResult> {
  const live = deps.caches.healthChecks.get(inPool(s, s.pool.metadata.name));
  const reached = deps.caches
    .poolSecrets(s.ns, s.pool.metadata.name)
    .some((x) => x.metadata?.annotations?.[ANNOTATIONS.ignitionReachedAt]);
  if (s.pool.spec.management.autoRepair && reached && d.effective) {
    await applyIfNeeded(deps, live, desiredMachineHealthCheck(s.pool), deps.caches.healthChecks);
  } else if (live) {
    await deps.writer.remove(withKind(live, live.apiVersion, 'MachineHealthCheck'), deps.caches.healthChecks);
  }
  return CONTINUE;
}

/** Machine applies in flight at once: a label change of a pool of thousands must not be thousands of requests. */
const MACHINE_APPLIES_IN_FLIGHT = 8;

/** Labels, taints and timeouts reach existing Machines in place: no rollout. A host that booted and has no
 * Node yet is late at a known moment: the pool is looked at again then. */
export async function phaseMachines(s: Scope, deps: PhaseDeps, d: Decision): Promise<PhaseResult> {
  const machines = deps.caches.poolMachines(s.ns, s.pool.metadata.name);
  const timeoutMs = deps.config.joinTimeoutMs ?? DEFAULT_JOIN_TIMEOUT_MS;
  s.obs.joining = { ...joinStatus(machines, s.now, timeoutMs), timeoutMs };
  const result = s.obs.joining.nextLateInMs === undefined ? CONTINUE : requeueAfter(s.obs.joining.nextLateInMs + 500);
  if (!d.effective) return result;
  const alive = machines.filter((m) => !m.metadata.deletionTimestamp);
  const clusterApi = inPlaceEngine(s.pool) === 'ClusterAPI';
  const desired = (m: (typeof alive)[number]): ReturnType<typeof desiredMachinePropagation> => {
    const want = desiredMachinePropagation(s.pool, m.metadata);
    const config = m.spec.bootstrap.configRef
      ? deps.caches.kindlingConfigs.get(inPool(s, m.spec.bootstrap.configRef.name))
      : undefined;
    const secret = clusterApi ? machineDataSecret(m, config) : undefined;
    return secret === undefined ? want : { ...want, spec: { ...want.spec, bootstrap: { dataSecretName: secret } } };
  };
  const apply = (m: (typeof alive)[number]): Promise<unknown> =>
    applyIfNeeded(deps, m, desired(m) as unknown as typeof m, deps.caches.machines);
  await forEachLimited(alive, MACHINE_APPLIES_IN_FLIGHT, apply);
  return result;
}

/** Whether this reconcile already found the guest's control plane out of reach (the version-skew check): its
 * Nodes cannot be written either, and each try would hold a shared worker for a request deadline per Node. */
function guestOutOfReach(s: Scope): boolean {
  const reason = s.obs.skew?.reason;
  return reason === 'ControlPlaneUnreachable' || reason === 'GuestKubeconfigRefused';
}

/** Labels and taints reach the guest Nodes the pool's Machines run. A guest that cannot be reached does not
 * hold up the rest of the pool: the attempt is logged and retried later. */
export async function phaseNodes(s: Scope, deps: PhaseDeps): Promise<PhaseResult> {
  // The skew check's requeue brings the pool back to try again; its condition already says why.
  if (!deps.nodes || guestOutOfReach(s)) return CONTINUE;
  const names = deps.caches
    .poolMachines(s.ns, s.pool.metadata.name)
    .filter((m) => !m.metadata.deletionTimestamp)
    .map((m) => m.status?.nodeRef?.name)
    .filter((n): n is string => n !== undefined && n !== '');
  try {
    await deps.nodes.propagate(s.pool, names);
    return CONTINUE;
  } catch (err) {
    // A refused kubeconfig is the pool's SupportedVersionSkew condition already, not a log line per reconcile.
    if (findKubeconfigRefusal(err)) return requeueAfter(30_000);
    const conflict = isConflict((err as Error).cause);
    if (!conflict) s.log.warn({ err }, 'Could not propagate labels and taints to the guest Nodes');
    return requeueAfter(conflict ? 500 : 10_000);
  }
}
