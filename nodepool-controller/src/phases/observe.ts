/** What the status reports beyond the phases' own verdicts: tokens, children, and the rollout under way. */
import type * as k8s from '#k8s';
import { ANNOTATIONS, hashOfUserData } from '../../../api/src/keys.js';
import { effectiveDisruptionPolicy } from '../../../api/src/disruption.js';
import { hasMachineDeployment, inPlaceEngine, type RolloutRecord } from '../../../api/src/nodepool.js';
import { changedInputs, type HashInput } from '../hash.js';
import { keepOrExplain } from '../rollout-record.js';
import { clusterApiFailure, clusterApiProgress, clusterApiWaiting } from '../capi-progress.js';
import {
  hashOfBootstrap,
  hashInputs,
  isoSeconds,
  liveChild,
  tokenSecret,
  type Decision,
  type PhaseDeps,
  type Scope,
  inPool,
} from './scope.js';

function hashInputsChanged(s: Scope, deps: PhaseDeps, from: string, to: string): HashInput[] {
  const a = hashInputs(s, deps, from);
  const b = hashInputs(s, deps, to);
  return a && b ? changedInputs(a, b) : [];
}

function observeRollout(s: Scope, deps: PhaseDeps, d: Decision): void {
  const to = d.effective?.hash;
  if (to === undefined) return;
  const name = s.pool.metadata.name;
  let from: string | undefined;
  let annotations: Record<string, string> = {};
  if (!hasMachineDeployment(s.pool)) {
    annotations = deps.caches.machineSets.get(inPool(s, name))?.metadata.annotations ?? {};
    from = annotations[ANNOTATIONS.currentConfigHash];
  } else {
    // ClusterAPI engine: a Machine updated in place keeps its first data Secret name; its KindlingConfig says where it is.
    const machines =
      inPlaceEngine(s.pool) === 'ClusterAPI'
        ? deps.caches.poolKindlingConfigs(s.ns, name).map((c) => c.spec.configHash)
        : deps.caches.poolMachines(s.ns, name).map((m) => hashOfUserData(name, m.spec.bootstrap.dataSecretName));
    const stale = [
      ...deps.caches
        .poolMachineSets(s.ns, name)
        .filter((m) => (m.spec.replicas ?? 0) > 0)
        .map((m) => hashOfBootstrap(name, m.spec.template.spec.bootstrap)),
      ...machines,
    ];
    from = stale.find((h) => h !== undefined && h !== to);
  }
  const template = templateChange(s, deps);
  if (from !== undefined && from !== to) {
    s.obs.rollout = {
      from,
      to,
      changed: hashInputsChanged(s, deps, from, to),
      progress: progressOf(s, deps, to, annotations),
      ...haltOf(s, deps, annotations),
    };
  } else if (template) {
    from = to;
  } else return;
  s.obs.why = explainObserved(s, deps, { from, to, template });
}

/** "N of M updated" (and where a paused rollout stopped): the upgrader's annotation on the MachineSet engine,
 * counted from the Machines on the ClusterAPI engine, where Cluster API picks the Machines. */
function progressOf(s: Scope, deps: PhaseDeps, to: string, annotations: Record<string, string>): string | undefined {
  if (inPlaceEngine(s.pool) !== 'ClusterAPI') return annotations[ANNOTATIONS.inPlaceProgress];
  const configHashOf = (name: string): string | undefined =>
    deps.caches.kindlingConfigs.get(inPool(s, name))?.spec.configHash;
  return clusterApiProgress({
    machines: deps.caches.poolMachines(s.ns, s.pool.metadata.name),
    configHashOf,
    target: to,
    paused: s.obs.pausedUntil !== undefined,
  });
}

/** Where the rollout halted on a failure, or waits for the maintenance window: the upgrader's annotations on the
 * MachineSet engine, the Machines' on the ClusterAPI engine. */
function haltOf(
  s: Scope,
  deps: PhaseDeps,
  annotations: Record<string, string>,
): { failure: string | undefined; waiting: string | undefined } {
  if (inPlaceEngine(s.pool) !== 'ClusterAPI')
    return { failure: annotations[ANNOTATIONS.inPlaceFailure], waiting: annotations[ANNOTATIONS.inPlaceWaiting] };
  const machines = deps.caches.poolMachines(s.ns, s.pool.metadata.name);
  return { failure: clusterApiFailure(machines), waiting: clusterApiWaiting(machines) };
}

