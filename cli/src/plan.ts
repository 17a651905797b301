/**
 * `kindling plan`: what the NodePool controller, Cluster API and the in-place upgrader would do with a pool,
 * computed by their own code (the controller's input and skew phases, its desired children, diff.ts, the
 * upgrader's node selection) over the objects read from the clusters. Nothing is written: the phases run
 * against read-only caches and a writer that refuses every call.
 */
import { readFile } from 'node:fs/promises';
import type * as k8s from '#k8s';
import { ANNOTATIONS, FIELD_MANAGERS } from '../../api/src/keys.js';
import { hasMachineDeployment, inPlaceEngine, type NodePool } from '../../api/src/nodepool.js';
import type { Machine, MachineDeployment, MachineSet } from '../../api/src/capi.js';
import {
  changedInputs,
  contains,
  desiredMachinePropagation,
  desiredNode,
  documentSources,
  ownedFields,
  ownsMoreThan,
  previewNodePool,
  changedDocuments,
  formatVersion,
  type DocumentChange,
  type NodePoolPreview,
  type Verdict,
} from '../../nodepool-controller/src/preview.js';
import { ConfigError, type ConfigOf, type FlagSpecs } from '../../support/src/config.js';
import { COMPONENT_FLAGS, loadKubeConfig } from '../../support/src/component.js';
import {
  createGuestVersions,
  createInfrastructureTemplates,
  NODEPOOL_CONTROLLER_FLAGS,
} from '../../nodepool-controller/src/preview.js';
import { defineCommand, type Command } from '../../support/src/command.js';
import { parsePullSecret } from '../../support/src/registry-auth.js';
import { listImageTags } from '../../support/src/registry-tags.js';
import { guestKubeConfigs, parsePoolRef, poolFromYaml, readNodePool, readPoolState } from './cluster.js';
import { formatPlan } from './plan-text.js';
import { upgradeTargets } from './plan-targets.js';
import { clusterApiPlan, disruptionPlan, inPlacePlan, replacePlan, startsOf } from './plan-engine.js';
import type { PlanInput, Effect, Action, Policy, FieldChange, Plan } from './plan-model.js';

// The upgrader's batches and Cluster API's bounds, as plan computes them (plan.test.ts checks them here).
export { simulateRollout } from '../../inplace-upgrader/src/preview.js';
export { resolveFenceposts } from '../../support/src/int-or-percent.js';
export type {
  PoolState,
  PlanInput,
  PolicyStatus,
  Effect,
  Action,
  Policy,
  FieldChange,
  PlannedNode,
  InPlacePlan,
  ReplacePlan,
  Plan,
} from './plan-model.js';

/** Exit code of `plan` when a policy blocks the change. */
export const PLAN_BLOCKED_EXIT = 3;
/** The JSON Schema of `plan -o json`, relative to the repository. */
export const PLAN_SCHEMA_PATH = 'cli/plan.schema.json';

// ---- policies ----

const passOrOverridden = (v: Verdict): Policy['status'] => (v.reason === 'Overridden' ? 'overridden' : 'pass');

function verdictPolicy(name: string, v: Verdict | undefined): Policy {
  return v
    ? { name, status: v.ok ? passOrOverridden(v) : 'fail', reason: v.reason, message: v.message }
    : { name, status: 'skipped', reason: '', message: 'Not checked' };
}

function skewPolicies(p: NodePoolPreview): Policy[] {
  if (p.skew.controlPlane.error !== undefined)
    return [verdictPolicy('Control plane version is known', p.verdicts.skew)];
  const skipped = { status: 'skipped' as const, reason: '', message: 'Not checked: the release or config is invalid' };
  return p.skew.policies.map(({ title, skippable, verdict }) => ({
    ...(verdict ? verdictPolicy(title, verdict) : { name: title, ...skipped }),
    ...(skippable ? { skippable } : {}),
  }));
}

// ---- the config hash and what changed it ----

/** The document changes between two configs, with the planned pool's ConfigMaps holding each (rollout-record.ts, as the
 * controller records them in status.rollout). */
