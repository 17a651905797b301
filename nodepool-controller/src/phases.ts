/**
 * The ordered phases of a NodePool reconcile. Each reads the caches, may write one kind of object, and records
 * what it saw in the scope for the status. The target hash (from the spec) becomes the effective hash (what the
 * children point at) only when its inputs are valid, the version-skew policy passes and its token exists;
 * until then everything else (replicas, labels, taints, timeouts) keeps reconciling at the deployed hash.
 */
import type * as k8s from '@kubernetes/client-node';
import { ANNOTATIONS, LABELS, SECRET_KEYS, hashOfBootstrapTemplate, tokenSecretName, userDataSecretName } from '../../api/src/keys.js';
import { hasMachineDeployment, inPlaceEngine, type NodePool } from '../../api/src/nodepool.js';
import type { MachineDeployment, MachineSet, MachineSpec } from '../../api/src/capi.js';
import { BOOTSTRAP_API_VERSION, KINDLING_CONFIG_KIND, type KindlingConfig } from '../../api/src/bootstrap.js';
import { kindlingConfigStatus, machineDataSecret, sameStatus } from './bootstrap.js';
import { NotReadyError, TerminalError } from '../../support/src/errors.js';
import type { Logger } from '../../support/src/logger.js';
import type { Clock } from '../../support/src/timers.js';
import { changedInputs, configHash, normaliseConfig, type ConfigSource, type HashInput, type HashInputs } from './hash.js';
import { formatVersion, parseVersion, type ReleaseVersionResolver, type Version } from './release.js';
import { checkVersionSkew } from './skew.js';
import type { ControlPlaneVersions } from './guest.js';
import type { GuestNodes } from './nodes.js';
import { isConflict } from '../../support/src/errors.js';
import { desiredTokenSecret, desiredUserDataSecret, hashOfUserData, type IgnitionEndpoint } from './secrets.js';
import { desiredBootstrapTemplate, desiredMachineDeployment, desiredMachineHealthCheck, desiredMachinePropagation, desiredMachineSet } from './capi.js';
import { pauseState } from './pause.js';
import { clusterApiProgress } from './capi-progress.js';
import { keepOrExplain } from './why.js';
import type { RolloutRecord } from '../../api/src/nodepool.js';
import { joinStatus } from './joining.js';
import type { Observations } from './status.js';
import type { Caches } from './caches.js';
import type { Writer } from './store.js';
import { applyIfNeeded, withKind } from './apply.js';

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
}

interface Target {
  hash: string;
  inputs: HashInputs;
  version: Version;
}

interface Deployed {
  hash: string;
  version?: Version;
}

export interface Scope {
  pool: NodePool;
  ns: string;
  log: Logger;
  now: number;
  obs: Observations;
  target?: Target;
  /** Set when the target may not roll out (bad input, skew, control plane unreachable). */
  blocked: boolean;
  deployed?: Deployed;
  effective?: { hash: string; version: string };
  paused: boolean;
  requeueAfterMs?: number;
  notReady?: NotReadyError;
}

export function newScope(pool: NodePool, log: Logger, now: number): Scope {
  return { pool, ns: pool.metadata.namespace ?? '', log, now, obs: { pool, machines: [], healthCheckExists: false }, blocked: false, paused: false };
}

function requeue(s: Scope, ms: number): void {
  s.requeueAfterMs = Math.min(s.requeueAfterMs ?? ms, ms);
}

function secretText(secret: k8s.V1Secret | undefined, key: string): string | undefined {
  const value = secret?.data?.[key];
  return value === undefined ? undefined : Buffer.from(value, 'base64').toString('utf8');
}

export function inputsOf(secret: k8s.V1Secret | undefined): HashInputs | undefined {
  const release = secretText(secret, SECRET_KEYS.release);
  const config = secretText(secret, SECRET_KEYS.config);
  return release === undefined || config === undefined ? undefined : { release, config };
}

