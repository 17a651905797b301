import type { V1ObjectMeta } from '@kubernetes/client-node';
import type { Condition } from './conditions.js';

export const NODEPOOL_API_VERSION = 'kindling.dev/v1beta1';
export const NODEPOOL_KIND = 'NodePool';
export const NODEPOOL_PLURAL = 'nodepools';

export type UpgradeType = 'Replace' | 'InPlace';
export type ReplaceStrategy = 'RollingUpdate' | 'OnDelete';
/** An integer or a percentage such as "25%". */
export type IntOrPercent = number | string;

export interface ObjectRef {
  apiGroup: string;
  kind: string;
  name: string;
}

export interface Taint {
  key: string;
  value?: string;
  effect: 'NoSchedule' | 'PreferNoSchedule' | 'NoExecute';
}

export interface NodePoolSpec {
  clusterName: string;
  release: { image: string; allowPrerelease?: boolean };
  replicas?: number;
  autoScaling?: { min: number; max: number };
  management: {
    upgradeType: UpgradeType;
    replace?: {
      strategy?: ReplaceStrategy;
      rollingUpdate?: { maxSurge?: IntOrPercent; maxUnavailable?: IntOrPercent };
    };
    inPlace?: { maxUnavailable?: IntOrPercent };
    autoRepair?: boolean;
  };
  config?: { name: string }[];
  nodeDrainTimeout?: string;
  nodeVolumeDetachTimeout?: string;
  nodeLabels?: Record<string, string>;
  taints?: Taint[];
  platform: { infrastructureTemplateRef: ObjectRef };
  /** "true", "false", or an RFC3339 date until which reconciliation of the children is paused. */
  pausedUntil?: string;
}

export interface NodePoolStatus {
  replicas?: number;
  version?: string;
  configHash?: string;
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
