/**
 * The in-place upgrader's public face for read-only callers (`kindling plan`, `kindling status`): how it sees a
 * node and which nodes it would start next. Nothing outside this folder imports the upgrader's other modules
 * (the fence in eslint.config.js).
 */
export { classifyNode, isReady, planRollout, type NodeView, type NodePhase, type RolloutPlan } from './select.js';
export { decide, type Verdict } from './extension/decide.js';
export { extensionConfig, type JsonObject } from './extension/hooks.js';
export { inPlaceBlockers } from './agent/ignition.js';
