/**
 * The pool's status as a pure function of what a reconcile observed: every condition type of
 * api/src/conditions.ts, each from one small setter, with lastTransitionTime kept while a status holds.
 */
import { CONDITION_TYPES, CONDITIONS, type Condition, type ConditionType } from '../../api/src/conditions.js';
import type { NodePool, NodePoolStatus, RolloutRecord } from '../../api/src/nodepool.js';
import type { Machine } from '../../api/src/capi.js';
import type { HashInput } from './hash.js';
import type { JoinStatus } from './joining.js';
import type { Refusal } from '../../support/src/errors.js';

export interface Verdict {
  ok: boolean;
  reason: string;
  message: string;
}

/** An in-progress or failed move of the nodes from one hash to another. */
export interface Rollout {
  from: string;
  to: string;
  /** Which inputs differ; empty when the old inputs are gone (both are then reported). */
  changed: HashInput[];
  progress?: string;
  failure?: string;
}

export interface Observations {
  pool: NodePool;
  release?: Verdict & { version?: string };
  config?: Verdict;
  skew?: Verdict;
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
  /** The record of the rollout under way (why.ts): stored in status.rollout while it lasts. */
  why?: RolloutRecord;
  child?: { desired: number; available: number };
  machines: Machine[];
  /** The apiserver's refusal of an object this reconcile wrote, if any. */
  refusal?: Refusal;
  /** Booted hosts without a Node, and the timeout that makes them late. */
  joining?: JoinStatus & { timeoutMs: number };
}

type Status = Condition['status'];
type Setter = (o: Observations) => [Status, string, string];

const R = <T extends ConditionType>(type: T): (typeof CONDITIONS)[T]['reasons'] => CONDITIONS[type].reasons;

function fromVerdict(v: Verdict | undefined, what: string): [Status, string, string] {
  if (!v) return ['Unknown', 'AsExpected', `${what} not checked yet`];
  return [v.ok ? 'True' : 'False', v.reason, v.message];
}

function machineCondition(m: Machine, type: string): string | undefined {
  const conditions = (m.status as { conditions?: { type: string; status: string }[] } | undefined)?.conditions;
  return conditions?.find((c) => c.type === type)?.status;
}

function machinesSetter(type: string, okReason: string, badReason: string, what: string): Setter {
  return (o) => {
    const bad = o.machines
      .filter((m) => machineCondition(m, type) !== 'True')
      .map((m) => m.metadata.name)
      .sort();
    if (bad.length === 0) return ['True', okReason, `All ${o.machines.length} machines are ${what}`];
    const names = bad.slice(0, 5).join(', ') + (bad.length > 5 ? `, and ${bad.length - 5} more` : '');
    return ['False', badReason, `${bad.length} of ${o.machines.length} machines are not ${what}: ${names}`];
  };
}

function updating(kind: HashInput, reasons: { AsExpected: string; InProgress: string; Failed: string }): Setter {
  return (o) => {
    const r = o.rollout;
    const affected = r && (r.changed.length === 0 ? kind === 'config' : r.changed.includes(kind));
    if (!r || !affected)
      return ['False', reasons.AsExpected, `No ${kind === 'release' ? 'version' : 'config'} update in progress`];
    const what = kind === 'release' ? 'release' : 'config';
    if (r.failure)
      return ['False', reasons.Failed, `Updating the ${what} (hash ${r.from} to ${r.to}) failed: ${r.failure}`];
    return [
      'True',
      reasons.InProgress,
      `Updating the ${what} (hash ${r.from} to ${r.to})${r.progress ? `: ${r.progress}` : ''}`,
    ];
  };
}

const minutes = (ms: number): string => (ms % 60_000 === 0 ? `${ms / 60_000}m` : `${Math.round(ms / 1000)}s`);

function joined(o: Observations): [Status, string, string] {
  const j = o.joining;
  if (!j || j.late.length === 0) {
    const waiting = j?.waiting ?? 0;
    return [
      'True',
      'AsExpected',
      waiting === 0
        ? 'Every booted host has joined the cluster'
        : `${waiting} booted host(s) joining, within the ${minutes(j?.timeoutMs ?? 0)} timeout`,
    ];
  }
  const first = j.late[0] as JoinStatus['late'][number];
  const more = j.late.length > 1 ? ` (and ${j.late.length - 1} more)` : '';
  return [
    'False',
    R('AllNodesJoined').NodesNotJoined,
    `${j.late.length} host(s) booted but did not join within ${minutes(j.timeoutMs)}: ${first.machine}${more}, booted at ${first.since}: ${first.reason}`,
  ];
}

