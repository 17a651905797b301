/**
 * Files on a host that cross a component boundary: written into the host by the payload (Ignition at first
 * boot, the agent in place), read by the host's kubelet — in the local environment the simulated kubelet of
 * local/src/providers/kubelet/, under the host's root folder. The paths follow kubeadm's layout so a stock
 * kubelet unit finds them.
 */
export const HOST_PATHS = {
  /** The guest cluster's CA (PEM). Written by the ignition-server's join material; read by the kubelet
   * (client CA of its authentication config, trust of the apiserver when the bootstrap kubeconfig carries no
   * CA data). */
  guestCa: '/etc/kubernetes/pki/ca.crt',
  /** Kubeconfig with the pool's bootstrap token, for TLS bootstrap: the guest `server` and
   * `certificate-authority-data`, user `token: <id>.<secret>` (groups BOOTSTRAP_GROUP and the pool's). Written
   * by the ignition-server's join material; read by the kubelet (`--bootstrap-kubeconfig`), which submits its
   * client CSR with it. */
  bootstrapKubeconfig: '/etc/kubernetes/bootstrap-kubeconfig',
  /** The kubelet's configuration (KubeletConfiguration, JSON). Written by the ignition-server's payload
   * rendering (release file, then the pool's KubeletConfigs); read by the kubelet (`--config`;
   * `registerWithTaints`). */
  kubeletConfig: '/etc/kubernetes/kubelet.conf',
  /** The kubelet's kubeconfig once bootstrapped (its own client certificate). Written and read by the kubelet. */
  kubeletKubeconfig: '/var/lib/kubelet/kubeconfig',
  /** The kubelet's current client certificate and key (one PEM file), CN `system:node:<name>`, O
   * `system:nodes`, issued by the guest's csrsigning after approval. Written and read by the kubelet (reused
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
  /** The release's identity (JSON: version, kubeletVersion, osImage, digest). Written by the ignition-server's
   * payload rendering (and by the in-place agent when it applies a new one); read by the kubelet (the version
   * and OS image it reports in its Node's status.nodeInfo) and operators. */
  releaseInfo: '/etc/kindling/release.json',
  /** This boot's ID, new at every boot. Written by the kernel (on a simulated host, by its first boot and the
   * agent's simulated reboots); read by the kubelet (status.nodeInfo.bootID) and the agent, whose health gate
   * after an in-place reboot counts a Node's status only once its bootID is this boot's. */
  bootId: '/proc/sys/kernel/random/boot_id',
  /** Simulated hosts only: every `systemctl` command the in-place agent ran (a unit action of the disruption
   * policy), one a line. Written by the agent's simulated host control (reboot.ts); read by the local
   * environment's kubelet (a restart of kubelet.service restarts it) and the tests. */
  simulatedSystemctl: '/var/log/kindling/systemctl.log',
} as const;
