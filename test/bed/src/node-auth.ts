/**
 * Test-bed helpers for clusters started with `nodeAuth`: bootstrap tokens as a hosted control plane mints
 * them, the kubeconfig a host would get with one, and approving or denying a CSR as an administrator (a test
 * standing in for an approver on purpose, never for the built-in csrapproving).
 */
import { randomInt } from 'node:crypto';
import * as k8s from '#k8s';
import type { Cluster } from './cluster.js';

const TOKEN_ALPHABET = 'abcdefghijklmnopqrstuvwxyz0123456789';
const randomToken = (length: number): string =>
  Array.from({ length }, () => TOKEN_ALPHABET[randomInt(TOKEN_ALPHABET.length)]).join('');

export interface BootstrapToken {
  id: string;
  /** `<id>.<secret>`, the bearer token. */
  token: string;
  /** The user the apiserver authenticates it as. */
  username: string;
}

/** A random bootstrap token, `<id>.<secret>` ([a-z0-9]{6}.[a-z0-9]{16}). */
export const newBootstrapToken = (): string => `${randomToken(6)}.${randomToken(16)}`;

/**
 * Creates a `bootstrap.kubernetes.io/token` Secret in kube-system (for `token` when given, else a new one). Its user is `system:bootstrap:<id>` in
 * `system:bootstrappers` plus `groups` (each must start with `system:bootstrappers:`).
 */
export async function createBootstrapToken(
  cluster: Cluster,
  opts: { groups?: string[]; expiresInMs?: number; token?: string } = {},
): Promise<BootstrapToken> {
  const [id, secret] = opts.token?.split('.') ?? [randomToken(6), randomToken(16)];
  if (!id || !secret) throw new Error('a bootstrap token reads <id>.<secret>');
  const data: Record<string, string> = {
    'token-id': id,
    'token-secret': secret,
    'usage-bootstrap-authentication': 'true',
  };
  if (opts.groups?.length) data['auth-extra-groups'] = opts.groups.join(',');
  if (opts.expiresInMs !== undefined)
    data.expiration = new Date(Date.now() + opts.expiresInMs).toISOString().replace(/\.\d+Z$/, 'Z');
  await cluster.kubeConfig.makeApiClient(k8s.CoreV1Api).createNamespacedSecret({
    namespace: 'kube-system',
    body: { metadata: { name: `bootstrap-token-${id}` }, type: 'bootstrap.kubernetes.io/token', stringData: data },
  });
  return { id, token: `${id}.${secret}`, username: `system:bootstrap:${id}` };
}

/** Binds a group to a ClusterRole (e.g. a bootstrap group to `system:node-bootstrapper`). */
export async function bindGroup(cluster: Cluster, group: string, clusterRole: string): Promise<void> {
  const name = `${clusterRole}--${group}`.replace(/[^a-z0-9.-]/g, '-');
  await cluster.kubeConfig.makeApiClient(k8s.RbacAuthorizationV1Api).createClusterRoleBinding({
    body: {
      metadata: { name },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: clusterRole },
      subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'Group', name: group }],
    },
  });
}

/** A kubeconfig (YAML) for the cluster that authenticates with a bearer token, as a host's bootstrap kubeconfig. */
export function tokenKubeconfigYaml(cluster: Cluster, token: string): string {
  const ca = Buffer.from(cluster.ca.certPem).toString('base64');
  return [
    'apiVersion: v1',
    'kind: Config',
    `clusters:\n- name: ${cluster.name}\n  cluster:\n    server: ${cluster.server}\n    certificate-authority-data: ${ca}`,
    `users:\n- name: kubelet-bootstrap\n  user:\n    token: ${token}`,
    `contexts:\n- name: bootstrap\n  context:\n    cluster: ${cluster.name}\n    user: kubelet-bootstrap`,
    'current-context: bootstrap',
    '',
  ].join('\n');
}

/** Approves or denies a CSR as the cluster's administrator. */
export async function decideCsr(
  cluster: Cluster,
  name: string,
  decision: { approve: boolean; message?: string },
): Promise<void> {
  const certificates = cluster.kubeConfig.makeApiClient(k8s.CertificatesV1Api);
  const csr = await certificates.readCertificateSigningRequest({ name });
  const condition: k8s.V1CertificateSigningRequestCondition = {
    type: decision.approve ? 'Approved' : 'Denied',
    status: 'True',
    reason: decision.approve ? 'ApprovedByTest' : 'DeniedByTest',
    message: decision.message ?? (decision.approve ? 'approved by the test' : 'denied by the test'),
  };
  await certificates.replaceCertificateSigningRequestApproval({
    name,
    body: { ...csr, status: { ...csr.status, conditions: [...(csr.status?.conditions ?? []), condition] } },
  });
}

/**
 * Approves, as the administrator, every pending kubelet client CSR of one bootstrap user, every 100 ms: for tests
 * about hosts and providers, where Kindling's own approver (tested in the nodepool-controller) is not the subject.
 */
export function approveKubeletCsrsOf(cluster: Cluster, username: string): { stop(): void } {
  const certificates = cluster.kubeConfig.makeApiClient(k8s.CertificatesV1Api);
  const timer = setInterval(() => {
    void certificates
      .listCertificateSigningRequest()
      .then(async (list) => {
        const pending = list.items.filter(
          (c) =>
            c.spec.username === username &&
            c.spec.signerName === 'kubernetes.io/kube-apiserver-client-kubelet' &&
            !c.status?.conditions?.length,
        );
        for (const c of pending) await decideCsr(cluster, c.metadata?.name ?? '', { approve: true });
      })
      .catch(() => undefined);
  }, 100);
  return { stop: () => clearInterval(timer) };
}