function documentChanges(input: PlanInput, before: string, after: string): DocumentChange[] {
  const configMaps = (input.pool.spec.config ?? []).flatMap((ref) => {
    const cm = input.state.configMaps.find((c) => c.metadata?.name === ref.name);
    return cm ? [{ name: ref.name, data: cm.data ?? {} }] : [];
  });
  return changedDocuments(before, after, documentSources(configMaps));
}

function hashChange(p: NodePoolPreview, input: PlanInput): Plan['configHash'] {
  const current = p.deployed?.hash;
  const target = p.target?.hash;
  const base = {
    current,
    target,
    changed: target !== undefined && current !== target,
    documents: [] as DocumentChange[],
  };
  if (!p.target || !base.changed) return base;
  const old = p.deployed?.inputs;
  if (!old)
    return {
      ...base,
      release: { to: p.target.inputs.release },
      documents: documentChanges(input, '[]', p.target.inputs.config),
    };
  const changed = changedInputs(old, p.target.inputs);
  return {
    ...base,
    ...(changed.includes('release') ? { release: { from: old.release, to: p.target.inputs.release } } : {}),
    documents: changed.includes('config') ? documentChanges(input, old.config, p.target.inputs.config) : [],
  };
}

// ---- the Cluster API child: which fields change, and what each change does ----

interface Field {
  path: string[];
  what: string;
  /** A change here makes new machines (Replace: CAPI rolls; InPlace: the upgrader or new machines only). */
  rolls?: 'config' | 'infrastructure';
}

const CHILD_FIELDS: Field[] = [
  { path: ['spec', 'template', 'spec', 'bootstrap'], what: 'user-data (config hash)', rolls: 'config' },
  { path: ['spec', 'template', 'spec', 'version'], what: 'Kubernetes version', rolls: 'config' },
  { path: ['spec', 'template', 'spec', 'infrastructureRef'], what: 'infrastructure template', rolls: 'infrastructure' },
  { path: ['spec', 'template', 'metadata', 'labels'], what: 'node labels' },
  { path: ['spec', 'template', 'metadata', 'annotations'], what: 'Machine annotations' },
  { path: ['spec', 'template', 'spec', 'taints'], what: 'taints' },
  { path: ['spec', 'template', 'spec', 'deletion'], what: 'drain, volume-detach and node-deletion timeouts' },
  { path: ['spec', 'template', 'spec', 'minReadySeconds'], what: 'minReadySeconds' },
  { path: ['spec', 'replicas'], what: 'replicas' },
  { path: ['spec', 'rollout'], what: 'rollout strategy' },
  {
    path: ['metadata', 'annotations'],
    what: 'annotations (target hash, maxUnavailable, autoscaler bounds and capacity)',
  },
];

function at(value: unknown, path: readonly string[]): unknown {
  return path.reduce<unknown>(
    (v, k) => (v !== null && typeof v === 'object' ? (v as Record<string, unknown>)[k] : undefined),
    value,
  );
}

const isMap = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

const short = (v: unknown): string => {
  const text = v === undefined ? '(none)' : JSON.stringify(v);
  return text.length > 70 ? `${text.slice(0, 67)}...` : text;
};

/** Both sides, cut down when both are maps (labels, annotations) to the keys that change: those the
 * controller wants with another value, and those it owns and drops. Others' keys are left out. */
function fromTo(have: unknown, want: unknown, owned: unknown): { from: string; to: string } {
  if (!isMap(have) || !isMap(want)) return { from: short(have), to: short(want) };
  const dropped = isMap(owned)
    ? Object.keys(owned)
        .filter((k) => k.startsWith('f:') && !(k.slice(2) in want))
        .map((k) => k.slice(2))
    : [];
  const keys = [...Object.keys(want), ...dropped].filter((k) => JSON.stringify(have[k]) !== JSON.stringify(want[k]));
  const pick = (m: Record<string, unknown>): Record<string, unknown> =>
    Object.fromEntries(keys.filter((k) => k in m).map((k) => [k, m[k]]));
  return { from: short(pick(have)), to: short(pick(want)) };
}

