/**
 * Guest-cluster credentials from the CAPI convention Secret `<cluster>-kubeconfig` (key `value`): one
 * KubeConfig per cluster, loaded once and forgotten after an error so rotated credentials or a moved endpoint
 * are picked up on the next call. Every component that talks to a guest cluster now and then (rather than
 * through a long-lived session, see guest-clusters.ts) goes through this.
 */
import * as k8s from '#k8s';
import { SECRET_KEYS, kubeconfigSecretName } from '../../api/src/keys.js';
import { guestKubeConfig } from './guest-kubeconfig-parse.js';

/** Reads a Secret from the management cluster. */
export type ReadSecret = (namespace: string, name: string) => Promise<k8s.V1Secret>;

export interface GuestKubeConfigs {
  get(namespace: string, cluster: string): Promise<k8s.KubeConfig>;
  /** Forget a cluster's KubeConfig (after an error), so the next call reads the Secret again. */
  forget(namespace: string, cluster: string): void;
}

/**
 * The one way a CAPI `<cluster>-kubeconfig` Secret becomes a client config; throws when it holds none, and
 * GuestKubeconfigRefusedError when it holds more than inline data (see guest-kubeconfig-parse.ts).
 */
export function kubeConfigOfSecret(secret: k8s.V1Secret): k8s.KubeConfig {
  const text = Buffer.from(secret.data?.[SECRET_KEYS.kubeconfig] ?? '', 'base64').toString('utf8');
  if (text === '') throw new Error(`Secret ${secret.metadata?.name ?? ''} has no ${SECRET_KEYS.kubeconfig} key`);
  return guestKubeConfig(text);
}

export function createGuestKubeConfigs(readSecret: ReadSecret): GuestKubeConfigs {
  const configs = new Map<string, Promise<k8s.KubeConfig>>();
  const load = async (namespace: string, cluster: string): Promise<k8s.KubeConfig> =>
    kubeConfigOfSecret(await readSecret(namespace, kubeconfigSecretName(cluster)));
  return {
    get(namespace, cluster) {
      const key = `${namespace}/${cluster}`;
      let kc = configs.get(key);
      if (!kc) {
        kc = load(namespace, cluster);
        configs.set(key, kc);
        kc.catch(() => configs.delete(key));
      }
      return kc;
    },
    forget(namespace, cluster) {
      configs.delete(`${namespace}/${cluster}`);
    },
  };
}

/**
 * What a host needs to reach the guest apiserver: its URL and the CA that signs its serving certificate —
 * and nothing else of the kubeconfig (its client credentials are the management side's, never a host's).
 */
export function guestEndpoint(kc: k8s.KubeConfig): { server: string; caPem: string } {
  const cluster = kc.getCurrentCluster();
  if (!cluster?.server) throw new Error('the guest kubeconfig names no cluster server');
  const caPem = cluster.caData ? Buffer.from(cluster.caData, 'base64').toString('utf8') : '';
  if (!caPem.includes('BEGIN CERTIFICATE'))
    throw new Error('the guest kubeconfig carries no certificate-authority-data');
  return { server: cluster.server, caPem };
}
