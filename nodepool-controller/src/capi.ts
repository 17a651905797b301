/**
 * The Cluster API children of a pool, as pure functions: MachineDeployment (Replace, and InPlace with the
 * ClusterAPI engine, whose Machines boot from a KindlingConfigTemplate per hash) or MachineSet (InPlace),
 * the MachineHealthCheck (autoRepair), and what the pool propagates onto existing Machines. All
 * cluster.x-k8s.io/v1beta2 (CAPI's storage version), named after the pool, controlled by it.
 */
import { ANNOTATIONS, LABELS, bootstrapTemplateName, userDataSecretName } from '../../api/src/keys.js';
import {
  BOOTSTRAP_API_VERSION,
  BOOTSTRAP_GROUP_NAME,
  KINDLING_CONFIG_TEMPLATE_KIND,
  type KindlingConfigTemplate,
} from '../../api/src/bootstrap.js';
import {
  CAPI_API_VERSION,
  type MachineDeployment,
  type MachineHealthCheck,
  type MachineSet,
  type MachineSpec,
  type MachineTaint,
  type MachineTemplate,
} from '../../api/src/capi.js';
import { DEFAULT_HEALTH_CHECK_TIMEOUT, inPlaceEngine, type NodePool } from '../../api/src/nodepool.js';
import { effectiveDisruptionPolicy } from '../../api/src/disruption.js';
import { resolveMaxUnavailable } from '../../support/src/int-or-percent.js';
import { ownerReference } from './desired-secrets.js';

/** What the children point at: the config hash (its user-data) and the release's Kubernetes version. */
export interface ChildOptions {
  hash: string;
  /** "v1.36.3" */
  version: string;
  /** spec.replicas of the live child, if any: with autoscaling, the autoscaler owns it (kept when in range). */
  liveReplicas?: number;
  /** The autoscaler's capacity annotations of a pool that may scale to zero (capacity.ts). */
  capacity?: Record<string, string>;
  /** Why no node may be handed out now (rollout-gate.ts): the in-place engines read it from the child. */
  hold?: string;
  /** Why no node may drain or reboot now (rollout-gate.ts): the in-place engines hand it to the agents. */
  ceiling?: string;
  /** The rollout replaces Machines (always on Replace; on the ClusterAPI engine, a new infrastructure template or
   * a payload the extension cannot take in place): a hold pauses the MachineDeployment. */
  replacesMachines?: boolean;
}

const holdAnnotations = (opts: ChildOptions): Record<string, string> => ({
  ...(opts.hold === undefined ? {} : { [ANNOTATIONS.rolloutHold]: opts.hold }),
  ...(opts.ceiling === undefined ? {} : { [ANNOTATIONS.rolloutCeiling]: opts.ceiling }),
});

const GO_UNITS: Record<string, number> = { ns: 1e-9, us: 1e-6, µs: 1e-6, ms: 1e-3, s: 1, m: 60, h: 3600 };

/** A Go duration ("1h30m", "90s", "1.5h") in whole seconds, rounded down; undefined when unset. */
export function durationSeconds(text: string | undefined): number | undefined {
  if (text === undefined || text === '') return undefined;
  const parts = [...text.matchAll(/(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)/g)];
  if (parts.length === 0 || parts.map((p) => p[0]).join('') !== text) throw new Error(`"${text}" is not a duration`);
  return Math.floor(parts.reduce((s, p) => s + Number(p[1]) * (GO_UNITS[p[2] ?? ''] ?? 0), 0) + 1e-9);
}

/** Labels that identify a pool's objects: the selector of its children, always in their template. */
function selectorLabels(pool: NodePool): Record<string, string> {
  return { [LABELS.nodePool]: pool.metadata.name, [LABELS.capiClusterName]: pool.spec.clusterName };
}

/** Replicas the child should have: the pool's count, or with autoscaling the live count clamped into [min, max]. */
export function desiredReplicas(pool: NodePool, liveReplicas: number | undefined): number {
  const scaling = pool.spec.autoScaling;
  if (!scaling) return pool.spec.replicas ?? 0;
  return Math.min(scaling.max, Math.max(scaling.min, liveReplicas ?? scaling.min));
}

