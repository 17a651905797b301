/**
 * The in-place upgrader's public face for read-only callers (`kindling plan`, `kindling status`): how it sees a
 * node, the rollout it would carry out on a MachineSet (previewRollout), and what its Cluster API extension
 * would answer for a change of a ClusterAPI-engine pool (previewClusterApiUpdate). Nothing outside this folder
 * imports the upgrader's other modules (the fence in eslint.config.js).
 */
export { classifyNode, isReady, setMembers, type NodeView, type NodePhase } from './select.js';
export {
  previewRollout,
  simulateRollout,
  type NodeAction,
  type PlannedNodeUpdate,
  type RolloutPreview,
  type RolloutState,
  type SimulatedRollout,
} from './rollout-plan.js';
export { previewClusterApiUpdate, type ClusterApiPlan, type ClusterApiUpdateState } from './extension/update-plan.js';
export type { Verdict } from './extension/decide.js';
export { extensionConfig, type JsonObject } from './extension/hooks.js';
