/**
 * Kindling's Cluster API bootstrap provider (ClusterAPI-engine pools): a KindlingConfigTemplate per pool and
 * config hash, which Cluster API clones into one KindlingConfig per Machine; the nodepool-controller answers
 * each KindlingConfig with the data Secret of its pool and hash (the pool's user-data Secret: the Ignition
 * stub), as the v1beta2 bootstrap contract asks (status.dataSecretName, status.initialization.dataSecretCreated).
 * An in-place update is Cluster API rewriting a Machine's KindlingConfig spec to the new hash.
 */
import type { ObjectMeta } from './nodepool.js';

export const BOOTSTRAP_GROUP_NAME = 'bootstrap.kindling.dev';
export const BOOTSTRAP_API_VERSION = `${BOOTSTRAP_GROUP_NAME}/v1beta1`;
export const KINDLING_CONFIG_KIND = 'KindlingConfig';
export const KINDLING_CONFIG_TEMPLATE_KIND = 'KindlingConfigTemplate';

/** What a Machine boots from: the payload of one pool at one config hash. */
interface KindlingConfigSpec {
  nodePool: string;
  configHash: string;
}

interface KindlingConfigCondition {
  type: string;
  status: 'True' | 'False' | 'Unknown';
  reason: string;
  message: string;
  lastTransitionTime: string;
  observedGeneration?: number;
}

export interface KindlingConfigStatus {
  /** The Secret holding the user-data (key `value`, format `ignition`) for spec's pool and hash. */
  dataSecretName?: string;
  initialization?: { dataSecretCreated?: boolean };
  observedGeneration?: number;
  conditions?: KindlingConfigCondition[];
}

export interface KindlingConfig {
  apiVersion: typeof BOOTSTRAP_API_VERSION;
  kind: typeof KINDLING_CONFIG_KIND;
  metadata: ObjectMeta;
  spec: KindlingConfigSpec;
  status?: KindlingConfigStatus;
}

export interface KindlingConfigTemplate {
  apiVersion: typeof BOOTSTRAP_API_VERSION;
  kind: typeof KINDLING_CONFIG_TEMPLATE_KIND;
  metadata: ObjectMeta;
  spec: { template: { metadata?: { labels?: Record<string, string> }; spec: KindlingConfigSpec } };
}