function tokenSecret(s: Scope, deps: PhaseDeps, hash: string): k8s.V1Secret | undefined {
  return deps.caches.secrets.get(s.ns, tokenSecretName(s.pool.metadata.name, hash));
}

function liveChild(s: Scope, deps: PhaseDeps): MachineSet | MachineDeployment | undefined {
  const name = s.pool.metadata.name;
  return hasMachineDeployment(s.pool) ? deps.caches.machineDeployments.get(s.ns, name) : deps.caches.machineSets.get(s.ns, name);
}

/** The config hash a Machine template boots: its user-data Secret's, or (ClusterAPI engine) its bootstrap template's. */
export function hashOfBootstrap(pool: string, bootstrap: MachineSpec['bootstrap'] | undefined): string | undefined {
  return bootstrap?.configRef ? hashOfBootstrapTemplate(pool, bootstrap.configRef.name) : hashOfUserData(pool, bootstrap?.dataSecretName);
}

// ---- inputs: release and config → the target hash ----

async function checkRelease(s: Scope, deps: PhaseDeps): Promise<Version | undefined> {
  try {
    const version = await deps.releases.versionOf(s.pool.spec.release.image);
    s.obs.release = { ok: true, reason: 'AsExpected', message: `Release ${formatVersion(version)}`, version: formatVersion(version) };
    return version;
  } catch (err) {
    if (!(err instanceof TerminalError)) throw new Error('failed to resolve the release version', { cause: err });
    s.obs.release = { ok: false, reason: err.reason, message: err.message };
    return undefined;
  }
}

function checkConfig(s: Scope, deps: PhaseDeps): string | undefined {
  const sources: ConfigSource[] = [];
  for (const ref of s.pool.spec.config ?? []) {
    const cm = deps.caches.configMaps.get(s.ns, ref.name);
    if (!cm) {
      s.obs.config = { ok: false, reason: 'ConfigMapMissing', message: `ConfigMap ${ref.name} does not exist in namespace ${s.ns}` };
      return undefined;
    }
    sources.push({ name: ref.name, data: cm.data ?? {} });
  }
  try {
    const config = normaliseConfig(sources);
    s.obs.config = { ok: true, reason: 'AsExpected', message: `${sources.length} config ConfigMaps are valid` };
    return config;
  } catch (err) {
    if (!(err instanceof TerminalError)) throw err;
    s.obs.config = { ok: false, reason: err.reason, message: err.message };
    return undefined;
  }
}

async function phaseInputs(s: Scope, deps: PhaseDeps): Promise<void> {
  const version = await checkRelease(s, deps);
  const config = checkConfig(s, deps);
  const child = liveChild(s, deps);
  const deployedHash = hashOfBootstrap(s.pool.metadata.name, child?.spec.template.spec.bootstrap);
  if (deployedHash !== undefined) s.deployed = { hash: deployedHash, version: parseVersion(child?.spec.template.spec.version ?? '') };
  if (version === undefined || config === undefined) {
    s.blocked = true;
    s.obs.pending = 'The pool\'s release or config is invalid: nothing changes until it is fixed';
    return;
  }
  const inputs = { release: s.pool.spec.release.image, config };
  s.target = { hash: configHash(inputs), inputs, version };
  s.obs.targetHash = s.target.hash;
}

// ---- version skew against the guest control plane ----

async function phaseSkew(s: Scope, deps: PhaseDeps): Promise<void> {
  const target = s.target;
  if (!target) return;
  let controlPlane: Version;
  try {
    controlPlane = await deps.versions.versionOf(s.ns, s.pool.spec.clusterName);
  } catch (err) {
    const why = err instanceof Error ? err.message : String(err);
    s.obs.skew = { ok: false, reason: 'ControlPlaneUnreachable', message: `Cannot read the version of cluster ${s.pool.spec.clusterName}'s control plane: ${why}` };
    block(s, target, 'the control plane version is unknown');
    requeue(s, 10_000);
    return;
  }
  const verdict = checkVersionSkew({ node: target.version, controlPlane, current: s.deployed?.version, maxMinorsBehind: deps.config.maxSkewMinors, allowPrerelease: s.pool.spec.release.allowPrerelease ?? false });
  s.obs.skew = { ok: verdict.ok, reason: verdict.ok ? 'AsExpected' : verdict.reason, message: verdict.message };
  if (!verdict.ok) block(s, target, verdict.message);
}

