/**
 * The NodePool controller's public face for read-only callers (`kindling plan`): the pieces of its reconcile
 * that compute, without writing, what it would do with a pool — the input and skew phases, the desired
 * children, the config hash and the diff rules it applies by. Nothing outside this folder imports the
 * controller's other modules (the fence in eslint.config.js), so its internals can change behind this list.
 */
export { Caches } from './caches.js';
export type { CacheSource, Writer } from './store.js';
export { desiredBootstrapTemplate, desiredMachineDeployment, desiredMachinePropagation, desiredMachineSet } from './capi.js';
export { contains, ownedFields, ownsMoreThan } from './diff.js';
export { changedInputs, configHash, normaliseConfig } from './hash.js';
export { documentChanges as changedDocuments, documentSources, type DocumentChange } from './why.js';
export { desiredTokenSecret, hashOfUserData } from './secrets.js';
export { desiredNode } from './nodes.js';
export { pauseState } from './pause.js';
export { evaluateTarget, hashOfBootstrap, inputsOf, newScope, type PhaseDeps, type Scope } from './phases.js';
export { formatVersion, parseVersion, tagVersionResolver, type ReleaseVersionResolver, type Version } from './release.js';
export { SKEW_POLICIES } from './skew.js';
export { createGuestVersions, type ControlPlaneVersions } from './guest.js';
export { NODEPOOL_CONTROLLER_FLAGS } from './command.js';
