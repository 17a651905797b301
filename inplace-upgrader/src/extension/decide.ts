/**
 * What Kindling can change on existing machines without replacing them, as one pure, deterministic function
 * over the current and desired objects Cluster API sends (CanUpdateMachineSet: MachineSet and templates;
 * CanUpdateMachine: Machine, InfraMachine, BootstrapConfig). Every field that differs gets a verdict and a
 * reason a person can read:
 *
 * - in place: a new Kindling payload the node agent can apply, and the version that comes with it. Only
 *   through Kindling's bootstrap provider (pools on the ClusterAPI engine): the bootstrap template names the
 *   pool and config hash (KindlingConfigTemplate; KindlingConfig per Machine), and Cluster API calls
 *   UpdateMachine only for Machines with a bootstrap config. A user-data Secret named directly
 *   (bootstrap.dataSecretName, as Replace pools do) rolls. The answer's patches carry what is claimed (JSON
 *   patch on the current objects, as Cluster API applies them).
 * - propagated: labels, annotations, taints, deletion timeouts, readiness gates, minReadySeconds. Cluster
 *   API itself updates existing Machines for these; nothing to claim.
 * - rollout: everything else: the infrastructure template (its reference or its content), the failure
 *   domain, another bootstrap provider's template, a version without a new payload, a payload holding what the
 *   agent cannot apply in place (kernel arguments, disks, partitions, filesystems, RAID, LUKS…), any field
 *   Kindling does not know.
 *
 * The payload's content is not in any of those objects: whether it holds kernel arguments is only known
 * from the payload itself. The caller passes its summary (PayloadSummary: what `inPlaceBlockers` finds in
 * the Ignition config the ignition server renders for the desired pool and hash, fetched the way the
 * upgrader fetches it); without it, a user-data change rolls.
 *
 * Cluster API leaves bootstrap and infrastructureRef out of its own comparison (it compares the templates'
 * content instead), so a refusal of only those would go unseen: a user-data change would be updated in
 * place whatever the answer. In that case the answer adds a marker field to the current infrastructure
 * template in the patch; the patched current object then differs from the desired one, Cluster API rolls,
 * and its log shows the marker with the reasons.
 */
import { isDeepStrictEqual } from 'node:util';
import { LABELS, userDataSecretName } from '../../../api/src/keys.js';
import { BOOTSTRAP_GROUP_NAME } from '../../../api/src/bootstrap.js';
import type { JsonObject, JsonPatchOperation } from './hooks.js';

export type Verdict = 'in-place' | 'propagated' | 'rollout';

/** Which object of the request a change is in. */
type ObjectRole = 'machine' | 'infrastructure' | 'bootstrap';

interface FieldDecision {
  role: ObjectRole;
  /** JSON pointer into that object. */
  path: string;
  /** The field for people: "version", "metadata.labels.zone", "LocalMachineTemplate failureDomains". */
  field: string;
  verdict: Verdict;
  reason: string;
}

/** What the desired payload holds that the node agent cannot apply in place (empty: nothing). */
export interface PayloadSummary {
  pool: string;
  hash: string;
  blockers: string[];
}

export interface DecisionObjects {
  /** The MachineSet (kind MachineSet) or the Machine (kind Machine). */
  machine: JsonObject;
  /** The InfrastructureMachineTemplate, or the InfraMachine. */
  infrastructure: JsonObject;
  /** The BootstrapConfigTemplate, or the BootstrapConfig; absent when bootstrap.dataSecretName is used. */
  bootstrap?: JsonObject;
}

export interface DecisionInput {
  kind: 'MachineSet' | 'Machine';
  current: DecisionObjects;
  desired: DecisionObjects;
  payload?: PayloadSummary;
}

export interface Decision {
  /** Every change is in place or propagated: Cluster API may update the machines in place. */
  inPlace: boolean;
  changes: FieldDecision[];
  patches: Record<ObjectRole, JsonPatchOperation[]>;
  /** One line per verdict, for the hook's message and logs. */
  message: string;
}

/** The field added to the patched infrastructure object when Cluster API could not see a refusal. */
export const REFUSAL_MARKER = 'kindlingInPlaceRefused';

