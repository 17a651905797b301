/**
 * Keys of the simulated hosts: the test bed and the local environment stand for a provider's machines and their
 * kubelets, and mark what they do with these. No Kindling component writes or reads them, so they are not part
 * of the contract in api/src/keys.ts.
 */
export const SIMULATION = {
  /** Field manager of the local providers' server-side applies. */
  fieldManager: 'kindling-local',
  /** Guest Node of a host of the local environment ("local"). Written by the local providers' kubelet when it
   * registers its Node; read by people and tests telling local hosts from other Nodes. */
  hostLabel: 'kindling.dev/host',
  /** On a Node whose host's kubelet is down, KWOK stops heartbeating it (stages of test/bed/kwok-stages.yaml
   * select on it). "true": a host that died (written by tests), KWOK reports the Node Ready=Unknown.
   * "kubelet-config-rejected": written by the local environment's simulated kubelet (and the tests' agent
   * fleet) while the host's kubelet config is one the kubelet would refuse to start with; it reports Ready=False
   * itself and removes the annotation once the config is valid again. Read by KWOK. */
  hostDown: 'kindling.dev/host-down',
} as const;