function block(s: Scope, target: Target, why: string): void {
  if (s.deployed?.hash === target.hash) return; // nothing would change anyway
  s.blocked = true;
  s.obs.pending = `The change to config hash ${target.hash} is blocked: ${why}`;
}

// ---- token and user-data Secrets ----

async function phaseToken(s: Scope, deps: PhaseDeps): Promise<void> {
  const target = s.target;
  const deployedEffective = s.deployed?.version ? { hash: s.deployed.hash, version: formatVersion(s.deployed.version) } : undefined;
  if (!target || s.blocked) {
    s.effective = deployedEffective;
    return;
  }
  const desired = desiredTokenSecret(s.pool, { hash: target.hash, inputs: target.inputs });
  const live = await applyIfNeeded(deps, tokenSecret(s, deps, target.hash), desired, deps.caches.secrets);
  if (secretText(live, SECRET_KEYS.token) === undefined) {
    s.effective = deployedEffective;
    s.obs.pending = `Waiting for the ignition server to mint the token of config hash ${target.hash}`;
    s.notReady = new NotReadyError(s.obs.pending, 5_000);
    return;
  }
  s.effective = { hash: target.hash, version: formatVersion(target.version) };
}

async function phaseUserData(s: Scope, deps: PhaseDeps): Promise<void> {
  if (!s.effective) return;
  const { hash } = s.effective;
  const token = secretText(tokenSecret(s, deps, hash), SECRET_KEYS.token);
  if (token === undefined) return;
  const desired = desiredUserDataSecret({ pool: s.pool, hash, token, ...deps.config.ignition });
  const live = deps.caches.secrets.get(s.ns, userDataSecretName(s.pool.metadata.name, hash));
  await applyIfNeeded(deps, live, desired, deps.caches.secrets);
}

// ---- Cluster API children ----

async function phaseChildren(s: Scope, deps: PhaseDeps): Promise<void> {
  if (!s.effective) return;
  const live = liveChild(s, deps);
  const opts = { ...s.effective, liveReplicas: live?.spec.replicas };
  let applied: MachineSet | MachineDeployment;
  if (!hasMachineDeployment(s.pool)) {
    applied = await applyIfNeeded(deps, live as MachineSet | undefined, desiredMachineSet(s.pool, opts), deps.caches.machineSets);
  } else {
    // The template goes first: Cluster API reads it as soon as the MachineDeployment names it.
    if (inPlaceEngine(s.pool) === 'ClusterAPI') {
      const template = desiredBootstrapTemplate(s.pool, s.effective.hash);
      await applyIfNeeded(deps, deps.caches.kindlingConfigTemplates.get(s.ns, template.metadata.name), template, deps.caches.kindlingConfigTemplates);
    }
    applied = await applyIfNeeded(deps, live as MachineDeployment | undefined, desiredMachineDeployment(s.pool, opts), deps.caches.machineDeployments);
  }
  s.obs.child = { desired: applied.spec.replicas ?? 0, available: applied.status?.availableReplicas ?? 0 };
}

// ---- Kindling's bootstrap provider: each KindlingConfig gets its pool's user-data Secret ----