/** Machine spec fields Cluster API itself updates on existing Machines (and leaves out of its comparison). */
const PROPAGATED_SPEC = [
  '/taints',
  '/deletion/nodeDrainTimeoutSeconds',
  '/deletion/nodeVolumeDetachTimeoutSeconds',
  '/deletion/nodeDeletionTimeoutSeconds',
  '/readinessGates',
  '/minReadySeconds',
];
/** Machine spec fields Cluster API leaves out of its in-place comparison (it compares the templates instead). */
const UNSEEN_BY_CAPI = [...PROPAGATED_SPEC, '/clusterName', '/bootstrap', '/infrastructureRef', '/providerID'];

const SPEC_PATH = { MachineSet: ['spec', 'template', 'spec'], Machine: ['spec'] } as const;
const METADATA_PATH = { MachineSet: ['spec', 'template', 'metadata'], Machine: ['metadata'] } as const;
const TEMPLATE_SPEC_PATH = SPEC_PATH;

const pointer = (segments: readonly string[]): string =>
  segments.map((s) => `/${s.replace(/~/g, '~0').replace(/\//g, '~1')}`).join('');
const dotted = (segments: readonly string[]): string => segments.join('.');
const isObject = (v: unknown): v is JsonObject => typeof v === 'object' && v !== null && !Array.isArray(v);
const under = (path: string, prefix: string): boolean => path === prefix || path.startsWith(`${prefix}/`);

function at(obj: unknown, segments: readonly string[]): unknown {
  let v = obj;
  for (const s of segments) v = isObject(v) ? v[s] : undefined;
  return v;
}

interface Change {
  /** Segments below the compared root. */
  segments: string[];
  before: unknown;
  after: unknown;
}

/** Leaf differences between two JSON values, in key order (lists compare as a whole). */
function diff(before: unknown, after: unknown, segments: string[] = []): Change[] {
  // A missing object compares as an empty one, so a change is reported at its leaves ("deletion.x", not "deletion").
  const [b, a] = [before ?? (isObject(after) ? {} : undefined), after ?? (isObject(before) ? {} : undefined)];
  if (isObject(b) && isObject(a)) {
    const keys = [...new Set([...Object.keys(b), ...Object.keys(a)])].sort();
    return keys.flatMap((k) => diff(b[k], a[k], [...segments, k]));
  }
  return isDeepStrictEqual(before, after) ? [] : [{ segments, before, after }];
}

const show = (v: unknown): string => (v === undefined ? 'unset' : JSON.stringify(v));
const kindOf = (obj: JsonObject | undefined): string => (typeof obj?.kind === 'string' ? obj.kind : 'object');
const nameOf = (obj: JsonObject | undefined): string =>
  typeof at(obj, ['metadata', 'name']) === 'string' ? String(at(obj, ['metadata', 'name'])) : '';

/** Is the object one of Kindling's bootstrap kinds (KindlingConfigTemplate, KindlingConfig)? */
function isKindlingBootstrap(obj: JsonObject | undefined): boolean {
  return typeof obj?.apiVersion === 'string' && obj.apiVersion.startsWith(`${BOOTSTRAP_GROUP_NAME}/`);
}

/** The pool and hash a Kindling bootstrap template (MachineSet) or config (Machine) names. */
export function bootstrapTarget(
  kind: DecisionInput['kind'],
  bootstrap: JsonObject | undefined,
): { pool: string; hash: string } | undefined {
  if (!isKindlingBootstrap(bootstrap)) return undefined;
  const spec = at(bootstrap, TEMPLATE_SPEC_PATH[kind]);
  const [pool, hash] = [at(spec, ['nodePool']), at(spec, ['configHash'])];
  return typeof pool === 'string' && typeof hash === 'string' && /^[a-z0-9]+$/.test(hash) ? { pool, hash } : undefined;
}

/** The payload the desired objects point at: Kindling's bootstrap config when there is one, else the user-data Secret. */
export function payloadTarget(
  kind: DecisionInput['kind'],
  desired: DecisionObjects,
): { pool: string; hash: string } | undefined {
  return desired.bootstrap ? bootstrapTarget(kind, desired.bootstrap) : userDataTarget(kind, desired.machine);
}

