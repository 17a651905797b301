/**
 * What every phase of a NodePool reconcile shares: the read-only scope of one reconcile (the pool, the time,
 * the logger) with the observations for the status, the dependencies, the shapes one phase hands the next, and
 * the small readers of the caches several phases use. Phases return what they computed and a PhaseResult; the
 * only thing they accumulate is the observations, as Cluster API's conditions are.
 */
import type * as k8s from '#k8s';
import { SECRET_KEYS, hashOfBootstrapTemplate, hashOfUserData, tokenSecretName } from '../../../api/src/keys.js';
import { hasMachineDeployment, type NodePool } from '../../../api/src/nodepool.js';
import type { MachineDeployment, MachineSet, MachineSpec } from '../../../api/src/capi.js';
import type { Logger } from '../../../support/src/logger.js';
import type { Clock } from '../../../support/src/timers.js';
import { configHash, type HashInputs } from '../hash.js';
import type { ReleaseVersionResolver, Version } from '../release.js';
import type { ControlPlaneVersions } from '../guest.js';
import type { GuestNodes } from '../nodes.js';
import type { InfrastructureTemplates } from '../templates.js';
import type { IgnitionEndpoint } from '../desired-secrets.js';
import type { Observations } from '../status.js';
import type { Caches } from '../caches.js';
import type { Writer } from '../store.js';
import type { MintProgress } from '../mint-progress.js';
import type { ObjectKey } from '../../../support/src/object-key.js';

export interface ControllerConfig {
  ignition: IgnitionEndpoint;
  /** How long an old token stays valid after the pool's hash moved on. */
  tokenGraceMs: number;
  maxSkewMinors: number;
  /** How long a booted host may take to register its Node before AllNodesJoined says so (default 10 min). */
  joinTimeoutMs?: number;
}

export const DEFAULT_JOIN_TIMEOUT_MS = 10 * 60_000;

export interface PhaseDeps {
  caches: Caches;
  writer: Writer;
  versions: ControlPlaneVersions;
  releases: ReleaseVersionResolver;
  clock: Clock;
  config: ControllerConfig;
  /** Labels and taints onto the pool's guest Nodes; absent: the Nodes are left alone. */
  nodes?: GuestNodes;
  /** What infrastructure templates report of a node's capacity (scale from zero); absent: nothing. */
  templates?: InfrastructureTemplates;
  /** The ignition server's latest mint seen; absent: a new pool's first status waits only the first moments. */
  mints?: MintProgress;
}

/** One reconcile of one pool. Only `obs` changes while the phases run. */
export interface Scope {
  readonly pool: NodePool;
  readonly ns: string;
  readonly log: Logger;
  readonly now: number;
  readonly obs: Observations;
}

/** The key of the pool's object named `name`: its children and Secrets live in its namespace. */
export const inPool = (s: Pick<Scope, 'ns'>, name: string): ObjectKey => ({ namespace: s.ns, name });

export function newScope(pool: NodePool, log: Logger, now: number): Scope {
  return { pool, ns: pool.metadata.namespace ?? '', log, now, obs: { pool, machines: [], healthCheckExists: false } };
}

/** The config hash the spec asks for, with the inputs and release version it comes from. */
export interface Target {
  hash: string;
  inputs: HashInputs;
  version: Version;
}

/** What the live child boots today. */
export interface Deployed {
  hash: string;
  version?: Version;
}

/** The hash and version the children are written with. */
export interface Effective {
  hash: string;
  version: string;
}

/** What the writing phases work towards: the effective hash, and the target when it may roll out (its token
 * is being minted or exists, so its Secrets are kept). */
export interface Decision {
  effective?: Effective;
  rolling?: Target;
  /** Why no node may be handed out now (the rollout gate), written on the child. */
  hold?: string;
  /** Why no node may drain or reboot now (the rollout gate), written on the child. */
  ceiling?: string;
}

export function secretText(secret: k8s.V1Secret | undefined, key: string): string | undefined {
  const value = secret?.data?.[key];
  return value === undefined ? undefined : Buffer.from(value, 'base64').toString('utf8');
}

export function inputsOf(secret: k8s.V1Secret | undefined): HashInputs | undefined {
  const release = secretText(secret, SECRET_KEYS.release);
  const config = secretText(secret, SECRET_KEYS.config);
  return release === undefined || config === undefined ? undefined : { release, config };
}

export function tokenSecret(s: Scope, deps: PhaseDeps, hash: string): k8s.V1Secret | undefined {
  return deps.caches.secrets.get(inPool(s, tokenSecretName(s.pool.metadata.name, hash)));
}

/**
 * The inputs of the pool's token Secret at `hash`, only when they hash to it: a tenant can write Secrets in its
 * namespace, and an edited one must neither make a reboot look quiet, nor name changes that are not the hash's,
 * nor fail every reconcile with a config that is not JSON. Otherwise unknown, as of a token Secret gone.
 */
export function hashInputs(s: Scope, deps: PhaseDeps, hash: string): HashInputs | undefined {
  const inputs = inputsOf(tokenSecret(s, deps, hash));
  return inputs && configHash(inputs) === hash ? inputs : undefined;
}

export function liveChild(s: Scope, deps: PhaseDeps): MachineSet | MachineDeployment | undefined {
  const name = s.pool.metadata.name;
  return hasMachineDeployment(s.pool)
    ? deps.caches.machineDeployments.get(inPool(s, name))
    : deps.caches.machineSets.get(inPool(s, name));
}

/** The config hash a Machine template boots: its user-data Secret's, or (ClusterAPI engine) its bootstrap template's. */
export function hashOfBootstrap(pool: string, bootstrap: MachineSpec['bootstrap'] | undefined): string | undefined {
  return bootstrap?.configRef
    ? hashOfBootstrapTemplate(pool, bootstrap.configRef.name)
    : hashOfUserData(pool, bootstrap?.dataSecretName);
}

/** RFC 3339 to the second, as the API's timestamps are. */
export const isoSeconds = (ms: number): string => new Date(ms).toISOString().replace(/\.\d+Z$/, 'Z');