async function phaseBootstrapConfigs(s: Scope, deps: PhaseDeps): Promise<void> {
  const now = new Date(s.now).toISOString().replace(/\.\d+Z$/, 'Z');
  for (const config of deps.caches.poolKindlingConfigs(s.ns, s.pool.metadata.name)) {
    if (config.metadata.deletionTimestamp) continue;
    const exists = deps.caches.secrets.get(s.ns, userDataSecretName(config.spec.nodePool, config.spec.configHash)) !== undefined;
    const status = kindlingConfigStatus(config, exists, now);
    if (sameStatus(config.status, status)) continue;
    await deps.writer.applyStatus({ apiVersion: BOOTSTRAP_API_VERSION, kind: KINDLING_CONFIG_KIND, metadata: { name: config.metadata.name, namespace: s.ns }, status } as KindlingConfig, deps.caches.kindlingConfigs);
  }
}

async function phaseHealthCheck(s: Scope, deps: PhaseDeps): Promise<void> {
  const live = deps.caches.healthChecks.get(s.ns, s.pool.metadata.name);
  const reached = deps.caches.poolSecrets(s.ns, s.pool.metadata.name).some((x) => x.metadata?.annotations?.[ANNOTATIONS.ignitionReachedAt]);
  if (s.pool.spec.management.autoRepair && reached && s.effective) {
    await applyIfNeeded(deps, live, desiredMachineHealthCheck(s.pool), deps.caches.healthChecks);
    s.obs.healthCheckExists = true;
  } else if (live) {
    await deps.writer.remove(withKind(live, live.apiVersion, 'MachineHealthCheck'), deps.caches.healthChecks);
  }
}

/** Labels, taints and timeouts reach existing Machines in place: no rollout. */
async function phaseMachines(s: Scope, deps: PhaseDeps): Promise<void> {
  const machines = deps.caches.poolMachines(s.ns, s.pool.metadata.name);
  s.obs.machines = machines;
  const timeoutMs = deps.config.joinTimeoutMs ?? DEFAULT_JOIN_TIMEOUT_MS;
  s.obs.joining = { ...joinStatus(machines, s.now, timeoutMs), timeoutMs };
  if (s.obs.joining.nextLateInMs !== undefined) requeue(s, s.obs.joining.nextLateInMs + 500);
  if (!s.effective) return;
  const alive = machines.filter((m) => !m.metadata.deletionTimestamp);
  const clusterApi = inPlaceEngine(s.pool) === 'ClusterAPI';
  const desired = (m: (typeof alive)[number]): ReturnType<typeof desiredMachinePropagation> => {
    const d = desiredMachinePropagation(s.pool, m.metadata);
    const config = m.spec.bootstrap.configRef ? deps.caches.kindlingConfigs.get(s.ns, m.spec.bootstrap.configRef.name) : undefined;
    const secret = clusterApi ? machineDataSecret(m, config) : undefined;
    return secret === undefined ? d : { ...d, spec: { ...d.spec, bootstrap: { dataSecretName: secret } } };
  };
  await Promise.all(alive.map((m) => applyIfNeeded(deps, m, desired(m) as unknown as typeof m, deps.caches.machines)));
}

/** Labels and taints reach the guest Nodes the pool's Machines run. A guest that cannot be reached does not
 * hold up the rest of the pool: the attempt is logged and retried later. */
async function phaseNodes(s: Scope, deps: PhaseDeps): Promise<void> {
  if (!deps.nodes) return;
  const names = deps.caches
    .poolMachines(s.ns, s.pool.metadata.name)
    .filter((m) => !m.metadata.deletionTimestamp)
    .map((m) => m.status?.nodeRef?.name)
    .filter((n): n is string => n !== undefined && n !== '');
  try {
    await deps.nodes.propagate(s.pool, names);
  } catch (err) {
    const conflict = isConflict((err as Error).cause);
    if (!conflict) s.log.warn({ err }, 'Could not propagate labels and taints to the guest Nodes');
    requeue(s, conflict ? 500 : 10_000);
  }
}

// ---- old Secrets: expire tokens, delete user-data nothing references ----

