import type { V1ObjectMeta } from '#k8s';
import type { Condition } from './conditions.js';
import type { DisruptionPolicy } from './disruption.js';
import type { TargetDisruption } from './disruption-config.js';

export const NODEPOOL_GROUP = 'kindling.dev';
export const NODEPOOL_VERSION = 'v1beta1';
export const NODEPOOL_API_VERSION = `${NODEPOOL_GROUP}/${NODEPOOL_VERSION}`;
export const NODEPOOL_KIND = 'NodePool';
export const NODEPOOL_PLURAL = 'nodepools';

export type UpgradeType = 'Replace' | 'InPlace';
type ReplaceStrategy = 'RollingUpdate' | 'OnDelete';
/**
 * Who updates an InPlace pool's nodes. MachineSet: the pool is a bare MachineSet and Kindling's upgrader
 * picks the nodes. ClusterAPI: the pool is a MachineDeployment whose Machines boot from Kindling's bootstrap
 * provider (KindlingConfig); Cluster API picks the Machines under the pool's maxSurge/maxUnavailable and asks
 * Kindling's Runtime Extension what it can update in place, and rolls what it cannot.
 */
export type InPlaceEngine = 'MachineSet' | 'ClusterAPI';
/** An integer or a percentage such as "25%". */
export type IntOrPercent = number | string;

export interface ObjectRef {
  apiGroup: string;
  kind: string;
  name: string;
}

interface Taint {
  key: string;
  value?: string;
  effect: 'NoSchedule' | 'PreferNoSchedule' | 'NoExecute';
}

/** spec.management.inPlace.healthCheckTimeout when unset: long enough for a real host to reboot and its
 * kubelet to post a Ready status, short enough that a broken update is rolled back while someone watches. */
export const DEFAULT_HEALTH_CHECK_TIMEOUT = '5m';

/** The skippable rules of the version policy (the others are mandatory): spec.release.allowSkips lists those
 * a pool overrides, as kubeadm's --ignore-preflight-errors does for its skippable checks. */
export type VersionSkip = 'Downgrade' | 'MinorSkip';

interface NodePoolRelease {
  image: string;
  allowPrerelease?: boolean;
  /** Skippable version rules this pool overrides (a downgrade, an upgrade that skips a minor version). */
  allowSkips?: VersionSkip[];
}

/** What one node of the pool offers, for the cluster autoscaler to scale the pool up from zero when the
 * infrastructure template does not report it (memory as a Kubernetes quantity such as "16Gi"). */
export interface NodeCapacity {
  cpu?: string;
  memory?: string;
  gpuCount?: number;
  gpuType?: string;
}

/** spec.management.maintenanceWindow: when disruptive work may start (nodes handed out for an in-place update,
 * a Replace pool's new Machines). Each window opens at a time the schedule names, read in the time zone, and
 * stays open for the duration. */
export interface MaintenanceWindow {
  /** A 5-field cron expression ("0 2 * * 6": Saturdays at 02:00). */
  schedule: string;
  /** How long each window stays open (a Go duration such as 4h or 90m). */
  duration: string;
  /** An IANA time zone such as Europe/Berlin (default UTC). */
  timeZone?: string;
}

