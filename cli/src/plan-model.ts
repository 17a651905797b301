/** The shapes of `kindling plan`: what it reads (PoolState, PlanInput) and what it answers (Plan), shared by the
 * reads (cluster.ts), the computation (plan.ts, plan-engine.ts) and the text form (plan-text.ts). */
import type * as k8s from '#k8s';
import type { NodePool } from '../../api/src/nodepool.js';
import type { ConfigDisruption } from '../../api/src/disruption-config.js';
import type { Machine, MachineDeployment, MachineSet } from '../../api/src/capi.js';
import type { ClusterApiPlan } from '../../inplace-upgrader/src/preview.js';
import type {
  ControlPlaneVersions,
  DocumentChange,
  InfrastructureTemplates,
  ReleaseVersionResolver,
} from '../../nodepool-controller/src/preview.js';

/** What `plan` reads: the pool's objects in the management cluster and its Nodes in the guest cluster. */
export interface PoolState {
  configMaps: k8s.V1ConfigMap[];
  /** The pool's token and user-data Secrets. */
  secrets: k8s.V1Secret[];
  machineSets: MachineSet[];
  machineDeployments: MachineDeployment[];
  machines: Machine[];
  /** Guest Nodes of the pool's Machines. */
  nodes: k8s.V1Node[];
  /** Why the guest Nodes could not be read, if they could not. */
  guestError?: string;
}

export interface PlanInput {
  /** The pool as planned (the live one with --release/--config, or the -f file). */
  pool: NodePool;
  /** Whether the pool exists in the management cluster. */
  exists: boolean;
  state: PoolState;
  versions: ControlPlaneVersions;
  releases?: ReleaseVersionResolver;
  templates?: InfrastructureTemplates;
  /** Lists the release repository's tags for the upgrade targets; absent: none are listed. */
  tags?: (image: string) => Promise<string[]>;
  maxSkewMinors: number;
  now: number;
}

export type PolicyStatus = 'pass' | 'overridden' | 'fail' | 'skipped';
export type Effect = 'propagate' | 'update-in-place' | 'replace' | 'new-machines';
export type Action = 'none' | 'create' | 'propagate' | 'update-in-place' | 'replace' | 'blocked';

export interface Policy {
  name: string;
  status: PolicyStatus;
  /** A skew rule spec.release.allowSkips may override, by the name it takes there; absent: mandatory. */
  skippable?: string;
  reason: string;
  message: string;
}

export interface FieldChange {
  field: string;
  what: string;
  effect: Effect;
  from?: string;
  to?: string;
}

export interface PlannedNode {
  name: string;
  zone: string;
  phase: string;
  unavailable: boolean;
  /** 1-based batch, or 0 when the node does not move. */
  batch: number;
}

export interface InPlacePlan {
  targetHash: string;
  maxUnavailable: number;
  nodes: PlannedNode[];
  batches: string[][];
  /** Machines without a Node yet: they boot the target config from their user-data. */
  machinesWithoutNode: number;
  halted?: { node: string; reason: string };
  stalled?: string;
}

export interface ReplacePlan {
  strategy: 'RollingUpdate' | 'OnDelete';
  replicas: number;
  maxSurge: number;
  maxUnavailable: number;
  /** Machines that run an older template and are replaced. */
  machines: string[];
  maxMachines: number;
  minAvailable: number;
  waves: number;
}

export interface UpgradeTarget {
  tag: string;
  version: string;
  /** available: every rule passes; overridden: only with spec.release.allowSkips; refused: a rule refuses it. */
  status: 'available' | 'overridden' | 'refused';
  /** The refusing rule's SupportedVersionSkew reason. */
  reason?: string;
  message: string;
}

export interface UpgradeTargets {
  /** host/repository of the pool's release image. */
  repository: string;
  /** The version the nodes run (the pool's release when none is deployed yet). */
  current?: string;
  /** Tags above the current version, newest first. */
  targets: UpgradeTarget[];
  /** Why the tags could not be listed or judged. */
  error?: string;
}

export interface Plan {
  pool: { namespace: string; name: string; cluster: string; upgradeType: 'Replace' | 'InPlace'; exists: boolean };
  release: { image: string; version?: string; currentVersion?: string };
  controlPlane: { version?: string; error?: string };
  paused?: string;
  /** When the change would start (the rollout gate: maintenance window, health gate); absent when the config hash
   * does not change. at: when the window opens, if that is what it waits for. */
  starts?: { now: boolean; at?: string; reason: string; message: string };
  policies: Policy[];
  blocked: boolean;
  blockedReason?: string;
  configHash: {
    current?: string;
    target?: string;
    changed: boolean;
    release?: { from?: string; to: string };
    documents: DocumentChange[];
  };
  changes: FieldChange[];
  propagation: { machines: string[]; nodes: string[]; guestError?: string };
  action: Action;
  inPlace?: InPlacePlan;
  replace?: ReplacePlan;
  /** ClusterAPI in-place engine: the extension's decision on the change (in place, or rolled out). */
  clusterApi?: ClusterApiPlan;
  upgradeTargets?: UpgradeTargets;
  /** An in-place payload change: each changed path, unit and SSH keys with its actions, and each node's least action. */
  disruption?: ConfigDisruption;
}

/** Never called: phases that only read must not write, and this makes sure of it. */