/** The pool and hash a Kindling user-data Secret name stands for, read against the pool label. */
export function userDataTarget(
  kind: DecisionInput['kind'],
  machine: JsonObject,
): { pool: string; hash: string } | undefined {
  const spec = at(machine, SPEC_PATH[kind]);
  const secret = at(spec, ['bootstrap', 'dataSecretName']);
  const labels = {
    ...(at(machine, ['metadata', 'labels']) as Record<string, string> | undefined),
    ...(at(machine, [...METADATA_PATH[kind], 'labels']) as Record<string, string> | undefined),
  };
  const pool = labels[LABELS.nodePool];
  if (typeof secret !== 'string' || !pool) return undefined;
  const hash = secret.slice(userDataSecretName(pool, '').length);
  return /^[a-z0-9]+$/.test(hash) && userDataSecretName(pool, hash) === secret ? { pool, hash } : undefined;
}

interface UserDataVerdict {
  verdict: Verdict;
  reason: string;
}

/** The verdict on a changed payload: bootstrap.dataSecretName, or a Kindling bootstrap config's hash (see the top of this file). */
function userDataVerdict(input: DecisionInput, after: unknown): UserDataVerdict {
  const target = payloadTarget(input.kind, input.desired);
  if (!target)
    return {
      verdict: 'rollout',
      reason: `${show(after)} is not a Kindling payload of the pool (user-data-<pool>-<hash>, pool from label ${LABELS.nodePool}, or a ${BOOTSTRAP_GROUP_NAME} config naming pool and hash): only Kindling's payloads can be applied in place`,
    };
  const payload = input.payload;
  if (payload?.pool !== target.pool || payload.hash !== target.hash)
    return {
      verdict: 'rollout',
      reason: `the payload of pool ${target.pool} at ${target.hash} is not known, so whether the node agent can apply it is not either`,
    };
  if (payload.blockers.length > 0)
    return {
      verdict: 'rollout',
      reason: `payload ${target.hash} holds what the node agent cannot apply in place (${payload.blockers.join('; ')}): the machines are replaced`,
    };
  return {
    verdict: 'in-place',
    reason: `new payload ${target.hash}: the node agent applies it in place (drain, files and units, reboot)`,
  };
}

/** A version follows its payload: in place with it, rolled with it, and alone it changes nothing on a node. */
function versionVerdict(input: DecisionInput, userData: () => UserDataVerdict): UserDataVerdict {
  const u = changedUserData(input) ? userData() : undefined;
  if (!u)
    return {
      verdict: 'rollout',
      reason:
        'a version without a new payload: the kubelet comes from the payload, so nothing on the node would change',
    };
  return u.verdict === 'in-place'
    ? { verdict: 'in-place', reason: 'it comes with the new payload' }
    : { verdict: 'rollout', reason: 'it comes with the new payload, which rolls out by replacement' };
}

/**
 * A new user-data Secret named directly (bootstrap.dataSecretName, no bootstrap config): Cluster API moves the
 * Machine to it but never calls UpdateMachine, since only a bootstrap config marks a Machine's data Secret
 * created; the Machine would stay "updating" for ever and the rollout with it. So it rolls; a pool is updated
 * in place by Cluster API through Kindling's bootstrap provider (engine ClusterAPI). This is also what keeps
 * Replace pools, whose MachineDeployments Cluster API asks about too, replacing their machines.
 */
function withoutBootstrapProvider(input: DecisionInput, after: unknown): UserDataVerdict {
  if (!userDataTarget(input.kind, input.desired.machine)) return userDataVerdict(input, after);
  return {
    verdict: 'rollout',
    reason: `${show(after)} is named without a bootstrap config, and Cluster API calls UpdateMachine only for Machines with one: only pools on the ClusterAPI in-place engine (Kindling's bootstrap provider) are updated in place by Cluster API`,
  };
}

function machineSpecVerdict(
  path: string,
  change: Change,
  input: DecisionInput,
  userData: () => UserDataVerdict,
): UserDataVerdict {
  if (PROPAGATED_SPEC.some((p) => under(path, p)))
    return { verdict: 'propagated', reason: 'Cluster API updates it on existing Machines' };
  if (path === '/bootstrap/dataSecretName') return userData();
  if (path === '/version') return versionVerdict(input, userData);
  if (under(path, '/failureDomain'))
    return { verdict: 'rollout', reason: 'a machine cannot move to another failure domain in place' };
  if (under(path, '/infrastructureRef'))
    return {
      verdict: 'rollout',
      reason: `another infrastructure template (${show(change.before)} → ${show(change.after)}): new machines`,
    };
  if (path === '/bootstrap/configRef/name' && kindlingTemplates(input)) return userData();
  if (under(path, '/bootstrap'))
    return {
      verdict: 'rollout',
      reason: 'Kindling updates only its own user-data Secrets (bootstrap.dataSecretName) in place',
    };
  return { verdict: 'rollout', reason: 'Kindling does not know how to change it in place' };
}

