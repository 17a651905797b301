/**
 * The nodepool-controller's part for tests of the real ignition server: a NodePool, and its token Secret
 * exactly as the controller writes it (owned by the pool, named and labelled by the hash of its inputs). The
 * ignition server acts on no other token Secret.
 */
import * as k8s from '#k8s';
import { configHash } from '../../api/src/config-hash.js';
import { NODEPOOL_API_VERSION, NODEPOOL_KIND, NODEPOOL_PLURAL, type NodePool } from '../../api/src/nodepool.js';
import { desiredTokenSecret } from '../../nodepool-controller/src/preview.js';

/**
 * Creates the NodePool (the Kindling CRDs installed) unless it exists; returns it with its UID. `paused` keeps a
 * running nodepool-controller off its children, for a test that plays the controller's part itself.
 */
export async function ensureNodePool(
  kubeConfig: k8s.KubeConfig,
  opts: { namespace: string; name: string; release: string; clusterName?: string; paused?: boolean },
): Promise<NodePool> {
  const custom = kubeConfig.makeApiClient(k8s.CustomObjectsApi);
  const [group = '', version = ''] = NODEPOOL_API_VERSION.split('/');
  const where = { group, version, namespace: opts.namespace, plural: NODEPOOL_PLURAL };
  const body = {
    apiVersion: NODEPOOL_API_VERSION,
    kind: NODEPOOL_KIND,
    metadata: { name: opts.name, namespace: opts.namespace },
    spec: {
      clusterName: opts.clusterName ?? 'guest',
      release: { image: opts.release },
      replicas: 0,
      management: { upgradeType: 'Replace' },
      platform: { infrastructureTemplateRef: { apiGroup: 'infrastructure.cluster.x-k8s.io', kind: 'T', name: 't' } },
      ...(opts.paused ? { pausedUntil: 'true' } : {}),
    },
  };
  try {
    return (await custom.createNamespacedCustomObject({ ...where, body })) as NodePool;
  } catch (err) {
    if ((err as { code?: number }).code !== 409) throw err;
    return (await custom.getNamespacedCustomObject({ ...where, name: opts.name })) as NodePool;
  }
}

/** The token Secret of a pool for a release and config documents, as the nodepool-controller writes it. */
export function ownedTokenSecret(
  pool: NodePool,
  release: string,
  config: unknown[],
): { hash: string; secret: k8s.V1Secret } {
  const inputs = { release, config: JSON.stringify(config) };
  const hash = configHash(inputs);
  return { hash, secret: desiredTokenSecret(pool, { hash, inputs }) };
}