/**
 * Whether the rollout of a pool with a MachineDeployment replaces Machines: always on Replace; on the ClusterAPI
 * engine, for a new infrastructure template (the extension never takes one in place) or a change recorded as a
 * rollout (a payload the extension cannot apply in place). A hold pauses such a MachineDeployment (capi.ts):
 * Cluster API, not the extension, hands those Machines out.
 */
export function replacesMachines(s: Scope, deps: PhaseDeps): boolean {
  if (!hasMachineDeployment(s.pool)) return false;
  if (s.pool.spec.management.upgradeType === 'Replace' || templateChange(s, deps) !== undefined) return true;
  return s.pool.status?.rollout?.changes.some((c) => c.strategy === 'Rollout') === true;
}

/** The infrastructure template of a MachineSet that still has Machines when the pool names another one: Cluster
 * API is rolling a Replace pool onto the new template. (An InPlace pool's one MachineSet takes the new template
 * at once and keeps its Machines: only new Machines use it, and this does not see it.) */
export function templateChange(s: Scope, deps: PhaseDeps): { from: string; to: string } | undefined {
  const to = s.pool.spec.platform.infrastructureTemplateRef.name;
  const sets = deps.caches.poolMachineSets(s.ns, s.pool.metadata.name).filter((m) => (m.spec.replicas ?? 0) > 0);
  const stale = sets.map((m) => m.spec.template.spec.infrastructureRef.name).find((n) => n !== to);
  return stale === undefined ? undefined : { from: stale, to };
}

/** The stored record of the rollout, or a new one from the inputs of both hashes (their token Secrets, now). */
function explainObserved(
  s: Scope,
  deps: PhaseDeps,
  r: { from: string; to: string; template?: { from: string; to: string } },
): RolloutRecord {
  return keepOrExplain(s.pool.status?.rollout, {
    upgradeType: s.pool.spec.management.upgradeType,
    engine: inPlaceEngine(s.pool),
    from: r.from,
    to: r.to,
    template: r.template,
    before: hashInputs(s, deps, r.from),
    after: hashInputs(s, deps, r.to),
    configMaps: (s.pool.spec.config ?? []).flatMap((ref) => {
      const cm = deps.caches.configMaps.get(inPool(s, ref.name));
      return cm ? [{ name: ref.name, data: cm.data ?? {} }] : [];
    }),
    now: isoSeconds(s.now),
    disruptionPolicy: effectiveDisruptionPolicy(s.pool.spec.management.inPlace?.disruptionPolicy),
  });
}

function annotationOf(secret: k8s.V1Secret | undefined, key: string): string | undefined {
  return secret?.metadata?.annotations?.[key];
}

function observeTokens(s: Scope, deps: PhaseDeps, d: Decision): void {
  s.obs.effectiveHash = d.effective?.hash;
  s.obs.effectiveVersion = d.effective?.version;
  const payloadHash = d.rolling?.hash ?? d.effective?.hash;
  const payloadSecret = payloadHash === undefined ? undefined : tokenSecret(s, deps, payloadHash);
  s.obs.payload = {
    reason: annotationOf(payloadSecret, ANNOTATIONS.payloadReason),
    message: annotationOf(payloadSecret, ANNOTATIONS.payloadMessage),
  };
  const effectiveSecret = d.effective ? tokenSecret(s, deps, d.effective.hash) : undefined;
  s.obs.reachedIgnitionAt = annotationOf(effectiveSecret, ANNOTATIONS.ignitionReachedAt);
}

/** The caches hold what the writing phases wrote (OverlayCache), so these are the objects as they left them. */
function observeChildren(s: Scope, deps: PhaseDeps): void {
  const child = liveChild(s, deps);
  if (child) s.obs.child = { desired: child.spec.replicas ?? 0, available: child.status?.availableReplicas ?? 0 };
  const autoRepair = s.pool.spec.management.autoRepair === true;
  s.obs.healthCheckExists = autoRepair && deps.caches.healthChecks.get(inPool(s, s.pool.metadata.name)) !== undefined;
  s.obs.machines = deps.caches.poolMachines(s.ns, s.pool.metadata.name);
}

/**
 * The observations of the objects and the decision, each written here only: read from the caches after the
 * writes, also after a failed one (the status then says what the failed reconcile left). The phases write
 * only their verdicts on the spec (release, config, skew, window, gate, pause, capacity, joining, pending).
 */
export function observe(s: Scope, deps: PhaseDeps, d: Decision): void {
  observeTokens(s, deps, d);
  observeChildren(s, deps);
  observeRollout(s, deps, d);
}