/** User-data names something still boots or rebuilds from: the child's template, CAPI's MachineSets, Machines. */
function referencedUserData(s: Scope, deps: PhaseDeps): Set<string | undefined> {
  const name = s.pool.metadata.name;
  return new Set<string | undefined>([
    liveChild(s, deps)?.spec.template.spec.bootstrap.dataSecretName,
    ...deps.caches.poolMachineSets(s.ns, name).map((m) => m.spec.template.spec.bootstrap.dataSecretName),
    ...deps.caches.poolMachines(s.ns, name).map((m) => m.spec.bootstrap.dataSecretName),
    ...deps.caches.poolKindlingConfigs(s.ns, name).map((c) => userDataSecretName(c.spec.nodePool, c.spec.configHash)),
    ...deps.caches.poolMachineSets(s.ns, name).map((m) => hashOfBootstrap(name, m.spec.template.spec.bootstrap)).map((h) => (h === undefined ? undefined : userDataSecretName(name, h))),
  ]);
}

/** Bootstrap templates of hashes no MachineSet points at any more (Cluster API reads a MachineSet's template
 * to create its Machines and to compare it with the next one, so a referenced one stays). */
async function retireBootstrapTemplates(s: Scope, deps: PhaseDeps, keep: Set<string>): Promise<void> {
  const name = s.pool.metadata.name;
  const used = new Set([...keep, ...deps.caches.poolMachineSets(s.ns, name).map((m) => hashOfBootstrap(name, m.spec.template.spec.bootstrap))]);
  for (const template of deps.caches.poolKindlingConfigTemplates(s.ns, name)) {
    if (!used.has(template.spec.template.spec.configHash)) await deps.writer.remove(template, deps.caches.kindlingConfigTemplates);
  }
}

async function phaseCleanup(s: Scope, deps: PhaseDeps): Promise<void> {
  if (!s.effective) return;
  const keep = new Set([s.effective.hash, ...(s.target && !s.blocked ? [s.target.hash] : [])]);
  const referenced = referencedUserData(s, deps);
  for (const secret of deps.caches.poolSecrets(s.ns, s.pool.metadata.name)) {
    const hash = secret.metadata?.labels?.[LABELS.configHash];
    if (hash !== undefined && !keep.has(hash)) await retire(s, deps, { secret, hash, referenced });
  }
  await retireBootstrapTemplates(s, deps, keep);
}

/** An old token gets its expiry (the ignition server deletes it then); old user-data goes once unreferenced. */
async function retire(s: Scope, deps: PhaseDeps, old: { secret: k8s.V1Secret; hash: string; referenced: Set<string | undefined> }): Promise<void> {
  if (old.secret.metadata?.labels?.[LABELS.tokenSecret] === 'true') return expireToken(s, deps, old.secret, old.hash);
  if (!old.referenced.has(old.secret.metadata?.name)) await deps.writer.remove(withKind(old.secret, 'v1', 'Secret'), deps.caches.secrets);
}

async function expireToken(s: Scope, deps: PhaseDeps, secret: k8s.V1Secret, hash: string): Promise<void> {
  const inputs = inputsOf(secret);
  if (!inputs) return;
  const expiresAt = secret.metadata?.annotations?.[ANNOTATIONS.tokenExpiresAt] ?? new Date(s.now + deps.config.tokenGraceMs).toISOString().replace(/\.\d+Z$/, 'Z');
  await applyIfNeeded(deps, secret, desiredTokenSecret(s.pool, { hash, inputs, expiresAt }), deps.caches.secrets);
}

// ---- observations for the status ----

function hashInputsChanged(s: Scope, deps: PhaseDeps, from: string, to: string): HashInput[] {
  const a = inputsOf(tokenSecret(s, deps, from));
  const b = inputsOf(tokenSecret(s, deps, to));
  return a && b ? changedInputs(a, b) : [];
}

