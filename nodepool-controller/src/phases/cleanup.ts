/** Old Secrets and templates: expire tokens, delete user-data and bootstrap templates nothing references. */
import type * as k8s from '#k8s';
import { ANNOTATIONS, LABELS, userDataSecretName } from '../../../api/src/keys.js';
import { desiredTokenSecret } from '../desired-secrets.js';
import { applyIfNeeded, withKind } from '../apply.js';
import { CONTINUE, type PhaseResult } from './result.js';
import {
  hashOfBootstrap,
  inputsOf,
  isoSeconds,
  liveChild,
  type Decision,
  type PhaseDeps,
  type Scope,
} from './scope.js';

/** User-data names something still boots or rebuilds from: the child's template, CAPI's MachineSets, Machines. */
function referencedUserData(s: Scope, deps: PhaseDeps): Set<string | undefined> {
  const name = s.pool.metadata.name;
  return new Set<string | undefined>([
    liveChild(s, deps)?.spec.template.spec.bootstrap.dataSecretName,
    ...deps.caches.poolMachineSets(s.ns, name).map((m) => m.spec.template.spec.bootstrap.dataSecretName),
    ...deps.caches.poolMachines(s.ns, name).map((m) => m.spec.bootstrap.dataSecretName),
    ...deps.caches.poolKindlingConfigs(s.ns, name).map((c) => userDataSecretName(c.spec.nodePool, c.spec.configHash)),
    ...deps.caches
      .poolMachineSets(s.ns, name)
      .map((m) => hashOfBootstrap(name, m.spec.template.spec.bootstrap))
      .map((h) => (h === undefined ? undefined : userDataSecretName(name, h))),
  ]);
}

/** Bootstrap templates of hashes no MachineSet points at any more (Cluster API reads a MachineSet's template
 * to create its Machines and to compare it with the next one, so a referenced one stays). */
async function retireBootstrapTemplates(s: Scope, deps: PhaseDeps, keep: Set<string>): Promise<void> {
  const name = s.pool.metadata.name;
  const used = new Set([
    ...keep,
    ...deps.caches.poolMachineSets(s.ns, name).map((m) => hashOfBootstrap(name, m.spec.template.spec.bootstrap)),
  ]);
  for (const template of deps.caches.poolKindlingConfigTemplates(s.ns, name)) {
    if (!used.has(template.spec.template.spec.configHash))
      await deps.writer.remove(template, deps.caches.kindlingConfigTemplates);
  }
}

export async function phaseCleanup(s: Scope, deps: PhaseDeps, d: Decision): Promise<PhaseResult> {
  if (!d.effective) return CONTINUE;
  const keep = new Set([d.effective.hash, ...(d.rolling ? [d.rolling.hash] : [])]);
  const referenced = referencedUserData(s, deps);
  for (const secret of deps.caches.poolSecrets(s.ns, s.pool.metadata.name)) {
    const hash = secret.metadata?.labels?.[LABELS.configHash];
    if (hash !== undefined && !keep.has(hash)) await retire(s, deps, { secret, hash, referenced });
  }
  await retireBootstrapTemplates(s, deps, keep);
  return CONTINUE;
}

/** An old token gets its expiry (the ignition server deletes it then); old user-data goes once unreferenced. */
async function retire(
  s: Scope,
  deps: PhaseDeps,
  old: { secret: k8s.V1Secret; hash: string; referenced: Set<string | undefined> },
): Promise<void> {
  if (old.secret.metadata?.labels?.[LABELS.tokenSecret] === 'true') return expireToken(s, deps, old.secret, old.hash);
  if (!old.referenced.has(old.secret.metadata?.name))
    await deps.writer.remove(withKind(old.secret, 'v1', 'Secret'), deps.caches.secrets);
}

async function expireToken(s: Scope, deps: PhaseDeps, secret: k8s.V1Secret, hash: string): Promise<void> {
  const inputs = inputsOf(secret);
  if (!inputs) return;
  const expiresAt =
    secret.metadata?.annotations?.[ANNOTATIONS.tokenExpiresAt] ?? isoSeconds(s.now + deps.config.tokenGraceMs);
  await applyIfNeeded(deps, secret, desiredTokenSecret(s.pool, { hash, inputs, expiresAt }), deps.caches.secrets);
}