const SETTERS: Record<ConditionType, Setter> = {
  ValidReleaseImage: (o) => fromVerdict(o.release, 'Release image'),
  ValidMachineConfig: (o) => fromVerdict(o.config, 'Config'),
  SupportedVersionSkew: (o) => fromVerdict(o.skew, 'Version skew'),
  ChildObjectsAccepted: (o) =>
    o.refusal
      ? [
          'False',
          R('ChildObjectsAccepted').Refused,
          `The apiserver refused ${o.refusal.kind} ${o.refusal.key} (${o.refusal.code}): ${o.refusal.message}`,
        ]
      : ['True', 'AsExpected', 'The apiserver accepted every object of the pool'],
  ValidGeneratedPayload: (o) => {
    const reason = o.payload?.reason;
    if (reason === undefined)
      return ['Unknown', R('ValidGeneratedPayload').Pending, 'Waiting for the ignition server to generate the payload'];
    return [reason === 'AsExpected' ? 'True' : 'False', reason, o.payload?.message ?? ''];
  },
  ReachedIgnitionEndpoint: (o) =>
    o.reachedIgnitionAt
      ? ['True', 'AsExpected', `A host fetched its payload at ${o.reachedIgnitionAt}`]
      : [
          'False',
          R('ReachedIgnitionEndpoint').NotReached,
          'No host has fetched its payload with the current token yet',
        ],
  UpdatingConfig: updating('config', R('UpdatingConfig')),
  UpdatingVersion: updating('release', R('UpdatingVersion')),
  AutoscalingEnabled: (o) => {
    const s = o.pool.spec.autoScaling;
    return s
      ? ['True', 'AsExpected', `The cluster autoscaler keeps between ${s.min} and ${s.max} nodes`]
      : ['False', R('AutoscalingEnabled').Disabled, 'spec.autoScaling is not set'];
  },
  AutorepairEnabled: (o) => {
    if (!o.pool.spec.management.autoRepair)
      return ['False', R('AutorepairEnabled').Disabled, 'spec.management.autoRepair is off'];
    if (!o.healthCheckExists)
      return [
        'False',
        R('AutorepairEnabled').WaitingForIgnition,
        'The MachineHealthCheck is created once a host has reached the ignition endpoint',
      ];
    return ['True', 'AsExpected', 'A MachineHealthCheck remediates unhealthy machines'];
  },
  ReconciliationActive: (o) =>
    o.pausedUntil === undefined
      ? ['True', 'AsExpected', 'Reconciliation is active']
      : [
          'False',
          R('ReconciliationActive').Paused,
          o.pausedUntil === 'true' ? 'Paused by spec.pausedUntil' : `Paused by spec.pausedUntil until ${o.pausedUntil}`,
        ],
  AllMachinesReady: machinesSetter('Ready', 'AsExpected', R('AllMachinesReady').MachinesNotReady, 'ready'),
  AllNodesJoined: joined,
  AllNodesHealthy: machinesSetter('NodeHealthy', 'AsExpected', R('AllNodesHealthy').NodesNotHealthy, 'healthy'),
  Ready: () => ['Unknown', '', ''], // summarised from the others below
};

/** The first reason the pool is not ready, or undefined. */
function notReadyBecause(o: Observations, conds: Map<ConditionType, Condition>): string | undefined {
  for (const type of [
    'ValidReleaseImage',
    'ValidMachineConfig',
    'SupportedVersionSkew',
    'ChildObjectsAccepted',
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
  const make = (type: ConditionType, [status, reason, message]: [Status, string, string]): Condition => {
    const prev = previous.find((c) => c.type === type);
    const lastTransitionTime = prev && prev.status === status ? prev.lastTransitionTime : now;
    return {
      type,
      status,
      reason,
      message,
      lastTransitionTime,
      ...(generation === undefined ? {} : { observedGeneration: generation }),
    };
  };
  for (const type of CONDITION_TYPES) if (type !== 'Ready') byType.set(type, make(type, SETTERS[type](o)));
  const why = notReadyBecause(o, byType);
  byType.set(
    'Ready',
    make(
      'Ready',
      why === undefined
        ? ['True', 'AsExpected', 'All machines are available at the desired config']
        : ['False', R('Ready').NotReady, why],
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
