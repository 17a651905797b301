export { startCluster, writeKubeconfigSecret, kubeconfigFor, type Cluster } from './cluster.js';
export { installCrds, installKindlingCrds, installCapiCrds } from './install.js';
export { testbedBinDir, testbedBinary } from './testbed.js';
export { freePort, keptPort, reserveKept, waitForPort } from './ports.js';
export {
  approveKubeletCsrsOf,
  bindGroup,
  createBootstrapToken,
  newBootstrapToken,
  decideCsr,
  tokenKubeconfigYaml,
} from './node-auth.js';
export { treeRssBytes } from './memory.js';
export { ManagedProcess, spawnGuarded, guardedPid, childPids } from './process.js';
export { startCapiManager, type CapiManager } from './capi.js';
export { eventually } from './eventually.js';
export { RestartingWatch } from './watch.js';
export { FaultProxy } from './fault-proxy.js';
export { SIMULATION } from './keys.js';
