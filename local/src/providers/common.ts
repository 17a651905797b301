import * as k8s from '@kubernetes/client-node';
import { kubeconfigSecretName, SECRET_KEYS } from '../../../api/src/keys.js';
import { NotReadyError, isNotFound } from '../../../support/src/errors.js';
import { kubeConfigFromString } from '../../../support/src/kubeconfig.js';
import type { LocalMachine } from './local-machine.js';

export interface ObjectCondition {
  type: string;
  status: 'True' | 'False' | 'Unknown';
  reason: string;
  message: string;
  lastTransitionTime: string;
}

export interface ProviderContext {
  stateDir: string;
  objects: k8s.KubernetesObjectApi;
  core: k8s.CoreV1Api;
  custom: k8s.CustomObjectsApi;
  /** The other LocalMachines of the same MachineSet (from the informer cache), for zone spreading. */
  siblings(lm: LocalMachine): LocalMachine[];
  /** Guest clients by `<namespace>/<cluster>`, built from the CAPI kubeconfig Secret. */
  guests: Map<string, { kubeconfig: string; core: k8s.CoreV1Api }>;
}

/** Replaces the condition of the same type, keeping lastTransitionTime when the status did not change. */
export function setCondition(conditions: readonly ObjectCondition[], next: Omit<ObjectCondition, 'lastTransitionTime'>): ObjectCondition[] {
  const old = conditions.find((c) => c.type === next.type);
  const lastTransitionTime = old && old.status === next.status ? old.lastTransitionTime : new Date().toISOString();
  return [...conditions.filter((c) => c.type !== next.type), { ...next, lastTransitionTime }];
}

/** A client for the guest cluster, from its `<cluster>-kubeconfig` Secret (rebuilt when the Secret changes). */
export async function guestClient(ctx: ProviderContext, namespace: string, cluster: string): Promise<k8s.CoreV1Api> {
  let secret: k8s.V1Secret;
  try {
    secret = await ctx.core.readNamespacedSecret({ name: kubeconfigSecretName(cluster), namespace });
  } catch (err) {
    if (isNotFound(err)) throw new NotReadyError(`waiting for the ${kubeconfigSecretName(cluster)} Secret`, 2000);
    throw err;
  }
  const kubeconfig = Buffer.from(secret.data?.[SECRET_KEYS.kubeconfig] ?? '', 'base64').toString();
  const key = `${namespace}/${cluster}`;
  const cached = ctx.guests.get(key);
  if (cached?.kubeconfig === kubeconfig) return cached.core;
  const core = kubeConfigFromString(kubeconfig).makeApiClient(k8s.CoreV1Api);
  ctx.guests.set(key, { kubeconfig, core });
  return core;
}