function autoscalerAnnotations(pool: NodePool, opts: ChildOptions): Record<string, string> {
  const scaling = pool.spec.autoScaling;
  if (!scaling) return {};
  return {
    [ANNOTATIONS.autoscalerMinSize]: String(scaling.min),
    [ANNOTATIONS.autoscalerMaxSize]: String(scaling.max),
    ...(scaling.min === 0 ? opts.capacity : {}),
  };
}

function machineTaints(pool: NodePool): MachineTaint[] {
  return (pool.spec.taints ?? []).map((t) => ({
    key: t.key,
    ...(t.value === undefined ? {} : { value: t.value }),
    effect: t.effect,
    propagation: 'Always',
  }));
}

/** The fields of a Machine that propagate in place (no rollout, Cluster API's in-place propagation list):
 * deletion timeouts, minReadySeconds and taints. */
function inPlaceSpec(pool: NodePool): Pick<MachineSpec, 'deletion' | 'taints' | 'minReadySeconds'> {
  const drain = durationSeconds(pool.spec.nodeDrainTimeout);
  const detach = durationSeconds(pool.spec.nodeVolumeDetachTimeout);
  const deleteNode = durationSeconds(pool.spec.nodeDeletionTimeout);
  const deletion = {
    ...(drain === undefined ? {} : { nodeDrainTimeoutSeconds: drain }),
    ...(detach === undefined ? {} : { nodeVolumeDetachTimeoutSeconds: detach }),
    ...(deleteNode === undefined ? {} : { nodeDeletionTimeoutSeconds: deleteNode }),
  };
  const taints = machineTaints(pool);
  const minReady = pool.spec.minReadySeconds;
  return {
    ...(Object.keys(deletion).length > 0 ? { deletion } : {}),
    ...(taints.length > 0 ? { taints } : {}),
    ...(minReady === undefined ? {} : { minReadySeconds: minReady }),
  };
}

/** The Machine metadata that propagates in place: the pool's node labels and Machine annotations. */
function inPlaceMetadata(pool: NodePool): { labels: Record<string, string>; annotations?: Record<string, string> } {
  const annotations = pool.spec.machineAnnotations ?? {};
  return {
    labels: { ...(pool.spec.nodeLabels ?? {}) },
    ...(Object.keys(annotations).length > 0 ? { annotations: { ...annotations } } : {}),
  };
}

/** Where a Machine's user-data comes from: the pool's Secret itself, or (ClusterAPI engine) its bootstrap template. */
function bootstrapOf(pool: NodePool, hash: string): MachineSpec['bootstrap'] {
  if (inPlaceEngine(pool) === 'ClusterAPI')
    return {
      configRef: {
        apiGroup: BOOTSTRAP_GROUP_NAME,
        kind: KINDLING_CONFIG_TEMPLATE_KIND,
        name: bootstrapTemplateName(pool.metadata.name, hash),
      },
    };
  return { dataSecretName: userDataSecretName(pool.metadata.name, hash) };
}

function machineTemplate(pool: NodePool, opts: ChildOptions): MachineTemplate {
  const metadata = inPlaceMetadata(pool);
  return {
    metadata: { ...metadata, labels: { ...metadata.labels, ...selectorLabels(pool) } },
    spec: {
      clusterName: pool.spec.clusterName,
      bootstrap: bootstrapOf(pool, opts.hash),
      infrastructureRef: { ...pool.spec.platform.infrastructureTemplateRef },
      version: opts.version,
      ...inPlaceSpec(pool),
    },
  };
}

function childMetadata(pool: NodePool, annotations: Record<string, string>): MachineSet['metadata'] {
  return {
    name: pool.metadata.name,
    namespace: pool.metadata.namespace,
    labels: selectorLabels(pool),
    ...(Object.keys(annotations).length > 0 ? { annotations } : {}),
    ownerReferences: [ownerReference(pool)],
  };
}

