/**
 * NodePool condition types and their reasons, in one table. Each type says whether a False status needs a
 * spec change by the user (spec), will clear by itself (transient), or reports progress (progress).
 */
export const CONDITIONS = {
  /** spec: the release image cannot be resolved or read. */
  ValidReleaseImage: {
    kind: 'spec',
    reasons: { AsExpected: 'AsExpected', InvalidImage: 'InvalidImage', ImageUnreachable: 'ImageUnreachable' },
  },
  /** spec: a referenced config ConfigMap is missing or holds what cannot be parsed. */
  ValidMachineConfig: {
    kind: 'spec',
    reasons: { AsExpected: 'AsExpected', ConfigMapMissing: 'ConfigMapMissing', InvalidConfig: 'InvalidConfig' },
  },
  /** spec: the release breaks the version-skew policy against the guest control plane, or the guest's
   * kubeconfig Secret cannot be used to read its version (GuestKubeconfigRefused names the field refused).
   * True with Overridden: a skippable rule refused and spec.release.allowSkips overrides it. */
  SupportedVersionSkew: {
    kind: 'spec',
    reasons: {
      AsExpected: 'AsExpected',
      Overridden: 'Overridden',
      NodeNewerThanControlPlane: 'NodeNewerThanControlPlane',
      TooFarBehindControlPlane: 'TooFarBehindControlPlane',
      Downgrade: 'Downgrade',
      UpgradeSkipsMinor: 'UpgradeSkipsMinor',
      PrereleaseNotAllowed: 'PrereleaseNotAllowed',
      ControlPlaneUnreachable: 'ControlPlaneUnreachable',
      GuestKubeconfigRefused: 'GuestKubeconfigRefused',
    },
  },
  /** spec: the apiserver accepted every object the pool's controller wrote (a 400/403/422 — a webhook, an
   * admission plugin, validation, RBAC — says which object and the apiserver's own message). */
  ChildObjectsAccepted: {
    kind: 'spec',
    reasons: { AsExpected: 'AsExpected', Refused: 'Refused' },
  },
  /** spec or transient: the ignition server's verdict on the payload of the current hash. */
  ValidGeneratedPayload: {
    kind: 'spec',
    reasons: {
      AsExpected: 'AsExpected',
      Pending: 'Pending',
      InvalidConfig: 'InvalidConfig',
      ReleaseUnavailable: 'ReleaseUnavailable',
    },
  },
  /** progress: a host fetched its payload with the current token. */
  ReachedIgnitionEndpoint: {
    kind: 'progress',
    reasons: { AsExpected: 'AsExpected', NotReached: 'NotReached' },
  },
  /** progress: nodes are moving to a new config; WaitingForMaintenanceWindow (True) while a node waits for the
   * window because its update needs a drain or reboot the rollout's ceiling forbids (keys.ts ceilingHeld). */
  UpdatingConfig: {
    kind: 'progress',
    reasons: {
      AsExpected: 'AsExpected',
      InProgress: 'InProgress',
      WaitingForMaintenanceWindow: 'WaitingForMaintenanceWindow',
      Failed: 'Failed',
    },
  },
  /** progress: nodes are moving to a new release version; WaitingForMaintenanceWindow as for UpdatingConfig. */
  UpdatingVersion: {
    kind: 'progress',
    reasons: {
      AsExpected: 'AsExpected',
      InProgress: 'InProgress',
      WaitingForMaintenanceWindow: 'WaitingForMaintenanceWindow',
      Failed: 'Failed',
    },
  },
  /** progress: the cluster autoscaler owns the replica count; with autoScaling.min 0, the message says where the
   * capacity for scaling from zero came from, and CapacityUnknown that neither the infrastructure template nor
   * spec.autoScaling.capacity says. */
  AutoscalingEnabled: {
    kind: 'progress',
    reasons: { AsExpected: 'AsExpected', Disabled: 'Disabled', CapacityUnknown: 'CapacityUnknown' },
  },
  /** progress: a MachineHealthCheck remediates unhealthy machines. */
  AutorepairEnabled: {
    kind: 'progress',
    reasons: { AsExpected: 'AsExpected', Disabled: 'Disabled', WaitingForIgnition: 'WaitingForIgnition' },
  },
  /** spec: spec.management.maintenanceWindow can be read (its schedule, duration and time zone). */
  ValidMaintenanceWindow: {
    kind: 'spec',
    reasons: {
      AsExpected: 'AsExpected',
      InvalidSchedule: 'InvalidSchedule',
      InvalidDuration: 'InvalidDuration',
      InvalidTimeZone: 'InvalidTimeZone',
    },
  },
  /** transient: disruptive work (a rollout to a new config hash, or the next node of one under way) may start:
   * False while the maintenance window is closed or the health gate fails, the reason saying which;
   * HealthGateOverridden (True) when the override annotation let it start past a failing gate. */
  RolloutAllowed: {
    kind: 'transient',
    reasons: {
      AsExpected: 'AsExpected',
      WaitingForMaintenanceWindow: 'WaitingForMaintenanceWindow',
      TooManyNodesUnavailable: 'TooManyNodesUnavailable',
      NodeDegraded: 'NodeDegraded',
      ControlPlaneUnreachable: 'ControlPlaneUnreachable',
      HealthGateOverridden: 'HealthGateOverridden',
    },
  },
  /** spec: reconciliation is paused by spec.pausedUntil. */
  ReconciliationActive: {
    kind: 'spec',
    reasons: { AsExpected: 'AsExpected', Paused: 'Paused' },
  },
  /** transient: every Machine of the pool is Ready. */
  AllMachinesReady: {
    kind: 'transient',
    reasons: { AsExpected: 'AsExpected', MachinesNotReady: 'MachinesNotReady', InternalError: 'InternalError' },
  },
  /** transient: every host that booted (its Machine's infrastructure is provisioned) registered its Node
   * within the join timeout: a False names how many did not and the first reason (a denied CSR, none seen). */
  AllNodesJoined: {
    kind: 'transient',
    reasons: { AsExpected: 'AsExpected', NodesNotJoined: 'NodesNotJoined' },
  },
  /** transient: every Node of the pool is Ready. */
  AllNodesHealthy: {
    kind: 'transient',
    reasons: { AsExpected: 'AsExpected', NodesNotHealthy: 'NodesNotHealthy', InternalError: 'InternalError' },
  },
  /** summary: True when the pool has the replicas it asked for and nothing above is wrong. */
  Ready: {
    kind: 'transient',
    reasons: { AsExpected: 'AsExpected', NotReady: 'NotReady', InternalError: 'InternalError' },
  },
} as const;

