export { startCluster, writeKubeconfigSecret, kubeconfigFor, type Cluster, type ClusterOptions } from './cluster.js';
export { installCrds, installKindlingCrds, installCapiCrds } from './install.js';
export { testbedBinDir, testbedBinary, type TestbedBinary, capiCrdDir } from './testbed.js';
export { freePort, portFree, waitForPort } from './ports.js';
export {
  approveKubeletCsrsOf,
  bindGroup,
  createBootstrapToken,
  newBootstrapToken,
  decideCsr,
  tokenKubeconfigYaml,
  type BootstrapToken,
} from './node-auth.js';
export { treeRssBytes } from './memory.js';
export { ManagedProcess, spawnGuarded, guardedPid, childPids } from './process.js';
export { startCapiManager, loopbackWebhooks, CAPI_FEATURE_GATES, type CapiManager } from './capi.js';
export { eventually } from './eventually.js';
export { RestartingWatch } from './watch.js';
export { FaultProxy, type FaultMode } from './fault-proxy.js';
export { SIMULATION } from './keys.js';