function effectOf(field: Field, upgradeType: NodePool['spec']['management']['upgradeType']): Effect {
  if (!field.rolls) return 'propagate';
  if (upgradeType === 'Replace') return 'replace';
  return field.rolls === 'config' ? 'update-in-place' : 'new-machines';
}

/** The fields the controller's apply would change: a desired value the live child lacks, or (from its
 * managedFields) a value the controller owns and no longer wants. */
export function childChanges(
  live: k8s.KubernetesObject,
  desired: k8s.KubernetesObject,
  upgradeType: 'Replace' | 'InPlace',
): FieldChange[] {
  const owned = ownedFields(live, FIELD_MANAGERS.nodepoolController);
  return CHILD_FIELDS.flatMap((field) => {
    const [want, have] = [at(desired, field.path), at(live, field.path)];
    const ownedHere = at(
      owned,
      field.path.map((k) => `f:${k}`),
    );
    const removes =
      ownedHere !== null && typeof ownedHere === 'object' && ownsMoreThan(ownedHere as Record<string, unknown>, want);
    if (contains(have, want) && !removes) return [];
    return [
      {
        field: field.path.join('.'),
        what: field.what,
        effect: effectOf(field, upgradeType),
        ...fromTo(have, want, ownedHere),
      },
    ];
  });
}

type Child = MachineSet | MachineDeployment;

function liveChild(input: PlanInput): Child | undefined {
  const name = input.pool.metadata.name;
  const list: Child[] = hasMachineDeployment(input.pool) ? input.state.machineDeployments : input.state.machineSets;
  return list.find((c) => c.metadata.name === name);
}

const alive = (machines: readonly Machine[]): Machine[] => machines.filter((m) => !m.metadata.deletionTimestamp);

function propagation(input: PlanInput): Plan['propagation'] {
  const machines = alive(input.state.machines)
    .filter((m) => !contains(m, desiredMachinePropagation(input.pool, m.metadata)) || ownsMoreThanWanted(m, input.pool))
    .map((m) => m.metadata.name)
    .sort();
  const nodes = input.state.nodes
    .filter((n) => desiredNode(input.pool, n) !== undefined)
    .map((n) => n.metadata?.name ?? '')
    .sort();
  return { machines, nodes, ...(input.state.guestError === undefined ? {} : { guestError: input.state.guestError }) };
}

function ownsMoreThanWanted(m: Machine, pool: NodePool): boolean {
  const owned = ownedFields(m, FIELD_MANAGERS.nodepoolController);
  return owned !== undefined && ownsMoreThan(owned, desiredMachinePropagation(pool, m.metadata));
}

// ---- the plan ----

function actionOf(plan: Omit<Plan, 'action'>, hasChild: boolean): Action {
  if (plan.blocked) return 'blocked';
  if (!hasChild) return 'create';
  if (plan.changes.some((c) => c.effect === 'replace')) return 'replace';
  if (plan.configHash.changed || plan.changes.some((c) => c.effect === 'update-in-place')) return 'update-in-place';
  if (plan.changes.length > 0 || plan.propagation.machines.length > 0 || plan.propagation.nodes.length > 0)
    return 'propagate';
  return 'none';
}

function releaseOf(p: NodePoolPreview): Plan['release'] {
  const version = p.verdicts.release?.version;
  const current = p.deployed?.version;
  return {
    image: p.pool.spec.release.image,
    ...(version ? { version } : {}),
    ...(current ? { currentVersion: formatVersion(current) } : {}),
  };
}

/** An InPlace rollout still under way: the upgrader's current hash is not the one the controller applies. */
function rollingOut(live: Child | undefined, effectiveHash: string | undefined): boolean {
  const current = live?.metadata.annotations?.[ANNOTATIONS.currentConfigHash];
  return current !== undefined && current !== effectiveHash;
}

/** The upgrade-type part: InPlace batches (of a new target, or of a rollout still under way), Replace bounds. */
function rolloutOf(
  input: PlanInput,
  plan: Plan,
  child: { live?: Child; desired?: Child; effectiveHash?: string },
): Pick<Plan, 'inPlace' | 'replace'> {
  const { live, desired } = child;
  if (desired?.kind === 'MachineDeployment')
    return plan.action === 'replace' ? { replace: replacePlan(input, desired) } : {};
  if (!desired || plan.action === 'blocked') return {};
  const paused = plan.paused !== undefined;
  return plan.action === 'update-in-place' || rollingOut(live, child.effectiveHash)
    ? { inPlace: inPlacePlan(input, live as MachineSet | undefined, desired, paused) }
    : {};
}