/** Are both sides Kindling bootstrap templates/configs (the ClusterAPI engine)? */
function kindlingTemplates(input: DecisionInput): boolean {
  return isKindlingBootstrap(input.current.bootstrap) && isKindlingBootstrap(input.desired.bootstrap);
}

/** Does the payload differ between current and desired (bootstrap.dataSecretName, or Kindling's config hash)? */
export function changedUserData(input: DecisionInput): boolean {
  if (kindlingTemplates(input))
    return (
      bootstrapTarget(input.kind, input.current.bootstrap)?.hash !==
      bootstrapTarget(input.kind, input.desired.bootstrap)?.hash
    );
  const path = [...SPEC_PATH[input.kind], 'bootstrap', 'dataSecretName'];
  return at(input.current.machine, path) !== at(input.desired.machine, path);
}

function machineDecisions(input: DecisionInput): { decisions: FieldDecision[]; ops: JsonPatchOperation[] } {
  const specPath = SPEC_PATH[input.kind];
  let memo: UserDataVerdict | undefined;
  const after = at(input.desired.machine, [...specPath, 'bootstrap', 'dataSecretName']);
  const userData = (): UserDataVerdict =>
    (memo ??= kindlingTemplates(input) ? userDataVerdict(input, after) : withoutBootstrapProvider(input, after));
  const decisions: FieldDecision[] = [];
  const ops: JsonPatchOperation[] = [];
  for (const c of diff(
    at(input.current.machine, METADATA_PATH[input.kind]),
    at(input.desired.machine, METADATA_PATH[input.kind]),
  )) {
    const [path, field] = [pointer([...METADATA_PATH[input.kind], ...c.segments]), dotted(['metadata', ...c.segments])];
    if (c.segments[0] === 'labels' || c.segments[0] === 'annotations')
      decisions.push({
        role: 'machine',
        path,
        field,
        verdict: 'propagated',
        reason: 'Cluster API updates it on existing Machines',
      });
    else if (input.kind === 'MachineSet')
      decisions.push({
        role: 'machine',
        path,
        field,
        verdict: 'rollout',
        reason: 'Kindling does not change it in place',
      });
  }
  for (const c of diff(at(input.current.machine, specPath), at(input.desired.machine, specPath))) {
    const v = machineSpecVerdict(pointer(c.segments), c, input, userData);
    const path = pointer([...specPath, ...c.segments]);
    decisions.push({ role: 'machine', path, field: dotted(c.segments), ...v });
    if (v.verdict === 'in-place')
      ops.push(
        c.after === undefined
          ? { op: 'remove', path }
          : addUnder(
              input.current.machine,
              [...specPath, ...c.segments.slice(0, -1)],
              c.segments.at(-1) ?? '',
              c.after,
            ),
      );
  }
  return { decisions, ops };
}

interface TemplateDecisions {
  decisions: FieldDecision[];
  ops: JsonPatchOperation[];
}

/** Kindling's own bootstrap config: a new config hash is a new payload (in place when the agent can apply it); nothing else changes in place. */
function kindlingBootstrapDecisions(input: DecisionInput, current: JsonObject, desired: JsonObject): TemplateDecisions {
  const path = TEMPLATE_SPEC_PATH[input.kind];
  const ops: JsonPatchOperation[] = [];
  const decisions = diff(at(current, path), at(desired, path)).map((c): FieldDecision => {
    const field = `${kindOf(desired)} ${dotted(c.segments)}`;
    const pointerTo = pointer([...path, ...c.segments]);
    if (dotted(c.segments) !== 'configHash')
      return {
        role: 'bootstrap',
        path: pointerTo,
        field,
        verdict: 'rollout',
        reason: 'Kindling changes only the config hash of its bootstrap configs in place',
      };
    const v = userDataVerdict(input, c.after);
    if (v.verdict === 'in-place') ops.push({ op: 'add', path: pointerTo, value: c.after });
    return { role: 'bootstrap', path: pointerTo, field, ...v };
  });
  return { decisions, ops };
}

