/** NodePools for unit tests: one well-formed pool per upgrade type, patched per case. */
import type { NodePool } from '../../api/src/nodepool.js';

export function samplePool(patch: (p: NodePool) => void = () => {}): NodePool {
  const pool: NodePool = {
    apiVersion: 'kindling.dev/v1beta1',
    kind: 'NodePool',
    metadata: { name: 'workers', namespace: 'tenant-a', uid: '4c1f6a53-0c1e-4d9e-9a4b-1f4f6c2d9e10', generation: 3 },
    spec: {
      clusterName: 'guest',
      release: { image: 'registry.local:5000/kindling/release:1.36.3', allowPrerelease: false },
      replicas: 3,
      management: { upgradeType: 'Replace', replace: { strategy: 'RollingUpdate', rollingUpdate: { maxSurge: 1, maxUnavailable: 0 } }, autoRepair: false },
      config: [{ name: 'kubelet-config' }],
      nodeDrainTimeout: '10m',
      nodeVolumeDetachTimeout: '1m30s',
      nodeLabels: { 'example.com/role': 'worker', tier: 'gold' },
      taints: [{ key: 'example.com/dedicated', value: 'batch', effect: 'NoSchedule' }],
      platform: { infrastructureTemplateRef: { apiGroup: 'infrastructure.kindling.dev', kind: 'LocalMachineTemplate', name: 'small' } },
    },
  };
  patch(pool);
  return pool;
}

export function sampleInPlacePool(patch: (p: NodePool) => void = () => {}): NodePool {
  return samplePool((p) => {
    p.spec.management = { upgradeType: 'InPlace', inPlace: { maxUnavailable: '50%' }, autoRepair: true };
    patch(p);
  });
}

export const KUBELET_CONFIG = `apiVersion: machineconfiguration.openshift.io/v1
kind: KubeletConfig
metadata:
  name: max-pods
spec:
  kubeletConfig:
    maxPods: 250
---
kind: MachineConfig
apiVersion: machineconfiguration.openshift.io/v1
metadata:
  name: 50-motd
spec:
  config:
    ignition:
      version: 3.2.0
    storage:
      files:
        - path: /etc/motd
          contents:
            source: data:,hello
`;