/** ClusterAPI engine: Cluster API decides between in place and rollout by the extension's answer, whatever the fields are. */
function withEngine(plan: Plan, p: NodePoolPreview, child: { live?: Child; desired?: Child; hash?: string }): Plan {
  const { live, desired, hash } = child;
  if (inPlaceEngine(p.pool) !== 'ClusterAPI' || !live || !desired || hash === undefined || plan.action === 'blocked')
    return plan;
  const engine = clusterApiPlan({
    pool: p.pool,
    live: live as MachineDeployment,
    desired: desired as MachineDeployment,
    targetHash: hash,
    config: p.target?.inputs.config,
  });
  if (engine.changes.length === 0) return plan;
  const changes = engine.inPlace
    ? plan.changes
    : plan.changes.map((c) => (c.effect === 'update-in-place' ? { ...c, effect: 'replace' as const } : c));
  return { ...plan, changes, action: engine.inPlace ? 'update-in-place' : 'replace', clusterApi: engine };
}

/** The disruption each node of an in-place payload change takes (plan-engine.ts), when there is one. */
function disruptionOf(plan: Plan, p: NodePoolPreview): Pick<Plan, 'disruption'> {
  const disruption = disruptionPlan(p.pool, plan.action, { before: p.deployed?.inputs, after: p.target?.inputs });
  return disruption ? { disruption } : {};
}

export async function computePlan(input: PlanInput): Promise<Plan> {
  const { pool, state } = input;
  const p = await previewNodePool({
    ...state,
    pool,
    versions: input.versions,
    releases: input.releases,
    templates: input.templates,
    maxSkewMinors: input.maxSkewMinors,
    now: input.now,
  });
  const effective = p.effective;
  const live = liveChild(input);
  const desired = p.desiredChildren.child;
  const plan: Omit<Plan, 'action'> = {
    pool: {
      namespace: pool.metadata.namespace ?? '',
      name: pool.metadata.name,
      cluster: pool.spec.clusterName,
      upgradeType: pool.spec.management.upgradeType,
      exists: input.exists,
    },
    release: releaseOf(p),
    controlPlane: p.skew.controlPlane,
    ...(p.paused === undefined ? {} : { paused: p.paused }),
    ...startsOf(p, input.now),
    policies: [
      verdictPolicy('Release image is valid', p.verdicts.release),
      verdictPolicy('Config ConfigMaps are valid', p.verdicts.config),
      ...skewPolicies(p),
    ],
    blocked: p.blocked !== undefined,
    ...(p.blocked === undefined ? {} : { blockedReason: p.blocked }),
    configHash: hashChange(p, input),
    changes: live && desired ? childChanges(live, desired, pool.spec.management.upgradeType) : [],
    propagation: effective ? propagation(input) : { machines: [], nodes: [] },
  };
  const result = withEngine({ ...plan, action: actionOf(plan, live !== undefined) }, p, {
    live,
    desired,
    hash: effective?.hash,
  });
  const targets = await upgradeTargets(input, p, input.tags);
  return {
    ...result,
    ...rolloutOf(input, result, { live, desired, effectiveHash: effective?.hash }),
    ...(targets ? { upgradeTargets: targets } : {}),
    ...disruptionOf(result, p),
  };
}

// ---- the command ----

