/**
 * The pool's status as a pure function of what a reconcile observed: every condition type of
 * api/src/conditions.ts, each from one small setter, with lastTransitionTime kept while a status holds.
 */
import {
  CONDITION_TYPES,
  type Condition,
  reasonOf,
  type ConditionReason,
  type ConditionType,
  type TypedCondition,
} from '../../api/src/conditions.js';
import type { NodePool, NodePoolStatus, RolloutRecord } from '../../api/src/nodepool.js';
import type { Machine } from '../../api/src/capi.js';
import type { HashInput } from './hash.js';
import type { JoinStatus } from './joining.js';
import type { ScaleFromZero } from './capacity.js';
import type { Refusal } from '../../support/src/errors.js';
import type { GateVerdict } from './rollout-gate.js';

/** A phase's verdict on one input, its reason one of its condition's reasons. */
export interface Verdict<T extends ConditionType = ConditionType> {
  ok: boolean;
  reason: ConditionReason<T>;
  message: string;
}

/** An in-progress or failed move of the nodes from one hash to another. */
interface Rollout {
  from: string;
  to: string;
  /** Which inputs differ; empty when the old inputs are gone (both are then reported). */
  changed: HashInput[];
  progress?: string;
  failure?: string;
  /** A node waits for the maintenance window: its update needs a drain or reboot the rollout's ceiling forbids. */
  waiting?: string;
}

export interface Observations {
  pool: NodePool;
  release?: Verdict<'ValidReleaseImage'> & { version?: string };
  config?: Verdict<'ValidMachineConfig'>;
  skew?: Verdict<'SupportedVersionSkew'>;
  /** spec.management.maintenanceWindow, when set. */
  window?: Verdict<'ValidMaintenanceWindow'>;
  /** The rollout gate's verdict, when a rollout would start or is under way. */
  gate?: GateVerdict;
  /** pausedUntil in effect: "true" or the date. */
  pausedUntil?: string;
  targetHash?: string;
  effectiveHash?: string;
  /** The release version the children are written with (the nodes run it once no rollout is in progress). */
  effectiveVersion?: string;
  /** Why the target is not deployed yet (skew, token pending, bad input). */
  pending?: string;
  /** ANNOTATIONS.payloadReason / payloadMessage of the target's token Secret. */
  payload?: { reason?: string; message?: string };
  reachedIgnitionAt?: string;
  healthCheckExists: boolean;
  rollout?: Rollout;
  /** The record of the rollout under way (rollout-record.ts): stored in status.rollout while it lasts. */
  why?: RolloutRecord;
  child?: { desired: number; available: number };
  machines: Machine[];
  /** The apiserver's refusal of an object this reconcile wrote, if any. */
  refusal?: Refusal;
  /** A pool that may scale to zero: the capacity it tells the autoscaler, and where it came from. */
  capacity?: ScaleFromZero;
  /** Booted hosts without a Node, and the timeout that makes them late. */
  joining?: JoinStatus & { timeoutMs: number };
}

type Status = Condition['status'];
/** What a setter decides: the condition without its type and times. */
interface Decided<T extends ConditionType> {
  status: Status;
  /** Every type's reasons include AsExpected. */
  reason: ConditionReason<T> | 'AsExpected';
  message: string;
}
type Setter<T extends ConditionType> = (o: Observations) => Decided<T>;

function fromVerdict<T extends ConditionType>(v: Verdict<T> | undefined, what: string): Decided<T> {
  if (!v) return { status: 'Unknown', reason: 'AsExpected', message: `${what} not checked yet` };
  return { status: v.ok ? 'True' : 'False', reason: v.reason, message: v.message };
}

function machineCondition(m: Machine, type: string): string | undefined {
  const conditions = (m.status as { conditions?: { type: string; status: string }[] } | undefined)?.conditions;
  return conditions?.find((c) => c.type === type)?.status;
}

function machinesSetter<T extends ConditionType>(
  machineType: string,
  badReason: ConditionReason<T>,
  what: string,
): Setter<T> {
  return (o) => {
    const bad = o.machines
      .filter((m) => machineCondition(m, machineType) !== 'True')
      .map((m) => m.metadata.name)
      .sort();
    if (bad.length === 0)
      return { status: 'True', reason: 'AsExpected', message: `All ${o.machines.length} machines are ${what}` };
    const names = bad.slice(0, 5).join(', ') + (bad.length > 5 ? `, and ${bad.length - 5} more` : '');
    return {
      status: 'False',
      reason: badReason,
      message: `${bad.length} of ${o.machines.length} machines are not ${what}: ${names}`,
    };
  };
}