function observeRollout(s: Scope, deps: PhaseDeps): void {
  const to = s.effective?.hash;
  if (to === undefined) return;
  const name = s.pool.metadata.name;
  let from: string | undefined;
  let annotations: Record<string, string> = {};
  if (!hasMachineDeployment(s.pool)) {
    annotations = deps.caches.machineSets.get(s.ns, name)?.metadata.annotations ?? {};
    from = annotations[ANNOTATIONS.currentConfigHash];
  } else {
    // ClusterAPI engine: a Machine updated in place keeps its first data Secret name; its KindlingConfig says where it is.
    const machines = inPlaceEngine(s.pool) === 'ClusterAPI' ? deps.caches.poolKindlingConfigs(s.ns, name).map((c) => c.spec.configHash) : deps.caches.poolMachines(s.ns, name).map((m) => hashOfUserData(name, m.spec.bootstrap.dataSecretName));
    const stale = [...deps.caches.poolMachineSets(s.ns, name).filter((m) => (m.spec.replicas ?? 0) > 0).map((m) => hashOfBootstrap(name, m.spec.template.spec.bootstrap)), ...machines];
    from = stale.find((h) => h !== undefined && h !== to);
  }
  const template = templateChange(s, deps);
  if (from !== undefined && from !== to) {
    s.obs.rollout = { from, to, changed: hashInputsChanged(s, deps, from, to), progress: progressOf(s, deps, to, annotations), failure: annotations[ANNOTATIONS.inPlaceFailure] };
  } else if (template) {
    from = to;
  } else return;
  s.obs.why = explainObserved(s, deps, { from, to, template });
}

/** "N of M updated" (and where a paused rollout stopped): the upgrader's annotation on the MachineSet engine,
 * counted from the Machines on the ClusterAPI engine, where Cluster API picks the Machines. */
function progressOf(s: Scope, deps: PhaseDeps, to: string, annotations: Record<string, string>): string | undefined {
  if (inPlaceEngine(s.pool) !== 'ClusterAPI') return annotations[ANNOTATIONS.inPlaceProgress];
  const configHashOf = (name: string): string | undefined => deps.caches.kindlingConfigs.get(s.ns, name)?.spec.configHash;
  return clusterApiProgress({ machines: deps.caches.poolMachines(s.ns, s.pool.metadata.name), configHashOf, target: to, paused: s.paused });
}

/** The infrastructure template of a MachineSet that still has Machines when the pool names another one: Cluster
 * API is rolling a Replace pool onto the new template. (An InPlace pool's one MachineSet takes the new template
 * at once and keeps its Machines: only new Machines use it, and this does not see it.) */
function templateChange(s: Scope, deps: PhaseDeps): { from: string; to: string } | undefined {
  const to = s.pool.spec.platform.infrastructureTemplateRef.name;
  const sets = deps.caches.poolMachineSets(s.ns, s.pool.metadata.name).filter((m) => (m.spec.replicas ?? 0) > 0);
  const stale = sets.map((m) => m.spec.template.spec.infrastructureRef.name).find((n) => n !== to);
  return stale === undefined ? undefined : { from: stale, to };
}

/** The stored record of the rollout, or a new one from the inputs of both hashes (their token Secrets, now). */
function explainObserved(s: Scope, deps: PhaseDeps, r: { from: string; to: string; template?: { from: string; to: string } }): RolloutRecord {
  return keepOrExplain(s.pool.status?.rollout, {
    upgradeType: s.pool.spec.management.upgradeType,
    engine: inPlaceEngine(s.pool),
    from: r.from,
    to: r.to,
    template: r.template,
    before: inputsOf(tokenSecret(s, deps, r.from)),
    after: inputsOf(tokenSecret(s, deps, r.to)),
    configMaps: (s.pool.spec.config ?? []).flatMap((ref) => {
      const cm = deps.caches.configMaps.get(s.ns, ref.name);
      return cm ? [{ name: ref.name, data: cm.data ?? {} }] : [];
    }),
    now: new Date(s.now).toISOString().replace(/\.\d+Z$/, 'Z'),
  });
}

