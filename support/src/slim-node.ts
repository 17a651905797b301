/**
 * A guest Node as the drainer and the inplace-upgrader keep it in their informers: only what they read (name,
 * uid, resourceVersion, labels, annotations, deletion, spec.unschedulable and taints, and whether each
 * condition holds). The kubelet (or KWOK) rewrites every Node's status every few seconds with heartbeat times,
 * images and addresses: kept whole, each guest's Nodes would be held in full and every heartbeat would wake
 * the components; slim, a heartbeat leaves the cached Node as it was, and the informer emits nothing for it.
 */
import type * as k8s from '#k8s';

export function slimNode(node: k8s.V1Node): k8s.V1Node {
  const { name, uid, resourceVersion, labels, annotations, deletionTimestamp } = node.metadata ?? {};
  return {
    apiVersion: node.apiVersion,
    kind: node.kind,
    metadata: { name, uid, resourceVersion, labels, annotations, deletionTimestamp },
    spec: { unschedulable: node.spec?.unschedulable, taints: node.spec?.taints },
    status: { conditions: node.status?.conditions?.map(({ type, status }) => ({ type, status })) },
  };
}
