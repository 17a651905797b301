/**
 * Files on a host that cross a component boundary: written into the host by the payload (Ignition at first
 * boot, the agent in place), read by the host's kubelet. The paths follow kubeadm's layout so a stock kubelet
 * unit finds them.
 */
export const HOST_PATHS = {
  /** The guest cluster's CA (PEM). Written by the ignition-server's join material; read by the kubelet
   * (client CA of its authentication config, trust of the apiserver). */
  guestCa: '/etc/kubernetes/pki/ca.crt',
  /** Kubeconfig with the pool's bootstrap token, for TLS bootstrap. Written by the ignition-server's join
   * material; read by the kubelet (`--bootstrap-kubeconfig`). */
  bootstrapKubeconfig: '/etc/kubernetes/bootstrap-kubeconfig',
  /** The kubelet's configuration (KubeletConfiguration, JSON). Written by the ignition-server's payload
   * rendering (release file, then the pool's KubeletConfigs); read by the kubelet (`--config`). */
  kubeletConfig: '/etc/kubernetes/kubelet.conf',
  /** The kubelet's kubeconfig once bootstrapped (its own client certificate). Written and read by the kubelet. */
  kubeletKubeconfig: '/var/lib/kubelet/kubeconfig',
  /** The kubelet's current client certificate and key (PEM). Written and read by the kubelet. */
  kubeletClientCert: '/var/lib/kubelet/pki/kubelet-client-current.pem',
  /** The release's identity (JSON: version, kubeletVersion, osImage, digest). Written by the ignition-server's
   * payload rendering; read by the kubelet (the version it reports) and operators. */
  releaseInfo: '/etc/kindling/release.json',
} as const;
