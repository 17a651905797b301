/**
 * The Cluster API v1beta2 objects Kindling writes, limited to the fields it sets or reads
 * (checked against the cluster-api v1.14.2 CRDs in core/config/crd/bases).
 */
import type { IntOrPercent, ObjectMeta, ObjectRef } from './nodepool.js';

export const CAPI_GROUP = 'cluster.x-k8s.io';
export const CAPI_VERSION = 'v1beta2';
export const CAPI_API_VERSION = `${CAPI_GROUP}/${CAPI_VERSION}`;

interface LabelSelector {
  matchLabels?: Record<string, string>;
}

export interface MachineTaint {
  key: string;
  value?: string;
  effect: 'NoSchedule' | 'PreferNoSchedule' | 'NoExecute';
  /** Always: kept in sync on the Node; OnInitialization: set once at registration. */
  propagation: 'Always' | 'OnInitialization';
}

interface MachineDeletion {
  nodeDrainTimeoutSeconds?: number;
  nodeVolumeDetachTimeoutSeconds?: number;
  nodeDeletionTimeoutSeconds?: number;
}

export interface MachineSpec {
  clusterName: string;
  bootstrap: { dataSecretName?: string; configRef?: ObjectRef };
  infrastructureRef: ObjectRef;
  version?: string;
  failureDomain?: string;
  providerID?: string;
  deletion?: MachineDeletion;
  taints?: MachineTaint[];
  minReadySeconds?: number;
}

export interface MachineTemplate {
  metadata?: { labels?: Record<string, string>; annotations?: Record<string, string> };
  spec: MachineSpec;
}

export interface MachineSet {
  apiVersion: typeof CAPI_API_VERSION;
  kind: 'MachineSet';
  metadata: ObjectMeta;
  spec: { clusterName: string; replicas?: number; selector: LabelSelector; template: MachineTemplate };
  status?: { replicas?: number; readyReplicas?: number; availableReplicas?: number; upToDateReplicas?: number };
}

export interface MachineDeployment {
  apiVersion: typeof CAPI_API_VERSION;
  kind: 'MachineDeployment';
  metadata: ObjectMeta;
  spec: {
    clusterName: string;
    replicas?: number;
    paused?: boolean;
    selector: LabelSelector;
    template: MachineTemplate;
    rollout?: {
      strategy?: {
        type: 'RollingUpdate' | 'OnDelete';
        rollingUpdate?: { maxSurge?: IntOrPercent; maxUnavailable?: IntOrPercent };
      };
    };
  };
  status?: { replicas?: number; readyReplicas?: number; availableReplicas?: number; upToDateReplicas?: number };
}

interface UnhealthyCondition {
  type: string;
  status: 'True' | 'False' | 'Unknown';
  timeoutSeconds: number;
}

export interface MachineHealthCheck {
  apiVersion: typeof CAPI_API_VERSION;
  kind: 'MachineHealthCheck';
  metadata: ObjectMeta;
  spec: {
    clusterName: string;
    selector: LabelSelector;
    checks?: { nodeStartupTimeoutSeconds?: number; unhealthyNodeConditions?: UnhealthyCondition[] };
    remediation?: { triggerIf?: { unhealthyLessThanOrEqualTo?: IntOrPercent } };
  };
}

export interface Machine {
  apiVersion: typeof CAPI_API_VERSION;
  kind: 'Machine';
  metadata: ObjectMeta;
  spec: MachineSpec;
  status?: {
    nodeRef?: { name: string };
    phase?: string;
    addresses?: { type: string; address: string }[];
    conditions?: MachineCondition[];
  };
}

/** A Cluster API v1beta2 condition as Machines carry them. */
interface MachineCondition {
  type: string;
  status: 'True' | 'False' | 'Unknown';
  reason?: string;
  message?: string;
  lastTransitionTime?: string;
}

/** Cluster API Runtime SDK registration (its storage version in v1.14; the manager's RuntimeSDK gate on). */
export const RUNTIME_API_VERSION = 'runtime.cluster.x-k8s.io/v1beta2';

export interface ExtensionConfig {
  apiVersion: typeof RUNTIME_API_VERSION;
  kind: 'ExtensionConfig';
  metadata: ObjectMeta;
  spec: {
    clientConfig: {
      url?: string;
      service?: { namespace: string; name: string; path?: string; port?: number };
      /** PEM CA bundle of the extension's serving certificate, base64. */
      caBundle?: string;
    };
    namespaceSelector?: LabelSelector;
    settings?: Record<string, string>;
  };
  status?: {
    handlers?: {
      name: string;
      requestHook: { apiVersion: string; hook: string };
      timeoutSeconds?: number;
      failurePolicy?: string;
    }[];
    conditions?: { type: string; status: string; reason?: string; message?: string }[];
  };
}
