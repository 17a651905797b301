/** Test fixtures of the contract, shared by every folder's tests; never imported by production code. */
import type { NodePool } from './nodepool.js';

/** A valid Replace NodePool of cluster "guest" (2 replicas, release 1.36.3), changed by `patch`. */
export function nodePoolFixture(name: string, namespace: string, patch: (p: NodePool) => void = () => {}): NodePool {
  const p: NodePool = {
    apiVersion: 'kindling.dev/v1beta1',
    kind: 'NodePool',
    metadata: { name, namespace },
    spec: {
      clusterName: 'guest',
      release: { image: 'registry.local:5000/kindling/release:1.36.3' },
      replicas: 2,
      management: { upgradeType: 'Replace' },
      platform: { infrastructureTemplateRef: { apiGroup: 'infrastructure.kindling.dev', kind: 'LocalMachineTemplate', name: 'small' } },
    },
  };
  patch(p);
  return p;
}