function addedOrRemoved(
  role: 'infrastructure' | 'bootstrap',
  current: JsonObject | undefined,
  desired: JsonObject | undefined,
): FieldDecision[] {
  if (current === undefined && desired === undefined) return [];
  const what = role === 'infrastructure' ? 'the infrastructure' : 'a bootstrap provider’s config';
  return [
    {
      role,
      path: '',
      field: kindOf(current ?? desired),
      verdict: 'rollout',
      reason: `${what} is ${current === undefined ? 'added' : 'removed'}: new machines`,
    },
  ];
}

function templateDecisions(input: DecisionInput, role: 'infrastructure' | 'bootstrap'): TemplateDecisions {
  const [current, desired] = [input.current[role], input.desired[role]];
  if (current === undefined || desired === undefined)
    return { decisions: addedOrRemoved(role, current, desired), ops: [] };
  if (role === 'bootstrap' && kindlingTemplates(input)) return kindlingBootstrapDecisions(input, current, desired);
  const path = TEMPLATE_SPEC_PATH[input.kind];
  const reason =
    role === 'infrastructure'
      ? 'Kindling does not change the infrastructure in place: new machines'
      : "Kindling does not update another bootstrap provider's config in place";
  const decisions = diff(at(current, path), at(desired, path)).map((c): FieldDecision => ({
    role,
    path: pointer([...path, ...c.segments]),
    field: `${kindOf(desired)} ${nameOf(desired)} ${dotted(c.segments)}`.trim(),
    verdict: 'rollout',
    reason,
  }));
  return { decisions, ops: [] };
}

/** Would Cluster API's own comparison see this refused change? */
function visibleToCapi(d: FieldDecision, kind: DecisionInput['kind']): boolean {
  if (d.role !== 'machine') return true;
  const spec = pointer(SPEC_PATH[kind]);
  if (!under(d.path, spec)) return false;
  const inSpec = d.path.slice(spec.length);
  return !UNSEEN_BY_CAPI.some((p) => under(inSpec, p));
}

/** A JSON patch adding `key` under `segments` of obj, creating the missing parents (add needs its parent). */
function addUnder(obj: JsonObject, segments: readonly string[], key: string, value: unknown): JsonPatchOperation {
  let depth = 0;
  while (depth < segments.length && isObject(at(obj, segments.slice(0, depth + 1)))) depth++;
  if (depth === segments.length) return { op: 'add', path: pointer([...segments, key]), value };
  const missing = segments.slice(depth + 1).reduceRight<unknown>((inner, s) => ({ [s]: inner }), { [key]: value });
  return { op: 'add', path: pointer(segments.slice(0, depth + 1)), value: missing };
}

const describe = (d: FieldDecision): string => `${d.field} (${d.reason})`;

function summarise(changes: readonly FieldDecision[]): string {
  if (changes.length === 0) return 'nothing changes';
  const lines: [Verdict, string][] = [
    ['in-place', 'in place'],
    ['propagated', 'propagated by Cluster API'],
    ['rollout', 'must roll'],
  ];
  return lines
    .map(([verdict, label]) => [label, changes.filter((c) => c.verdict === verdict).map(describe)] as const)
    .filter(([, list]) => list.length > 0)
    .map(([label, list]) => `${label}: ${list.join('; ')}`)
    .join('. ');
}

export function decide(input: DecisionInput): Decision {
  const machine = machineDecisions(input);
  const [infrastructure, bootstrap] = [
    templateDecisions(input, 'infrastructure'),
    templateDecisions(input, 'bootstrap'),
  ];
  const changes = [...machine.decisions, ...infrastructure.decisions, ...bootstrap.decisions];
  const refused = changes.filter((c) => c.verdict === 'rollout');
  const patches: Record<ObjectRole, JsonPatchOperation[]> = {
    machine: machine.ops,
    infrastructure: [],
    bootstrap: bootstrap.ops,
  };
  if (refused.length > 0 && !refused.some((d) => visibleToCapi(d, input.kind))) {
    patches.infrastructure.push(
      addUnder(
        input.current.infrastructure,
        TEMPLATE_SPEC_PATH[input.kind],
        REFUSAL_MARKER,
        refused.map(describe).join('; '),
      ),
    );
  }
  return { inPlace: refused.length === 0, changes, patches, message: summarise(changes) };
}