function updating(kind: HashInput): Setter<'UpdatingConfig' | 'UpdatingVersion'> {
  return (o) => {
    const r = o.rollout;
    const affected = r && (r.changed.length === 0 ? kind === 'config' : r.changed.includes(kind));
    if (!r || !affected)
      return {
        status: 'False',
        reason: 'AsExpected',
        message: `No ${kind === 'release' ? 'version' : 'config'} update in progress`,
      };
    const what = kind === 'release' ? 'release' : 'config';
    if (r.failure)
      return {
        status: 'False',
        reason: 'Failed',
        message: `Updating the ${what} (hash ${r.from} to ${r.to}) failed: ${r.failure}`,
      };
    if (r.waiting)
      return {
        status: 'True',
        reason: 'WaitingForMaintenanceWindow',
        message: `Updating the ${what} (hash ${r.from} to ${r.to}) waits for the maintenance window: ${r.waiting}`,
      };
    return {
      status: 'True',
      reason: 'InProgress',
      message: `Updating the ${what} (hash ${r.from} to ${r.to})${r.progress ? `: ${r.progress}` : ''}`,
    };
  };
}

const minutes = (ms: number): string => (ms % 60_000 === 0 ? `${ms / 60_000}m` : `${Math.round(ms / 1000)}s`);

function joined(o: Observations): Decided<'AllNodesJoined'> {
  const j = o.joining;
  if (!j || j.late.length === 0) {
    const waiting = j?.waiting ?? 0;
    return {
      status: 'True',
      reason: 'AsExpected',
      message:
        waiting === 0
          ? 'Every booted host has joined the cluster'
          : `${waiting} booted host(s) joining, within the ${minutes(j?.timeoutMs ?? 0)} timeout`,
    };
  }
  const first = j.late[0] as JoinStatus['late'][number];
  const more = j.late.length > 1 ? ` (and ${j.late.length - 1} more)` : '';
  return {
    status: 'False',
    reason: 'NodesNotJoined',
    message: `${j.late.length} host(s) booted but did not join within ${minutes(j.timeoutMs)}: ${first.machine}${more}, booted at ${first.since}: ${first.reason}`,
  };
}

/** The ignition server's verdict, written on a Secret of the tenant's namespace: a reason outside the table is not taken. */
function payloadVerdict(o: Observations): Decided<'ValidGeneratedPayload'> {
  const written = o.payload?.reason;
  if (written === undefined)
    return { status: 'Unknown', reason: 'Pending', message: 'Waiting for the ignition server to generate the payload' };
  const reason = reasonOf('ValidGeneratedPayload', written) ?? 'InvalidConfig';
  return { status: reason === 'AsExpected' ? 'True' : 'False', reason, message: o.payload?.message ?? '' };
}

function autorepair(o: Observations): Decided<'AutorepairEnabled'> {
  if (!o.pool.spec.management.autoRepair)
    return { status: 'False', reason: 'Disabled', message: 'spec.management.autoRepair is off' };
  if (!o.healthCheckExists)
    return {
      status: 'False',
      reason: 'WaitingForIgnition',
      message: 'The MachineHealthCheck is created once a host has reached the ignition endpoint',
    };
  return { status: 'True', reason: 'AsExpected', message: 'A MachineHealthCheck remediates unhealthy machines' };
}

const SETTERS: { [T in Exclude<ConditionType, 'Ready'>]: Setter<T> } = {
  ValidReleaseImage: (o) => fromVerdict(o.release, 'Release image'),
  ValidMachineConfig: (o) => fromVerdict(o.config, 'Config'),
  SupportedVersionSkew: (o) => fromVerdict(o.skew, 'Version skew'),
  ChildObjectsAccepted: (o) =>
    o.refusal
      ? {
          status: 'False',
          reason: 'Refused',
          message: `The apiserver refused ${o.refusal.kind} ${o.refusal.key} (${o.refusal.code}): ${o.refusal.message}`,
        }
      : { status: 'True', reason: 'AsExpected', message: 'The apiserver accepted every object of the pool' },
  ValidGeneratedPayload: payloadVerdict,
  ReachedIgnitionEndpoint: (o) =>
    o.reachedIgnitionAt
      ? { status: 'True', reason: 'AsExpected', message: `A host fetched its payload at ${o.reachedIgnitionAt}` }
      : {
          status: 'False',
          reason: 'NotReached',
          message: 'No host has fetched its payload with the current token yet',
        },
  UpdatingConfig: updating('config'),
  UpdatingVersion: updating('release'),
  AutoscalingEnabled: autoscaling,
  AutorepairEnabled: autorepair,
  ValidMaintenanceWindow: (o) =>
    o.window
      ? fromVerdict(o.window, 'Maintenance window')
      : { status: 'True', reason: 'AsExpected', message: 'No maintenance window: disruptive work starts at once' },
  RolloutAllowed: (o) =>
    o.gate
      ? { status: o.gate.allowed ? 'True' : 'False', reason: o.gate.reason, message: o.gate.message }
      : { status: 'True', reason: 'AsExpected', message: 'No rollout is waiting to start' },
  ReconciliationActive: (o) =>
    o.pausedUntil === undefined
      ? { status: 'True', reason: 'AsExpected', message: 'Reconciliation is active' }
      : {
          status: 'False',
          reason: 'Paused',
          message:
            o.pausedUntil === 'true'
              ? 'Paused by spec.pausedUntil'
              : `Paused by spec.pausedUntil until ${o.pausedUntil}`,
        },
  AllMachinesReady: machinesSetter('Ready', 'MachinesNotReady', 'ready'),
  AllNodesJoined: joined,
  AllNodesHealthy: machinesSetter('NodeHealthy', 'NodesNotHealthy', 'healthy'),
};

