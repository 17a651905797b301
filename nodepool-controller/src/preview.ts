/**
 * The NodePool controller's public face for read-only callers (`kindling plan`): previewNodePool runs the
 * reconcile's own input and skew phases over objects read elsewhere, with a writer that refuses every write,
 * and answers the verdicts, the target hash and its inputs, what is deployed, and the children as the
 * reconcile would apply them. Nothing outside this folder imports the controller's other modules (the fence in
 * eslint.config.js), so its internals can change behind this list.
 */
import type * as k8s from '#k8s';
import type { NodePool, VersionSkip } from '../../api/src/nodepool.js';
import type { Machine, MachineDeployment, MachineSet } from '../../api/src/capi.js';
import type { KindlingConfigTemplate } from '../../api/src/bootstrap.js';
import { createLogger } from '../../support/src/logger.js';
import { realClock } from '../../support/src/timers.js';
import { Caches } from './caches.js';
import type { CacheSource, Writer } from './store.js';
import { formatVersion, tagVersionResolver, type ReleaseVersionResolver, type Version } from './release.js';
import { SKEW_POLICIES, checkPolicy, poolSkewInput, skewCondition } from './skew.js';
import type { ControlPlaneVersions } from './guest.js';
import type { HashInputs } from './hash.js';
import type { Observations, Verdict } from './status.js';
import { pauseState } from './pause-state.js';
import { deployedEffective, evaluateTarget, type Evaluation } from './phases/inputs.js';
import { desiredToken, targetEffective } from './phases/secrets.js';
import { desiredChild, observeCapacity } from './phases/children.js';
import type { InfrastructureTemplates } from './templates.js';
import { evaluateGate } from './phases/gate.js';
import type { GateVerdict } from './rollout-gate.js';
import { hashInputs, newScope, type Effective, type PhaseDeps, type Scope, type Target } from './phases/scope.js';

export {
  desiredBootstrapTemplate,
  desiredMachineDeployment,
  desiredMachinePropagation,
  desiredMachineSet,
} from './capi.js';
export { contains, ownedFields, ownsMoreThan } from './diff.js';
export { changedInputs, configHash, normaliseConfig } from './hash.js';
export { documentChanges as changedDocuments, documentSources, type DocumentChange } from './rollout-record.js';
export { desiredTokenSecret } from './desired-secrets.js';
export { desiredNode } from './nodes.js';
export { hashOfBootstrap } from './phases/scope.js';
export { clusterApiFailure, clusterApiWaiting } from './capi-progress.js';
export { formatVersion, parseVersion, type ReleaseVersionResolver, type Version } from './release.js';
export { createGuestVersions, type ControlPlaneVersions } from './guest.js';
export { createInfrastructureTemplates, type InfrastructureTemplates } from './templates.js';
export { SKEW_POLICIES, checkPolicy, type SkewInput } from './skew.js';
export { NODEPOOL_CONTROLLER_FLAGS } from './command.js';
export type { Verdict } from './status.js';

/** What the preview reads: the pool and its objects in the management cluster, and where versions come from. */
export interface PreviewState {
  pool: NodePool;
  configMaps: readonly k8s.V1ConfigMap[];
  /** The pool's token and user-data Secrets. */
  secrets: readonly k8s.V1Secret[];
  machineSets: readonly MachineSet[];
  machineDeployments: readonly MachineDeployment[];
  machines: readonly Machine[];
  versions: ControlPlaneVersions;
  /** Absent: the release version is read from the image's tag, as the controller's default resolver does. */
  releases?: ReleaseVersionResolver;
  /** Absent: no template reports capacity (a pool that may scale to zero uses its spec's). */
  templates?: InfrastructureTemplates;
  maxSkewMinors: number;
  now: number;
}

/** A change to preview instead of the pool's own spec: a whole spec, then a release image and config ConfigMaps. */
export interface PreviewOverride {
  spec?: NodePool['spec'];
  release?: string;
  config?: readonly string[];
}

interface SkewPreview {
  /** The control plane's version, or why it could not be read. */
  controlPlane: { version?: string; error?: string };
  /** Each skew policy, in the controller's order, with its verdict on the target (none without a target);
   * empty when the control plane's version is unknown. */
  policies: { title: string; skippable?: VersionSkip; verdict?: Verdict<'SupportedVersionSkew'> }[];
}

export interface NodePoolPreview {
  /** The pool previewed (with the override applied). */
  pool: NodePool;
  verdicts: Pick<Observations, 'release' | 'config' | 'skew'>;
  skew: SkewPreview;
  /** The hash the spec asks for; absent when the release or config is invalid. */
  target?: { hash: string; inputs: HashInputs; version: Version };
  /** What the live child boots, with the inputs its token Secret recorded (if it is still there). */
  deployed?: { hash: string; version?: Version; inputs?: HashInputs };
  /** Why the target may not roll out; absent when it may. */
  blocked?: string;
  /** spec.pausedUntil in effect ("true" or the date). */
  paused?: string;
  /** The rollout gate's verdict on the change (the maintenance window, the health gate), when the hash changes. */
  gate?: GateVerdict;
  /** The hash and version the children are written with once the target's token exists. */
  effective?: Effective;
  /** What the reconcile would apply: the target's token Secret (before the ignition server adds the token),
   * and the MachineSet or MachineDeployment with its bootstrap template (ClusterAPI engine). */
  desiredChildren: {
    tokenSecret?: k8s.V1Secret;
    child?: MachineSet | MachineDeployment;
    bootstrapTemplate?: KindlingConfigTemplate;
  };
}

