/**
 * Files on a host's root filesystem that cross a component boundary, and the bootstrap groups its join
 * material names. The ignition server's payload writes the join material; the host's kubelet reads it (in the
 * local environment, the simulated kubelet of local/src/providers/kubelet.ts) and writes its own credentials.
 * Paths are absolute on the host (under the host root folder in the local environment).
 */

export const HOST_PATHS = {
  /** Kubeconfig (YAML) of the guest cluster for TLS bootstrap: one cluster with `server` and
   * `certificate-authority-data`, one user with `token: <id>.<secret>`, a bootstrap token whose groups include
   * BOOTSTRAP_GROUP and bootstrapPoolGroup(namespace, pool). Written by the ignition server's payload; read
   * by the kubelet, which submits its client CSR with it. */
  bootstrapKubeconfig: '/etc/kubernetes/bootstrap-kubeconfig',
  /** The guest cluster's CA certificate (PEM). Written by the ignition server's payload; read by the kubelet
   * (to trust the apiserver when the kubeconfig carries no CA, and to check its own certificate). */
  clusterCa: '/etc/kubernetes/pki/ca.crt',
  /** The kubelet's configuration: a KubeletConfiguration (kubelet.config.k8s.io/v1beta1) as JSON, the
   * release's merged with the pool's KubeletConfigs. Written by the ignition server's payload; read by the
   * kubelet (`registerWithTaints`). */
  kubeletConfig: '/etc/kubernetes/kubelet.conf',
  /** The release the host runs: JSON `{ version, kubeletVersion, osImage, digest }`. Written by the ignition
   * server's payload (and by the in-place agent when it applies a new one); read by the kubelet, which
   * reports `kubeletVersion` and `osImage` in its Node's status.nodeInfo. */
  releaseInfo: '/etc/kindling/release.json',
  /** The kubelet's kubeconfig once bootstrapped: the bootstrap cluster, user = kubeletClientCert. Written and
   * read by the kubelet. */
  kubeletKubeconfig: '/var/lib/kubelet/kubeconfig',
  /** The kubelet's client certificate and key (one PEM file), CN `system:node:<name>`, O `system:nodes`,
   * issued by the guest's csrsigning after approval. Written by the kubelet; read by it on restart (reused
   * while valid). */
  kubeletClientCert: '/var/lib/kubelet/pki/kubelet-client-current.pem',
  /** The key of a client CSR not answered yet, kept so a restarted kubelet waits for the same CSR. Written,
   * read and removed by the kubelet. */
  kubeletClientKeyPending: '/var/lib/kubelet/pki/kubelet-client.key.tmp',
  /** The kubelet's serving certificate and key (one PEM file), from a `kubernetes.io/kubelet-serving` CSR.
   * Written and read by the kubelet. */
  kubeletServingCert: '/var/lib/kubelet/pki/kubelet-server-current.pem',
  /** The key of a serving CSR not answered yet. Written, read and removed by the kubelet. */
  kubeletServingKeyPending: '/var/lib/kubelet/pki/kubelet-server.key.tmp',
} as const;

/** The group every Kindling bootstrap token carries (`auth-extra-groups`). Written by whoever mints the token
 * (the ignition server side); read by the guest RBAC that lets it create CSRs and by Kindling's CSR approver. */
export const BOOTSTRAP_GROUP = 'system:bootstrappers:kindling';

/** The group naming the pool a bootstrap token belongs to. Same writer and readers as BOOTSTRAP_GROUP. */
export function bootstrapPoolGroup(namespace: string, pool: string): string {
  return `${BOOTSTRAP_GROUP}:${namespace}:${pool}`;
}
