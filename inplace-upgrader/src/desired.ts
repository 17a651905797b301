/**
 * The guest-cluster objects the upgrader owns, as pure functions: the privileged namespace, the agent's
 * ServiceAccount and RBAC, one payload Secret and one agent Pod per node being updated.
 */
import { createHash } from 'node:crypto';
import type * as k8s from '@kubernetes/client-node';
import { LABELS } from '../../api/src/keys.js';

/** Guest namespace of agent Pods and payload Secrets. */
export const GUEST_NAMESPACE = 'kindling-system';
export const AGENT_SERVICE_ACCOUNT = 'kindling-agent';
/** Payload Secret keys, written by the upgrader and read by the agent. */
export const PAYLOAD_KEYS = { config: 'config', hash: 'hash' } as const;
/** Where the agent container sees the host's root. */
export const HOST_ROOT_MOUNT = '/host';

/** `<prefix><node>`, shortened with a digest when the result would not be a valid object name. */
function perNodeName(prefix: string, node: string): string {
  const name = `${prefix}${node}`;
  if (name.length <= 253) return name;
  const digest = createHash('sha256').update(node).digest('hex').slice(0, 10);
  return `${name.slice(0, 242)}-${digest}`;
}

export const payloadSecretName = (node: string): string => perNodeName('kindling-payload-', node);
export const agentPodName = (node: string): string => perNodeName('kindling-agent-', node);

export function guestNamespace(): k8s.V1Namespace {
  return {
    apiVersion: 'v1',
    kind: 'Namespace',
    metadata: { name: GUEST_NAMESPACE, labels: { [LABELS.podSecurityEnforce]: 'privileged' } },
  };
}

/** The agent may read and annotate Nodes (its own, in practice) and read payload Secrets; nothing else. */
export function agentRbac(): k8s.KubernetesObject[] {
  const subject = { kind: 'ServiceAccount', name: AGENT_SERVICE_ACCOUNT, namespace: GUEST_NAMESPACE };
  const sa: k8s.V1ServiceAccount = { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: AGENT_SERVICE_ACCOUNT, namespace: GUEST_NAMESPACE } };
  const clusterRole: k8s.V1ClusterRole = {
    apiVersion: 'rbac.authorization.k8s.io/v1',
    kind: 'ClusterRole',
    metadata: { name: 'kindling-agent' },
    rules: [{ apiGroups: [''], resources: ['nodes'], verbs: ['get', 'list', 'watch', 'patch'] }],
  };
  const clusterBinding: k8s.V1ClusterRoleBinding = {
    apiVersion: 'rbac.authorization.k8s.io/v1',
    kind: 'ClusterRoleBinding',
    metadata: { name: 'kindling-agent' },
    roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'kindling-agent' },
    subjects: [subject],
  };
  const role: k8s.V1Role = {
    apiVersion: 'rbac.authorization.k8s.io/v1',
    kind: 'Role',
    metadata: { name: 'kindling-agent', namespace: GUEST_NAMESPACE },
    rules: [{ apiGroups: [''], resources: ['secrets'], verbs: ['get', 'list', 'watch'] }],
  };
  const binding: k8s.V1RoleBinding = {
    apiVersion: 'rbac.authorization.k8s.io/v1',
    kind: 'RoleBinding',
    metadata: { name: 'kindling-agent', namespace: GUEST_NAMESPACE },
    roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'kindling-agent' },
    subjects: [subject],
  };
  return [sa, clusterRole, clusterBinding, role, binding];
}

export function payloadSecret(opts: { node: string; pool: string; hash: string; config: Buffer }): k8s.V1Secret {
  return {
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: {
      name: payloadSecretName(opts.node),
      namespace: GUEST_NAMESPACE,
      labels: { [LABELS.payloadSecret]: 'true', [LABELS.nodePool]: opts.pool, [LABELS.configHash]: opts.hash },
    },
    type: 'Opaque',
    data: { [PAYLOAD_KEYS.config]: opts.config.toString('base64'), [PAYLOAD_KEYS.hash]: Buffer.from(opts.hash).toString('base64') },
  };
}

/**
 * The agent, pinned to its node by nodeName (no scheduler involved, so a cordoned node still gets it),
 * privileged, in the host's PID namespace, with the host's root mounted, tolerating every taint.
 */
export function agentPod(opts: { node: string; pool: string; image: string }): k8s.V1Pod {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name: agentPodName(opts.node),
      namespace: GUEST_NAMESPACE,
      labels: { [LABELS.agentPod]: 'true', [LABELS.nodePool]: opts.pool },
    },
    spec: {
      nodeName: opts.node,
      serviceAccountName: AGENT_SERVICE_ACCOUNT,
      hostPID: true,
      hostNetwork: true,
      restartPolicy: 'Always',
      tolerations: [{ operator: 'Exists' }],
      containers: [
        {
          name: 'agent',
          image: opts.image,
          command: ['kindling', 'agent', '--node', opts.node, '--root', HOST_ROOT_MOUNT, '--namespace', GUEST_NAMESPACE],
          securityContext: { privileged: true, runAsUser: 0 },
          volumeMounts: [{ name: 'host-root', mountPath: HOST_ROOT_MOUNT }],
        },
      ],
      volumes: [{ name: 'host-root', hostPath: { path: '/', type: 'Directory' } }],
    },
  };
}
