export { startCluster, writeKubeconfigSecret, kubeconfigFor, type Cluster, type ClusterOptions } from './cluster.js';
export { installCrds, installKindlingCrds, installCapiCrds } from './install.js';
export { testbedBinDir, testbedBinary, capiCrdDir, HOST_DOWN_ANNOTATION } from './testbed.js';
export { freePort, waitForPort } from './ports.js';
export { treeRssBytes } from './memory.js';
export { ManagedProcess } from './process.js';
export { startCapiManager, loopbackWebhooks, CAPI_FEATURE_GATES, type CapiManager } from './capi.js';
export { eventually } from './eventually.js';