function autoscaling(o: Observations): Decided<'AutoscalingEnabled'> {
  const s = o.pool.spec.autoScaling;
  if (!s) return { status: 'False', reason: 'Disabled', message: 'spec.autoScaling is not set' };
  const bounds = `The cluster autoscaler keeps between ${s.min} and ${s.max} nodes`;
  if (!o.capacity) return { status: 'True', reason: 'AsExpected', message: bounds };
  const message = `${bounds}; ${o.capacity.message}`;
  return o.capacity.source
    ? { status: 'True', reason: 'AsExpected', message }
    : { status: 'False', reason: 'CapacityUnknown', message };
}

/** The first reason the pool is not ready, or undefined. */
function notReadyBecause(o: Observations, conds: Map<ConditionType, Condition>): string | undefined {
  for (const type of [
    'ValidReleaseImage',
    'ValidMachineConfig',
    'SupportedVersionSkew',
    'ChildObjectsAccepted',
    'ValidMaintenanceWindow',
    'ReconciliationActive',
  ] as const) {
    const c = conds.get(type);
    if (c?.status !== 'True') return `${type}: ${c?.message ?? ''}`;
  }
  if (o.pending) return o.pending;
  if (!o.child) return 'The pool has no machines yet';
  if (o.child.available < o.child.desired) return `${o.child.available} of ${o.child.desired} machines are available`;
  return undefined;
}

/** Conditions in CONDITION_TYPES order; a condition whose status did not change keeps its transition time. */
export function computeConditions(o: Observations, previous: readonly Condition[], now: string): Condition[] {
  const generation = o.pool.metadata.generation;
  const byType = new Map<ConditionType, Condition>();
  const make = <T extends ConditionType>(type: T, d: Decided<T>): Condition => {
    const prev = previous.find((c) => c.type === type);
    const lastTransitionTime = prev && prev.status === d.status ? prev.lastTransitionTime : now;
    const condition: TypedCondition<T> = {
      type,
      ...(d as Decided<T> & { reason: ConditionReason<T> }),
      lastTransitionTime,
      ...(generation === undefined ? {} : { observedGeneration: generation }),
    };
    // One member of the Condition union; TypeScript cannot pick which for a generic T.
    return condition as Condition;
  };
  for (const type of CONDITION_TYPES) if (type !== 'Ready') byType.set(type, make(type, SETTERS[type](o)));
  const why = notReadyBecause(o, byType);
  byType.set(
    'Ready',
    make(
      'Ready',
      why === undefined
        ? { status: 'True', reason: 'AsExpected', message: 'All machines are available at the desired config' }
        : { status: 'False', reason: 'NotReady', message: why },
    ),
  );
  return CONDITION_TYPES.map((t) => byType.get(t) as Condition);
}

export interface StatusInput {
  observations: Observations;
  now: string;
}

const rolloutOf = (o: Observations): Pick<NodePoolStatus, 'rollout'> => (o.why ? { rollout: o.why } : {});

export function computeStatus({ observations: o, now }: StatusInput): NodePoolStatus {
  const previous = o.pool.status ?? {};
  const version = o.effectiveVersion;
  const status: NodePoolStatus = {
    replicas: o.child?.available ?? 0,
    ...(o.rollout
      ? previous.version === undefined
        ? {}
        : { version: previous.version }
      : version === undefined
        ? {}
        : { version }),
    ...(o.effectiveHash === undefined ? {} : { configHash: o.effectiveHash }),
    ...rolloutOf(o),
    ...(o.pool.metadata.generation === undefined ? {} : { observedGeneration: o.pool.metadata.generation }),
    conditions: computeConditions(o, previous.conditions ?? [], now),
  };
  return status;
}
