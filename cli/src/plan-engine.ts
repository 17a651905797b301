/**
 * `kindling plan`: how each engine would roll a pool's change, asked of the code that rolls it. InPlace on a
 * MachineSet: the upgrader's rollout preview. InPlace on the ClusterAPI engine: its extension's answer, over
 * the pool's bootstrap templates as the controller writes them. Replace: Cluster API's rolling update bounds
 * (a MachineDeployment's, resolved the Deployment way) and the Machines whose template is older.
 */
import type { Machine, MachineDeployment, MachineSet } from '../../api/src/capi.js';
import type { HashInputs } from '../../api/src/config-hash.js';
import { configDisruption, type ConfigDisruption } from '../../api/src/disruption-config.js';
import { effectiveDisruptionPolicy } from '../../api/src/disruption.js';
import { ANNOTATIONS, hashOfUserData } from '../../api/src/keys.js';
import type { NodePool } from '../../api/src/nodepool.js';
import { resolveFenceposts } from '../../support/src/int-or-percent.js';
import { contains, desiredBootstrapTemplate, hashOfBootstrap } from '../../nodepool-controller/src/preview.js';
import {
  previewClusterApiUpdate,
  previewRollout,
  type ClusterApiPlan,
  type JsonObject,
} from '../../inplace-upgrader/src/preview.js';
import type { NodePoolPreview } from '../../nodepool-controller/src/preview.js';
import type { InPlacePlan, Plan, PlanInput, ReplacePlan } from './plan-model.js';

/**
 * What each node of an in-place payload change does, by the pool's disruption policy (the same judgement the
 * controller records in status.rollout); none for a Replace pool, a change the engine rolls, or unknown inputs.
 */
export function disruptionPlan(
  pool: NodePool,
  action: string,
  inputs: { before?: HashInputs; after?: HashInputs },
): ConfigDisruption | undefined {
  if (pool.spec.management.upgradeType !== 'InPlace' || action !== 'update-in-place') return undefined;
  if (!inputs.before || !inputs.after) return undefined;
  const policy = effectiveDisruptionPolicy(pool.spec.management.inPlace?.disruptionPolicy);
  return configDisruption(policy, inputs.before, inputs.after);
}

const alive = (machines: readonly Machine[]): Machine[] => machines.filter((m) => !m.metadata.deletionTimestamp);

/** The upgrader's rollout of the MachineSet (the live one, else the one the controller would create). */
export function inPlacePlan(
  input: PlanInput,
  ms: MachineSet | undefined,
  desired: MachineSet,
  paused: boolean,
): InPlacePlan {
  const ann = desired.metadata.annotations ?? {};
  const p = previewRollout({
    machineSet: ms ?? desired,
    target: ann[ANNOTATIONS.targetConfigHash] ?? '',
    maxUnavailable: ann[ANNOTATIONS.maxUnavailable],
    paused,
    machines: input.state.machines,
    nodes: input.state.nodes,
  });
  const nodes = p.nodes.map((n) => ({
    name: n.name,
    zone: n.zone,
    phase: n.phase,
    unavailable: n.unavailable,
    batch: n.batch,
  }));
  const blocks = { ...(p.halted ? { halted: p.halted } : {}), ...(p.stalled ? { stalled: p.stalled } : {}) };
  return {
    targetHash: p.target,
    maxUnavailable: p.maxUnavailable,
    nodes,
    batches: p.batches,
    machinesWithoutNode: p.machinesWithoutNode,
    ...blocks,
  };
}

/** ClusterAPI engine: what the extension would answer for the change from the live to the desired MachineDeployment. */
export function clusterApiPlan(opts: {
  pool: NodePool;
  live: MachineDeployment;
  desired: MachineDeployment;
  targetHash: string;
  config?: string;
}): ClusterApiPlan {
  const name = opts.pool.metadata.name;
  const bootstrap = (hash: string | undefined): JsonObject | undefined =>
    hash === undefined ? undefined : (desiredBootstrapTemplate(opts.pool, hash) as unknown as JsonObject);
  const current = bootstrap(hashOfBootstrap(name, opts.live.spec.template.spec.bootstrap));
  return previewClusterApiUpdate({
    pool: name,
    targetHash: opts.targetHash,
    live: opts.live,
    desired: opts.desired,
    bootstrap: { current, desired: bootstrap(opts.targetHash) },
    ...(opts.config === undefined ? {} : { config: opts.config }),
  });
}

/** Replace: Cluster API rolls the MachineDeployment within its bounds; its Machines on an older template go. */
export function replacePlan(input: PlanInput, desired: MachineDeployment): ReplacePlan {
  const replicas = desired.spec.replicas ?? 0;
  const strategy = desired.spec.rollout?.strategy;
  const { maxSurge, maxUnavailable } = resolveFenceposts(
    strategy?.rollingUpdate?.maxSurge,
    strategy?.rollingUpdate?.maxUnavailable,
    replicas,
  );
  const want = desired.spec.template.spec;
  const pool = input.pool.metadata.name;
  // A Machine's payload: the user-data it names (ClusterAPI engine: kept in step with its KindlingConfig), else its bootstrap template's.
  const hashOf = (b: Machine['spec']['bootstrap']): string | undefined =>
    hashOfUserData(pool, b.dataSecretName) ?? hashOfBootstrap(pool, b);
  const stale = alive(input.state.machines)
    .filter(
      (m) =>
        hashOf(m.spec.bootstrap) !== hashOf(want.bootstrap) ||
        m.spec.version !== want.version ||
        !contains(m.spec.infrastructureRef, { name: want.infrastructureRef.name }),
    )
    .map((m) => m.metadata.name)
    .sort();
  const onDelete = strategy?.type === 'OnDelete';
  return {
    strategy: onDelete ? 'OnDelete' : 'RollingUpdate',
    replicas,
    maxSurge,
    maxUnavailable,
    machines: stale,
    maxMachines: replicas + maxSurge,
    minAvailable: Math.max(0, replicas - maxUnavailable),
    waves: onDelete ? 0 : Math.ceil(stale.length / (maxSurge + maxUnavailable)),
  };
}

/** When the change would start, from the controller's rollout gate: now, when the maintenance window opens, or
 * once the health gate passes (or is overridden). Said only when there is a window or the gate has a say. */
export function startsOf(p: NodePoolPreview, now: number): Pick<Plan, 'starts'> {
  const gate = p.gate;
  if (!gate || (gate.reason === 'AsExpected' && !p.pool.spec.management.maintenanceWindow)) return {};
  const waitsForWindow = gate.reason === 'WaitingForMaintenanceWindow' && gate.recheckInMs !== undefined;
  const at = waitsForWindow ? { at: new Date(now + (gate.recheckInMs ?? 0)).toISOString() } : {};
  return { starts: { now: gate.allowed, ...at, reason: gate.reason, message: gate.message } };
}
