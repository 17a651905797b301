/** The NodePool fixture of every folder's tests (never imported by production code). */
import type { NodePool } from '../src/nodepool.js';

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
      platform: {
        infrastructureTemplateRef: {
          apiGroup: 'infrastructure.kindling.dev',
          kind: 'LocalMachineTemplate',
          name: 'small',
        },
      },
    },
  };
  patch(p);
  return p;
}

/**
 * The same fixture with every optional field the controller turns into its children set: pool tenant-a/workers
 * with a uid and generation, 3 replicas, a rolling update, a config ConfigMap, drain timeouts, labels and a
 * taint. The golden files of the desired objects are made from it.
 */
export function samplePool(patch: (p: NodePool) => void = () => {}): NodePool {
  return nodePoolFixture('workers', 'tenant-a', (p) => {
    p.metadata = { ...p.metadata, uid: '4c1f6a53-0c1e-4d9e-9a4b-1f4f6c2d9e10', generation: 3 };
    p.spec.release.allowPrerelease = false;
    p.spec.replicas = 3;
    p.spec.management = {
      upgradeType: 'Replace',
      replace: { strategy: 'RollingUpdate', rollingUpdate: { maxSurge: 1, maxUnavailable: 0 } },
      autoRepair: false,
    };
    p.spec.config = [{ name: 'kubelet-config' }];
    p.spec.nodeDrainTimeout = '10m';
    p.spec.nodeVolumeDetachTimeout = '1m30s';
    p.spec.nodeLabels = { 'example.com/role': 'worker', tier: 'gold' };
    p.spec.taints = [{ key: 'example.com/dedicated', value: 'batch', effect: 'NoSchedule' }];
    patch(p);
  });
}

/** samplePool as an InPlace pool (maxUnavailable 50%, auto-repair on). */
export function sampleInPlacePool(patch: (p: NodePool) => void = () => {}): NodePool {
  return samplePool((p) => {
    p.spec.management = { upgradeType: 'InPlace', inPlace: { maxUnavailable: '50%' }, autoRepair: true };
    patch(p);
  });
}

/** A config ConfigMap's `config`: a KubeletConfig and a MachineConfig (what samplePool's kubelet-config holds). */
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