type Strategy = NonNullable<NonNullable<MachineDeployment['spec']['rollout']>['strategy']>;

function inPlaceStrategy(inPlace: NonNullable<NodePool['spec']['management']['inPlace']>): Strategy {
  return {
    type: 'RollingUpdate',
    rollingUpdate: { maxSurge: inPlace.maxSurge ?? 0, maxUnavailable: inPlace.maxUnavailable ?? 1 },
  };
}

/** Replace: the pool's replace strategy. ClusterAPI engine: a rolling update under the pool's in-place bounds
 * (an in-place update counts as unavailable in Cluster API, so maxUnavailable is what it means here too). */
function rolloutStrategy(pool: NodePool): Strategy {
  if (inPlaceEngine(pool) === 'ClusterAPI') return inPlaceStrategy(pool.spec.management.inPlace ?? {});
  const replace = pool.spec.management.replace ?? {};
  const type = replace.strategy ?? 'RollingUpdate';
  const rolling = replace.rollingUpdate ?? {};
  return type === 'RollingUpdate'
    ? { type, rollingUpdate: { maxSurge: rolling.maxSurge ?? 1, maxUnavailable: rolling.maxUnavailable ?? 0 } }
    : { type };
}

/** The health gate's timeout of an in-place pool (either engine), as its child carries it for the upgrader
 * or the extension to hand each node. */
const healthCheckTimeout = (pool: NodePool): string =>
  pool.spec.management.inPlace?.healthCheckTimeout ?? DEFAULT_HEALTH_CHECK_TIMEOUT;

/** What an in-place pool's child carries for the agents: the health gate's timeout and the effective
 * disruption policy (both engines). */
const inPlaceAnnotations = (pool: NodePool): Record<string, string> => ({
  [ANNOTATIONS.healthCheckTimeout]: healthCheckTimeout(pool),
  [ANNOTATIONS.disruptionPolicy]: JSON.stringify(
    effectiveDisruptionPolicy(pool.spec.management.inPlace?.disruptionPolicy),
  ),
});

/** A held rollout that replaces Machines pauses its MachineDeployment: Cluster API then only scales it (its
 * MachineSets keep their replicas, so the Machine being created or deleted finishes and no other starts) until
 * the pause is lifted. An in-place update on the ClusterAPI engine is held by the extension, which reads the
 * hold itself (ANNOTATIONS.rolloutHold). */
const pausedRollout = (pool: NodePool, opts: ChildOptions): { paused?: true } =>
  opts.hold !== undefined && (pool.spec.management.upgradeType === 'Replace' || opts.replacesMachines === true)
    ? { paused: true }
    : {};

/** Replace pools: CAPI rolls the machines when the template (user-data, version) changes. ClusterAPI-engine
 * pools: a new hash is a new bootstrap template, which CAPI updates in place where Kindling's extension can
 * (its UpdateMachine reads the health gate's timeout from the MachineDeployment). */
export function desiredMachineDeployment(pool: NodePool, opts: ChildOptions): MachineDeployment {
  const gate: Record<string, string> = inPlaceEngine(pool) === 'ClusterAPI' ? inPlaceAnnotations(pool) : {};
  return {
    apiVersion: CAPI_API_VERSION,
    kind: 'MachineDeployment',
    metadata: childMetadata(pool, { ...autoscalerAnnotations(pool, opts), ...gate, ...holdAnnotations(opts) }),
    spec: {
      clusterName: pool.spec.clusterName,
      replicas: desiredReplicas(pool, opts.liveReplicas),
      selector: { matchLabels: selectorLabels(pool) },
      template: machineTemplate(pool, opts),
      rollout: { strategy: rolloutStrategy(pool) },
      ...pausedRollout(pool, opts),
    },
  };
}

/** ClusterAPI engine: the bootstrap template of the pool at a hash, cloned by Cluster API per Machine. Its
 * spec never changes (a new hash is a new template), so Cluster API's comparison of templates sees the change. */