export interface NodePoolSpec {
  clusterName: string;
  release: NodePoolRelease;
  replicas?: number;
  autoScaling?: { min: number; max: number; capacity?: NodeCapacity };
  management: {
    upgradeType: UpgradeType;
    replace?: {
      strategy?: ReplaceStrategy;
      rollingUpdate?: { maxSurge?: IntOrPercent; maxUnavailable?: IntOrPercent };
    };
    inPlace?: {
      engine?: InPlaceEngine;
      maxUnavailable?: IntOrPercent;
      maxSurge?: IntOrPercent;
      /** How long a node has, after the reboot of an in-place update, to be Ready at the payload's kubelet
       * version before its agent rolls the update back (a Go duration; default DEFAULT_HEALTH_CHECK_TIMEOUT). */
      healthCheckTimeout?: string;
      /** Which action each change needs (disruption.ts); laid over DEFAULT_DISRUPTION_POLICY. */
      disruptionPolicy?: DisruptionPolicy;
    };
    autoRepair?: boolean;
    /** Unset: disruptive work starts whenever there is some. */
    maintenanceWindow?: MaintenanceWindow;
  };
  config?: { name: string }[];
  nodeDrainTimeout?: string;
  nodeVolumeDetachTimeout?: string;
  /** How long Cluster API tries to delete a Machine's Node before it gives up (a Go duration). */
  nodeDeletionTimeout?: string;
  /** How long a new Machine is Ready before it counts as available. */
  minReadySeconds?: number;
  nodeLabels?: Record<string, string>;
  /** Annotations put on the pool's guest Nodes, propagated in place without a rollout. */
  nodeAnnotations?: Record<string, string>;
  /** Annotations put on the pool's Machines, propagated in place without a rollout. */
  machineAnnotations?: Record<string, string>;
  taints?: Taint[];
  platform: { infrastructureTemplateRef: ObjectRef };
  /** "true", "false", or an RFC3339 date until which reconciliation of the children is paused. */
  pausedUntil?: string;
}

/** What a change of one input does to the nodes: labels, taints and timeouts reach them where they are
 * (Propagate); a new payload is applied in place (InPlace) or new Machines replace the old (Rollout); a new
 * template of an InPlace pool reaches only Machines created from now on (NewMachines). */
export type RolloutStrategy = 'Propagate' | 'InPlace' | 'Rollout' | 'NewMachines';

export interface RolloutChange {
  input: 'release' | 'config' | 'template';
  /** Which: the release images, "<kind> <name> added|removed|changed in ConfigMap <name>", the templates. */
  detail: string;
  strategy: RolloutStrategy;
}

/** The rollout under way, recorded by the nodepool-controller when it first sees it (the config hash or
 * the template changed) and kept until it completes. */
export interface RolloutRecord {
  /** Config hashes: the nodes' and the target. */
  from: string;
  to: string;
  /** When the controller first saw it (RFC3339). */
  since: string;
  changes: RolloutChange[];
  /** An in-place payload change: what the disruption policy gives each changed path, unit and user's SSH keys,
   * and the least action each node takes ("none", "restart kubelet.service", "drain, reboot"). */
  disruption?: RolloutDisruption;
}

export interface RolloutDisruption {
  action: string;
  drain: boolean;
  reboot: boolean;
  changes: TargetDisruption[];
}

export interface NodePoolStatus {
  replicas?: number;
  version?: string;
  configHash?: string;
  rollout?: RolloutRecord;
  observedGeneration?: number;
  conditions?: Condition[];
}

/** Object metadata as client-node types it (timestamps are Dates once deserialized), with a required name. */
export type ObjectMeta = V1ObjectMeta & { name: string };

export interface NodePool {
  apiVersion: typeof NODEPOOL_API_VERSION;
  kind: typeof NODEPOOL_KIND;
  metadata: ObjectMeta;
  spec: NodePoolSpec;
  status?: NodePoolStatus;
}

/** The engine of an InPlace pool (MachineSet unless it says ClusterAPI); undefined for a Replace pool. */
export function inPlaceEngine(pool: Pick<NodePool, 'spec'>): InPlaceEngine | undefined {
  if (pool.spec.management.upgradeType !== 'InPlace') return undefined;
  return pool.spec.management.inPlace?.engine ?? 'MachineSet';
}

/** Is the pool's child a MachineDeployment (Replace, or InPlace driven by Cluster API) rather than a bare MachineSet? */
export function hasMachineDeployment(pool: Pick<NodePool, 'spec'>): boolean {
  return inPlaceEngine(pool) !== 'MachineSet';
}
