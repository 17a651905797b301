/**
 * The in-place upgrader's public face for read-only callers (`kindling plan`, `kindling status`): how it sees a
 * node, the rollout it would carry out on a MachineSet (previewRollout), and what its Cluster API extension
 * would answer for a change of a ClusterAPI-engine pool (previewClusterApiUpdate). Nothing outside this folder
 * imports the upgrader's other modules (the fence in eslint.config.js).
 */
export { classifyNode, isReady, setMembers, type NodeView } from './rollout-decision.js';
export { previewRollout, simulateRollout } from './rollout-preview.js';
export { previewClusterApiUpdate, type ClusterApiPlan } from './extension/update-plan.js';
export { extensionConfig, type JsonObject } from './extension/hooks.js';