export function desiredBootstrapTemplate(pool: NodePool, hash: string): KindlingConfigTemplate {
  const labels = selectorLabels(pool);
  return {
    apiVersion: BOOTSTRAP_API_VERSION,
    kind: KINDLING_CONFIG_TEMPLATE_KIND,
    metadata: {
      ...childMetadata(pool, {}),
      name: bootstrapTemplateName(pool.metadata.name, hash),
      labels: { ...labels, [LABELS.configHash]: hash },
    },
    spec: { template: { metadata: { labels }, spec: { nodePool: pool.metadata.name, configHash: hash } } },
  };
}

/** InPlace pools: new machines boot the target hash; the upgrader moves existing ones (Flow 3 annotations). */
export function desiredMachineSet(pool: NodePool, opts: ChildOptions): MachineSet {
  const replicas = desiredReplicas(pool, opts.liveReplicas);
  const annotations = {
    ...autoscalerAnnotations(pool, opts),
    [ANNOTATIONS.targetConfigHash]: opts.hash,
    [ANNOTATIONS.maxUnavailable]: String(resolveMaxUnavailable(pool.spec.management.inPlace?.maxUnavailable, replicas)),
    ...inPlaceAnnotations(pool),
    ...holdAnnotations(opts),
  };
  return {
    apiVersion: CAPI_API_VERSION,
    kind: 'MachineSet',
    metadata: childMetadata(pool, annotations),
    spec: {
      clusterName: pool.spec.clusterName,
      replicas,
      selector: { matchLabels: selectorLabels(pool) },
      template: machineTemplate(pool, opts),
    },
  };
}

/** Defaults after HyperShift's: a Node NotReady/Unknown for 8 minutes, or not started in 20, is remediated;
 * at most 2 machines at once, so a wider outage (e.g. the network) does not delete the whole pool. */
const HEALTH_CHECK_DEFAULTS = {
  unhealthyAfterSeconds: 480,
  nodeStartupTimeoutSeconds: 1200,
  maxUnhealthy: 2,
} as const;

/** The pool's unhealthy timeout: its annotation when it holds a positive duration, else the default. */
function unhealthyAfterSeconds(pool: NodePool): number {
  try {
    const seconds = durationSeconds(pool.metadata.annotations?.[ANNOTATIONS.machineHealthCheckTimeout]);
    if (seconds !== undefined && seconds > 0) return seconds;
  } catch {
    // A malformed value keeps the default: remediation must never stop because of a typo.
  }
  return HEALTH_CHECK_DEFAULTS.unhealthyAfterSeconds;
}

export function desiredMachineHealthCheck(pool: NodePool): MachineHealthCheck {
  const after = unhealthyAfterSeconds(pool);
  return {
    apiVersion: CAPI_API_VERSION,
    kind: 'MachineHealthCheck',
    metadata: childMetadata(pool, {}),
    spec: {
      clusterName: pool.spec.clusterName,
      selector: { matchLabels: selectorLabels(pool) },
      checks: {
        nodeStartupTimeoutSeconds: HEALTH_CHECK_DEFAULTS.nodeStartupTimeoutSeconds,
        unhealthyNodeConditions: [
          { type: 'Ready', status: 'False', timeoutSeconds: after },
          { type: 'Ready', status: 'Unknown', timeoutSeconds: after },
        ],
      },
      remediation: { triggerIf: { unhealthyLessThanOrEqualTo: HEALTH_CHECK_DEFAULTS.maxUnhealthy } },
    },
  };
}

/** What the pool applies onto an existing Machine (server-side apply, its own field manager): node labels,
 * Machine annotations, taints, deletion timeouts and minReadySeconds. A key the pool drops is removed; keys others wrote are not touched. */
export function desiredMachinePropagation(
  pool: NodePool,
  machine: { name: string; namespace?: string },
): { apiVersion: string; kind: 'Machine'; metadata: Record<string, unknown>; spec: Partial<MachineSpec> } {
  return {
    apiVersion: CAPI_API_VERSION,
    kind: 'Machine',
    metadata: { name: machine.name, namespace: machine.namespace, ...inPlaceMetadata(pool) },
    spec: inPlaceSpec(pool),
  };
}