export const PLAN_FLAGS = {
  kubeconfig: COMPONENT_FLAGS.kubeconfig,
  release: { type: 'string', default: '', help: 'Plan with this release image instead of spec.release.image' },
  config: {
    type: 'list',
    default: [],
    help: 'Plan with these config ConfigMaps instead of spec.config (repeat the flag or separate with commas)',
  },
  file: {
    type: 'string',
    default: '',
    help: 'Plan the NodePool of this YAML file, as it would be applied, instead of the live one (-f)',
  },
  output: { type: 'string', default: 'text', help: `Output: text, or json (schema: ${PLAN_SCHEMA_PATH}) (-o)` },
  maxSkewMinors: NODEPOOL_CONTROLLER_FLAGS.maxSkewMinors,
  upgradeTargets: {
    type: 'bool',
    default: true,
    help: "List the release tags of the pool's registry above the nodes' version, with the version policy's verdict on each",
  },
  registryCaFile: { type: 'string', default: '', help: 'Extra CA bundle (PEM) trusted for the release registry' },
  pullSecretFile: { type: 'string', default: '', help: 'dockerconfigjson credentials for the release registry' },
} satisfies FlagSpecs;

/** The tag lister of --upgrade-targets, with the registry's CA and credentials. */
async function tagLister(cfg: ConfigOf<typeof PLAN_FLAGS>): Promise<PlanInput['tags']> {
  if (!cfg.upgradeTargets) return undefined;
  const ca = cfg.registryCaFile === '' ? undefined : await readFile(cfg.registryCaFile, 'utf8');
  const secret = cfg.pullSecretFile === '' ? undefined : await readFile(cfg.pullSecretFile, 'utf8');
  const opts = { ...(ca ? { ca } : {}), ...(secret ? { credentials: parsePullSecret(secret) } : {}) };
  return (image) => listImageTags(image, opts);
}

/** The pool to plan: the file's or the live one, with --release and --config applied. */
function poolRef(arg: string | undefined, fromFile: NodePool | undefined): { namespace: string; name: string } {
  if (arg !== undefined) return parsePoolRef(arg);
  if (fromFile) return { namespace: fromFile.metadata.namespace ?? 'default', name: fromFile.metadata.name };
  throw new ConfigError('name the pool (<namespace>/<name>) or give -f nodepool.yaml');
}

async function plannedPool(
  cfg: ConfigOf<typeof PLAN_FLAGS>,
  args: string[],
  kc: k8s.KubeConfig,
): Promise<{ pool: NodePool; exists: boolean }> {
  const fromFile = cfg.file === '' ? undefined : poolFromYaml(await readFile(cfg.file, 'utf8'), cfg.file);
  const ref = poolRef(args[0], fromFile);
  const live = await readNodePool(kc, ref.namespace, ref.name);
  const base = fromFile ?? live;
  if (!base) throw new Error(`NodePool ${ref.namespace}/${ref.name} does not exist (plan a new one with -f)`);
  const pool = structuredClone(base);
  pool.metadata = {
    ...pool.metadata,
    namespace: ref.namespace,
    name: ref.name,
    uid: live?.metadata.uid ?? pool.metadata.uid,
  };
  if (cfg.release !== '') pool.spec.release = { ...pool.spec.release, image: cfg.release };
  if (cfg.config.length > 0) pool.spec.config = cfg.config.map((name) => ({ name }));
  return { pool, exists: live !== undefined };
}

export const planCommand: Command = defineCommand({
  name: 'plan',
  args: '<namespace/pool>',
  short: { f: 'file', o: 'output' },
  flags: PLAN_FLAGS,
  async run(cfg, io, args) {
    if (!['text', 'json'].includes(cfg.output)) throw new ConfigError(`-o ${cfg.output}: use text or json`);
    if (args.length > 1) throw new ConfigError('plan takes one pool');
    const kc = loadKubeConfig(cfg.kubeconfig);
    const { pool, exists } = await plannedPool(cfg, args, kc);
    const guests = guestKubeConfigs(kc);
    const state = await readPoolState(kc, guests, pool);
    const plan = await computePlan({
      pool,
      exists,
      state,
      versions: createGuestVersions({ kubeConfigs: guests }),
      templates: createInfrastructureTemplates(kc),
      tags: await tagLister(cfg),
      maxSkewMinors: cfg.maxSkewMinors,
      now: Date.now(),
    });
    io.out(cfg.output === 'json' ? `${JSON.stringify(plan, null, 2)}\n` : formatPlan(plan));
    return plan.blocked ? PLAN_BLOCKED_EXIT : 0;
  },
});
