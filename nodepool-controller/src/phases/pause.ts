/** spec.pausedUntil: the Cluster API paused annotation on the children, no other write, a look again when the
 * date passes. */
import { ANNOTATIONS } from '../../../api/src/keys.js';
import { pauseState } from '../pause-state.js';
import { CONTINUE, type PhaseResult } from './result.js';
import { inPool, type PhaseDeps, type Scope } from './scope.js';

export async function phasePause(s: Scope, deps: PhaseDeps): Promise<PhaseResult> {
  const state = pauseState(s.pool.spec.pausedUntil, s.now);
  if (state.paused) s.obs.pausedUntil = state.until;
  const name = s.pool.metadata.name;
  const children = [deps.caches.machineSets.get(inPool(s, name)), deps.caches.machineDeployments.get(inPool(s, name))];
  for (const child of children) {
    if (!child) continue;
    const has = child.metadata.annotations?.[ANNOTATIONS.capiPaused] !== undefined;
    if (has === state.paused) continue;
    const patch = { metadata: { annotations: { [ANNOTATIONS.capiPaused]: state.paused ? 'true' : null } } };
    await deps.writer.mergePatch(
      child,
      patch,
      child.kind === 'MachineSet' ? (deps.caches.machineSets as never) : (deps.caches.machineDeployments as never),
    );
  }
  if (!state.paused) return CONTINUE;
  return { kind: 'stop', ...(state.resumeInMs === undefined ? {} : { afterMs: state.resumeInMs + 500 }) };
}