const refuse = (): Promise<never> => Promise.reject(new Error('a NodePool preview writes nothing'));
const refusingWriter: Writer = { count: 0, apply: refuse, applyStatus: refuse, mergePatch: refuse, remove: refuse };

function source<T extends k8s.KubernetesObject>(items: readonly T[]): CacheSource<T> {
  const inNs = (o: T, ns?: string): boolean => ns === undefined || o.metadata?.namespace === ns;
  return {
    get: ({ namespace, name }) => items.find((o) => o.metadata?.name === name && inNs(o, namespace)),
    list: (ns) => items.filter((o) => inNs(o, ns)),
  };
}

function readOnlyDeps(state: PreviewState, pool: NodePool): PhaseDeps {
  const caches = new Caches({
    nodePools: source([pool]),
    configMaps: source(state.configMaps),
    secrets: source(state.secrets),
    machineSets: source(state.machineSets),
    machineDeployments: source(state.machineDeployments),
    healthChecks: source([]),
    machines: source(state.machines),
  });
  const config = { ignition: { endpoint: '', caPem: '' }, tokenGraceMs: 0, maxSkewMinors: state.maxSkewMinors };
  return {
    caches,
    writer: refusingWriter,
    versions: state.versions,
    releases: state.releases ?? tagVersionResolver,
    clock: realClock,
    config,
    ...(state.templates ? { templates: state.templates } : {}),
  };
}

function overridden(pool: NodePool, override: PreviewOverride | undefined): NodePool {
  if (!override) return pool;
  const out = structuredClone(pool);
  if (override.spec) out.spec = structuredClone(override.spec);
  if (override.release !== undefined) out.spec.release = { ...out.spec.release, image: override.release };
  if (override.config !== undefined) out.spec.config = override.config.map((name) => ({ name }));
  return out;
}

/** Every skew policy's verdict on the target (the controller stops at the first that fails; a preview shows all). */
async function skewPreview(s: Scope, deps: PhaseDeps, e: Evaluation): Promise<SkewPreview> {
  const reason = s.obs.skew?.reason;
  if (reason === 'ControlPlaneUnreachable' || reason === 'GuestKubeconfigRefused')
    return { controlPlane: { error: s.obs.skew?.message ?? '' }, policies: [] };
  if (!e.target)
    return {
      controlPlane: {},
      policies: SKEW_POLICIES.map((p) => ({ title: p.title, ...(p.skippable ? { skippable: p.skippable } : {}) })),
    };
  // The skew phase asked the same source a moment ago; the guest version cache answers this one.
  const controlPlane = await deps.versions.versionOf(s.ns, s.pool.spec.clusterName);
  const versions = { node: e.target.version, controlPlane, current: e.deployed?.version };
  const input = poolSkewInput(s.pool, versions, deps.config.maxSkewMinors);
  const policies = SKEW_POLICIES.map((p): SkewPreview['policies'][number] => ({
    title: p.title,
    ...(p.skippable ? { skippable: p.skippable } : {}),
    verdict: skewCondition(checkPolicy(p, input)),
  }));
  return { controlPlane: { version: formatVersion(controlPlane) }, policies };
}

function desiredChildren(
  s: Scope,
  deps: PhaseDeps,
  rolling: Target | undefined,
  effective: Effective | undefined,
): NodePoolPreview['desiredChildren'] {
  const desired = effective ? desiredChild(s, deps, effective) : undefined;
  return {
    ...(rolling ? { tokenSecret: desiredToken(s, rolling) } : {}),
    ...(desired ? { child: desired.child } : {}),
    ...(desired?.template ? { bootstrapTemplate: desired.template } : {}),
  };
}

function deployedOf(s: Scope, deps: PhaseDeps, e: Evaluation): NodePoolPreview['deployed'] {
  if (!e.deployed) return undefined;
  const inputs = hashInputs(s, deps, e.deployed.hash);
  return { ...e.deployed, ...(inputs ? { inputs } : {}) };
}

/** What the NodePool controller would do with a pool, computed by its own phases, writing nothing. */
export async function previewNodePool(state: PreviewState, override?: PreviewOverride): Promise<NodePoolPreview> {
  const pool = overridden(state.pool, override);
  const s = newScope(pool, createLogger({ name: 'nodepool-preview', level: 'silent' }), state.now);
  const deps = readOnlyDeps(state, pool);
  const e = await evaluateTarget(s, deps);
  const { verdict } = evaluateGate(s, deps, e);
  // What the reconcile applies once the target's token is minted (until then it keeps the deployed hash).
  const rolling = e.blocked === undefined ? e.target : undefined;
  const effective = rolling ? targetEffective(rolling) : deployedEffective(e.deployed);
  if (effective) await observeCapacity(s, deps);
  const pause = pauseState(pool.spec.pausedUntil, state.now);
  const deployed = deployedOf(s, deps, e);
  return {
    pool,
    verdicts: { release: s.obs.release, config: s.obs.config, skew: s.obs.skew },
    skew: await skewPreview(s, deps, e),
    ...(e.target ? { target: e.target } : {}),
    ...(deployed ? { deployed } : {}),
    ...(e.blocked === undefined ? {} : { blocked: e.blocked }),
    ...(pause.paused ? { paused: pause.until } : {}),
    ...(verdict ? { gate: verdict } : {}),
    ...(effective ? { effective } : {}),
    desiredChildren: desiredChildren(s, deps, rolling, effective),
  };
}
