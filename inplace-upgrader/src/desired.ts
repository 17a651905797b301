/**
 * The guest-cluster objects the upgrader owns, as pure functions: the privileged namespace, the agent's
 * ServiceAccount and RBAC, the admission policy that holds each agent to its own Node, one payload Secret and
 * one agent Pod per node being updated.
 */
import { gzipSync } from 'node:zlib';
import type * as k8s from '#k8s';
import { ANNOTATIONS, LABELS } from '../../api/src/keys.js';
import { MAX_PAYLOAD_SECRET_BYTES } from '../../api/src/limits.js';
import {
  AGENT_SERVICE_ACCOUNT,
  agentPodName,
  GUEST_NAMESPACE,
  HOST_ROOT_MOUNT,
  PAYLOAD_KEYS,
  payloadSecretName,
} from '../../api/src/node-agent.js';

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
  const sa: k8s.V1ServiceAccount = {
    apiVersion: 'v1',
    kind: 'ServiceAccount',
    metadata: { name: AGENT_SERVICE_ACCOUNT, namespace: GUEST_NAMESPACE },
  };
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

/** The Node annotations the agent writes (keys.ts): the only part of its Node the policy lets it change. */
export const AGENT_NODE_ANNOTATIONS = [
  ANNOTATIONS.currentConfig,
  ANNOTATIONS.state,
  ANNOTATIONS.reason,
  ANNOTATIONS.ceilingHeld,
  ANNOTATIONS.desiredDrain,
] as const;
export const AGENT_NODE_POLICY = 'kindling-agent-own-node';
/** The claim the apiserver adds to a ServiceAccount token bound to a Pod that is scheduled on a node. */
const NODE_NAME_CLAIM = 'authentication.kubernetes.io/node-name';

/**
 * RBAC cannot name "the agent's own Node", so the ClusterRole lets any agent patch every Node: one host could
 * ask the drainer to drain any other node. This ValidatingAdmissionPolicy closes that: a write to a Node by
 * the agent's ServiceAccount must come with a token bound to a Pod on a node (the kubelet mounts such tokens),
 * may touch only that node's Node, and there only the agent's own annotations. The checks run in this order,
 * each guarded by the ones before, so the refusal names the first broken rule.
 */
export function agentNodePolicy(): k8s.KubernetesObject[] {
  const cel = (s: string): string => `'${s}'`;
  const unchanged = (field: string): string =>
    `(has(object.${field}) ? has(oldObject.${field}) && object.${field} == oldObject.${field} : !has(oldObject.${field}))`;
  const agentKeys = `[${AGENT_NODE_ANNOTATIONS.map(cel).join(', ')}]`;
  const policy: k8s.V1ValidatingAdmissionPolicy = {
    apiVersion: 'admissionregistration.k8s.io/v1',
    kind: 'ValidatingAdmissionPolicy',
    metadata: { name: AGENT_NODE_POLICY },
    spec: {
      failurePolicy: 'Fail',
      matchConstraints: {
        resourceRules: [{ apiGroups: [''], apiVersions: ['*'], operations: ['UPDATE'], resources: ['nodes'] }],
      },
      matchConditions: [
        {
          name: 'kindling-agent',
          expression: `request.userInfo.username == ${cel(`system:serviceaccount:${GUEST_NAMESPACE}:${AGENT_SERVICE_ACCOUNT}`)}`,
        },
      ],
      variables: [
        {
          name: 'node',
          expression: `${cel(NODE_NAME_CLAIM)} in request.userInfo.extra ? request.userInfo.extra[${cel(NODE_NAME_CLAIM)}][0] : ''`,
        },
        { name: 'own', expression: `variables.node != '' && object.metadata.name == variables.node` },
        { name: 'agentKeys', expression: agentKeys },
        { name: 'oldAnnotations', expression: 'oldObject.metadata.?annotations.orValue({})' },
        { name: 'newAnnotations', expression: 'object.metadata.?annotations.orValue({})' },
        {
          name: 'foreignChanges',
          expression: [
            'variables.newAnnotations.filter(k, !(k in variables.agentKeys) && !(k in variables.oldAnnotations && variables.oldAnnotations[k] == variables.newAnnotations[k]))',
            '+ variables.oldAnnotations.filter(k, !(k in variables.agentKeys) && !(k in variables.newAnnotations))',
          ].join(' '),
        },
      ],
      validations: [
        {
          expression: "variables.node != ''",
          reason: 'Forbidden',
          message: `the kindling agent may write a Node only with a ServiceAccount token bound to its agent Pod on that node (a token with the ${NODE_NAME_CLAIM} claim); this token is bound to no Pod on a node`,
        },
        {
          expression: "variables.node == '' || variables.own",
          reason: 'Forbidden',
          messageExpression: `'the kindling agent of node ' + variables.node + ' may write only its own Node, not ' + object.metadata.name`,
        },
        {
          expression: `!variables.own || (${['spec', 'metadata.labels', 'metadata.finalizers', 'metadata.ownerReferences'].map(unchanged).join(' && ')})`,
          reason: 'Forbidden',
          messageExpression: `'the kindling agent of node ' + variables.node + ' may change only annotations of its Node, not its spec (taints, unschedulable), labels, finalizers or owners'`,
        },
        {
          expression: '!variables.own || size(variables.foreignChanges) == 0',
          reason: 'Forbidden',
          messageExpression: `'the kindling agent of node ' + variables.node + ' may change on its Node only the annotations the agent writes (' + variables.agentKeys.join(', ') + '), not ' + variables.foreignChanges.join(', ')`,
        },
      ],
    },
  };
  const binding: k8s.V1ValidatingAdmissionPolicyBinding = {
    apiVersion: 'admissionregistration.k8s.io/v1',
    kind: 'ValidatingAdmissionPolicyBinding',
    metadata: { name: AGENT_NODE_POLICY },
    spec: { policyName: AGENT_NODE_POLICY, validationActions: ['Deny'] },
  };
  return [policy, binding];
}