function annotationOf(secret: k8s.V1Secret | undefined, key: string): string | undefined {
  return secret?.metadata?.annotations?.[key];
}

function observeTokens(s: Scope, deps: PhaseDeps): void {
  s.obs.effectiveHash = s.effective?.hash;
  const payloadHash = s.target && !s.blocked ? s.target.hash : s.effective?.hash;
  const payloadSecret = payloadHash === undefined ? undefined : tokenSecret(s, deps, payloadHash);
  s.obs.payload = { reason: annotationOf(payloadSecret, ANNOTATIONS.payloadReason), message: annotationOf(payloadSecret, ANNOTATIONS.payloadMessage) };
  const effectiveSecret = s.effective ? tokenSecret(s, deps, s.effective.hash) : undefined;
  s.obs.reachedIgnitionAt = annotationOf(effectiveSecret, ANNOTATIONS.ignitionReachedAt);
}

function observeChildren(s: Scope, deps: PhaseDeps): void {
  const child = liveChild(s, deps);
  if (child && !s.obs.child) s.obs.child = { desired: child.spec.replicas ?? 0, available: child.status?.availableReplicas ?? 0 };
  const autoRepair = s.pool.spec.management.autoRepair === true;
  s.obs.healthCheckExists ||= autoRepair && deps.caches.healthChecks.get(s.ns, s.pool.metadata.name) !== undefined;
}

// ---- pause ----

/** Paused: the CAPI paused annotation on the children, no other write, requeue when the date passes. */
async function phasePause(s: Scope, deps: PhaseDeps): Promise<void> {
  const state = pauseState(s.pool.spec.pausedUntil, s.now);
  s.paused = state.paused;
  if (state.paused) s.obs.pausedUntil = state.until;
  if (state.resumeInMs !== undefined) requeue(s, state.resumeInMs + 500);
  const name = s.pool.metadata.name;
  const children = [deps.caches.machineSets.get(s.ns, name), deps.caches.machineDeployments.get(s.ns, name)];
  for (const child of children) {
    if (!child) continue;
    const has = child.metadata.annotations?.[ANNOTATIONS.capiPaused] !== undefined;
    if (has === state.paused) continue;
    const patch = { metadata: { annotations: { [ANNOTATIONS.capiPaused]: state.paused ? 'true' : null } } };
    await deps.writer.mergePatch(child, patch, child.kind === 'MachineSet' ? (deps.caches.machineSets as never) : (deps.caches.machineDeployments as never));
  }
}

/** The target hash and the verdicts on it (release, config, version skew) without any write: what
 * `kindling plan` shows, computed by the same phases the reconcile runs. */
export async function evaluateTarget(s: Scope, deps: PhaseDeps): Promise<void> {
  await phaseInputs(s, deps);
  await phaseSkew(s, deps);
}

type Phase = (s: Scope, deps: PhaseDeps) => Promise<void>;

/** Phases that write; skipped while the pool is paused. */
const WRITING_PHASES: Phase[] = [phaseToken, phaseUserData, phaseChildren, phaseBootstrapConfigs, phaseHealthCheck, phaseMachines, phaseNodes, phaseCleanup];

export async function runPhases(s: Scope, deps: PhaseDeps): Promise<void> {
  await phasePause(s, deps);
  await phaseInputs(s, deps);
  await phaseSkew(s, deps);
  if (s.paused) {
    s.effective = s.deployed?.version ? { hash: s.deployed.hash, version: formatVersion(s.deployed.version) } : undefined;
    s.obs.machines = deps.caches.poolMachines(s.ns, s.pool.metadata.name);
  } else {
    for (const phase of WRITING_PHASES) await phase(s, deps);
  }
  observeTokens(s, deps);
  observeChildren(s, deps);
  observeRollout(s, deps);
}
