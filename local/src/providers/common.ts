import * as k8s from '#k8s';

export interface ObjectCondition {
  type: string;
  status: 'True' | 'False' | 'Unknown';
  reason: string;
  message: string;
  lastTransitionTime: string;
}

/** The provider's infrastructure object: one host of the local environment. */
export interface LocalMachine extends k8s.KubernetesObject {
  metadata: k8s.V1ObjectMeta & { name: string; namespace: string };
  spec?: { providerID?: string; failureDomain?: string; failureDomains?: string[] };
  status?: {
    initialization?: { provisioned?: boolean };
    addresses?: { type: string; address: string }[];
    hostRoot?: string;
    conditions?: ObjectCondition[];
  };
}

export interface ProviderContext {
  stateDir: string;
  objects: k8s.KubernetesObjectApi;
  core: k8s.CoreV1Api;
  custom: k8s.CustomObjectsApi;
  /** The other LocalMachines of the same MachineSet (from the informer cache), for zone spreading. */
  siblings(lm: LocalMachine): LocalMachine[];
}

/** Replaces the condition of the same type, keeping lastTransitionTime when the status did not change. */
export function setCondition(
  conditions: readonly ObjectCondition[],
  next: Omit<ObjectCondition, 'lastTransitionTime'>,
): ObjectCondition[] {
  const old = conditions.find((c) => c.type === next.type);
  const lastTransitionTime = old && old.status === next.status ? old.lastTransitionTime : new Date().toISOString();
  return [...conditions.filter((c) => c.type !== next.type), { ...next, lastTransitionTime }];
}