export type ConditionType = keyof typeof CONDITIONS;
/** The reasons of a condition type (of each type, for a union of types). */
export type ConditionReason<T extends ConditionType> = T extends ConditionType
  ? keyof (typeof CONDITIONS)[T]['reasons']
  : never;

/** `value` when it is a reason of `type` in the table; undefined otherwise (a reason read from an object). */
export function reasonOf<T extends ConditionType>(type: T, value: string): ConditionReason<T> | undefined {
  return Object.hasOwn(CONDITIONS[type].reasons, value) ? (value as ConditionReason<T>) : undefined;
}
export const CONDITION_TYPES = Object.keys(CONDITIONS) as ConditionType[];

/** A condition of one type, its reason one of that type's reasons in the table. */
export interface TypedCondition<T extends ConditionType> {
  type: T;
  status: 'True' | 'False' | 'Unknown';
  reason: ConditionReason<T>;
  message: string;
  lastTransitionTime: string;
  observedGeneration?: number;
}

/** Any NodePool condition: a union over the types, so a reason of another type does not compile. */
export type Condition = { [T in ConditionType]: TypedCondition<T> }[ConditionType];

/** Fine: the condition says all is as expected (or a feature is simply off). Anything else is for people to see. */
export function isFine(c: Pick<Condition, 'status' | 'reason'>): boolean {
  return c.status !== 'Unknown' && (c.reason === 'AsExpected' || c.reason === 'Disabled');
}
