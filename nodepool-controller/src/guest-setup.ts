/**
 * The guest side of the kubelet TLS bootstrap, applied by the CSR approver (server-side apply, the
 * nodepool-controller's field manager) into every guest cluster a NodePool names, as a hosted control plane sets
 * it up: Kindling's bootstrap tokens may create CertificateSigningRequests (the built-in `system:node-bootstrapper`
 * ClusterRole) and nothing else. In particular the bootstrap group is bound to none of the
 * `system:certificates.k8s.io:certificatesigningrequests:nodeclient` auto-approval roles, so the built-in
 * csrapproving controller never approves a Kindling kubelet's client certificate: only the approver does.
 *
 * Renewals need nothing more here: a node may create CSRs through the Node authorizer of a hosted control plane.
 * The `selfnodeclient` role is deliberately bound to no one: it is the built-in csrapproving's licence to approve
 * a node's renewal by itself, without the approver's check that the node's Machine is still live.
 */
import type * as k8s from '#k8s';
import { BOOTSTRAP_GROUP } from '../../api/src/keys.js';

export const BOOTSTRAPPER_BINDING = 'kindling:node-bootstrapper';
export const NODE_BOOTSTRAPPER_ROLE = 'system:node-bootstrapper';

export function desiredGuestSetup(): k8s.V1ClusterRoleBinding[] {
  return [
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRoleBinding',
      metadata: { name: BOOTSTRAPPER_BINDING },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: NODE_BOOTSTRAPPER_ROLE },
      subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'Group', name: BOOTSTRAP_GROUP }],
    },
  ];
}