/**
 * The TokenRequest for an agent Pod's ServiceAccount token, bound to the Pod as the kubelet's projected token
 * is: the apiserver then adds the node-name claim the policy above keys on, and the token dies with the Pod.
 * For whoever plays the kubelet for agent Pods (the local environment's hosts, the tests).
 */
export function agentTokenRequest(pod: k8s.V1Pod, expirationSeconds: number): k8s.AuthenticationV1TokenRequest {
  const boundObjectRef = {
    apiVersion: 'v1',
    kind: 'Pod',
    name: pod.metadata?.name ?? '',
    uid: pod.metadata?.uid ?? '',
  };
  return { spec: { audiences: [], expirationSeconds, boundObjectRef } };
}

/** A config a node runs, by its hash: the one its host booted with, for the payload Secret. */
export interface BootedPayload {
  hash: string;
  config: Buffer;
}

/**
 * The booted config's keys, gzip, when the Secret still fits (MAX_PAYLOAD_SECRET_BYTES) beside the target's
 * `config`; nothing when it does not (the agent then plans the first update against the host alone). A config
 * that inflates past that size is left out too: the agent inflates no more (node-agent/src/agent.ts), so a
 * multi-MiB config that compresses well would be handed over and then ignored.
 */
function bootedData(config: Buffer, booted: BootedPayload | undefined): Record<string, string> {
  if (!booted || booted.config.length > MAX_PAYLOAD_SECRET_BYTES) return {};
  const gz = gzippedOnce(booted.config);
  // base64 grows each by a third; the apiserver counts the decoded bytes, as this does.
  if (config.length + gz.length + booted.hash.length > MAX_PAYLOAD_SECRET_BYTES - PAYLOAD_SECRET_SLACK) return {};
  return {
    [PAYLOAD_KEYS.bootedHash]: Buffer.from(booted.hash).toString('base64'),
    [PAYLOAD_KEYS.bootedConfig]: gz.toString('base64'),
  };
}

/**
 * gzip of a booted config, by its bytes: every node of a rollout is handed the same Buffer (the payload source
 * caches it per hash), and gzipSync holds the event loop, so it runs once per config rather than once per node.
 */
const gzipped = new WeakMap<Buffer, Buffer>();
function gzippedOnce(config: Buffer): Buffer {
  const hit = gzipped.get(config);
  if (hit) return hit;
  const gz = gzipSync(config);
  gzipped.set(config, gz);
  return gz;
}

/** Room left in a payload Secret for its other keys (hash, disruption policy). */
const PAYLOAD_SECRET_SLACK = 64 * 1024;

export function payloadSecret(opts: {
  node: string;
  pool: string;
  hash: string;
  config: Buffer;
  disruptionPolicy?: string;
  booted?: BootedPayload;
  /** The pool's ANNOTATIONS.rolloutCeiling, when it has one. */
  ceiling?: string;
}): k8s.V1Secret {
  const policy = opts.disruptionPolicy;
  const text = (value: string): string => Buffer.from(value).toString('base64');
  return {
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: {
      name: payloadSecretName(opts.node),
      namespace: GUEST_NAMESPACE,
      labels: { [LABELS.payloadSecret]: 'true', [LABELS.nodePool]: opts.pool, [LABELS.configHash]: opts.hash },
    },
    type: 'Opaque',
    data: {
      [PAYLOAD_KEYS.config]: opts.config.toString('base64'),
      [PAYLOAD_KEYS.hash]: text(opts.hash),
      ...(policy === undefined ? {} : { [PAYLOAD_KEYS.disruptionPolicy]: text(policy) }),
      ...(opts.ceiling === undefined ? {} : { [PAYLOAD_KEYS.rolloutCeiling]: text(opts.ceiling) }),
      ...bootedData(opts.config, opts.booted),
    },
  };
}

/**
 * The agent, pinned to its node by nodeName (no scheduler involved, so a cordoned node still gets it),
 * privileged, in the host's PID namespace, with the host's root mounted, tolerating every taint.
 *
 * On the host network: the kubelet starts no Pod that needs the pod network while the node's network plugin
 * is not ready, and the agent must run after the reboot to finish the update or report it Degraded even when
 * the update left the network plugin down. No NetworkPolicy applies to a host-network Pod, so none is made
 * for it: the agent accepts nothing because it listens on nothing (no port, no serving flag).
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
          command: [
            'kindling',
            'agent',
            '--node',
            opts.node,
            '--root',
            HOST_ROOT_MOUNT,
            '--namespace',
            GUEST_NAMESPACE,
          ],
          securityContext: { privileged: true, runAsUser: 0 },
          volumeMounts: [{ name: 'host-root', mountPath: HOST_ROOT_MOUNT }],
        },
      ],
      volumes: [{ name: 'host-root', hostPath: { path: '/', type: 'Directory' } }],
    },
  };
}
