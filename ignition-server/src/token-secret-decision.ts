/**
 * Whether the ignition server acts on a token Secret at all: a pure function of the Secret and the NodePool
 * its owner reference names. Writing a labelled Secret in a tenant namespace is easy; only the
 * nodepool-controller writes a NodePool's status, and only the pool's owner writes its spec. So a Secret is
 * served and minted for only when it is its pool's own: owned (by UID) by an existing NodePool of its
 * namespace, named as the controller names it, holding the release and config its hash stands for, and that
 * hash is one the pool resolved: the one its status reports (the nodes' or a rollout's), or the target of its
 * spec's release while the status does not say the pool's inputs are refused (the controller creates the
 * target's Secret before the status names its hash). Anything else costs no mint and no generation.
 */
import type { ConditionType } from '../../api/src/conditions.js';
import { tokenSecretName } from '../../api/src/keys.js';
import { NODEPOOL_API_VERSION, NODEPOOL_KIND, type NodePool } from '../../api/src/nodepool.js';

/** Why a token Secret is refused (the reason of its Warning Event and a label of the refusal metric). */
export type TokenSecretRefusal =
  /** No owner reference to a NodePool with a UID: not written by the nodepool-controller. */
  | 'NoNodePoolOwner'
  /** The pool label or `pool` key names another pool than the owner reference. */
  | 'PoolMismatch'
  /** No NodePool of the owner's name in the Secret's namespace. */
  | 'NodePoolNotFound'
  /** A NodePool of that name exists with another UID: a stale Secret, or a copy from another namespace. */
  | 'NodePoolUidMismatch'
  /** Not named token-<pool>-<hash>: one token Secret per pool and hash. */
  | 'UnexpectedName'
  /** The release and config do not hash to the Secret's config hash: they were edited. */
  | 'InputsMismatch'
  /** Neither a hash the pool's status reports nor the target of the pool's release. */
  | 'ReleaseNotOfPool'
  /**
   * As ReleaseNotOfPool, but with an expiry: the nodepool-controller retired it when the pool moved to another
   * release. It is no news (no Warning Event), and the leader deletes it at its expiry, as it does a served one.
   */
  | 'Retired'
  /** The target of the pool's release, which the pool's status says may not roll out. */
  | 'TargetRefused';

/** What the decision reads of a token Secret. */
export interface TokenSecretFacts {
  namespace: string;
  name: string;
  /** `namespace/name` of the pool the Secret names (its `pool` key, else its pool label). */
  pool: string;
  hash: string;
  release: string;
  /** configHash over the Secret's release and config. */
  inputsHash: string;
  owner?: { name: string; uid: string };
  /** Its expiry annotation: the nodepool-controller writes one when it retires the Secret. */
  expiresAtMs?: number;
}

export type TokenSecretDecision =
  { accepted: true; pool: string; cluster: string } | { accepted: false; reason: TokenSecretRefusal; message: string };

/** The part of a NodePool the decision reads. */
export type PoolFacts = Pick<NodePool, 'metadata' | 'spec' | 'status'>;

/** The conditions whose False status means the controller will not roll the pool's target out. */
const TARGET_VERDICTS: readonly ConditionType[] = ['ValidReleaseImage', 'ValidMachineConfig', 'SupportedVersionSkew'];

const refuse = (reason: TokenSecretRefusal, message: string): TokenSecretDecision => ({
  accepted: false,
  reason,
  message,
});

/** The NodePool owner reference of a Secret's metadata, if it has one with a UID. */
export function nodePoolOwner(
  refs: readonly { apiVersion: string; kind: string; name: string; uid: string }[] | undefined,
): { name: string; uid: string } | undefined {
  const ref = refs?.find((r) => r.kind === NODEPOOL_KIND && r.apiVersion === NODEPOOL_API_VERSION && r.uid !== '');
  return ref ? { name: ref.name, uid: ref.uid } : undefined;
}

export function decideTokenSecret(secret: TokenSecretFacts, pool: PoolFacts | undefined): TokenSecretDecision {
  const owned = checkOwner(secret, pool);
  if (owned) return owned;
  const p = pool as PoolFacts;
  if (secret.name !== tokenSecretName(p.metadata.name, secret.hash))
    return refuse(
      'UnexpectedName',
      `A token Secret of NodePool ${p.metadata.name} at config hash ${secret.hash} is named ${tokenSecretName(p.metadata.name, secret.hash)}, not ${secret.name}`,
    );
  if (secret.inputsHash !== secret.hash)
    return refuse(
      'InputsMismatch',
      `The release and config of the Secret hash to ${secret.inputsHash}, not to its config hash ${secret.hash}: they were edited`,
    );
  const resolved = checkResolved(secret, p);
  if (resolved) return resolved;
  return { accepted: true, pool: `${secret.namespace}/${p.metadata.name}`, cluster: p.spec.clusterName };
}

function checkOwner(secret: TokenSecretFacts, pool: PoolFacts | undefined): TokenSecretDecision | undefined {
  const { owner, namespace } = secret;
  if (!owner)
    return refuse(
      'NoNodePoolOwner',
      'The Secret has no owner reference to a NodePool: only NodePools own token Secrets',
    );
  if (secret.pool !== `${namespace}/${owner.name}`)
    return refuse('PoolMismatch', `The Secret is owned by NodePool ${owner.name} but names pool ${secret.pool}`);
  if (!pool) return refuse('NodePoolNotFound', `NodePool ${owner.name} does not exist in namespace ${namespace}`);
  if (pool.metadata.uid !== owner.uid)
    return refuse(
      'NodePoolUidMismatch',
      `The owner reference names NodePool ${owner.name} with UID ${owner.uid}, but that NodePool of namespace ${namespace} has UID ${pool.metadata.uid ?? 'none'}`,
    );
  return undefined;
}

/** The hashes the pool's status reports: what the children point at, and both ends of a rollout. */
function reportedHashes(pool: PoolFacts): string[] {
  const s = pool.status;
  return [s?.configHash, s?.rollout?.from, s?.rollout?.to].filter((h): h is string => h !== undefined);
}

function checkResolved(secret: TokenSecretFacts, pool: PoolFacts): TokenSecretDecision | undefined {
  if (reportedHashes(pool).includes(secret.hash)) return undefined;
  const name = pool.metadata.name;
  if (secret.release !== pool.spec.release.image && secret.expiresAtMs !== undefined)
    return refuse(
      'Retired',
      `NodePool ${name} moved to release ${pool.spec.release.image} and reports no config hash ${secret.hash}; the Secret of release ${secret.release} was retired and is deleted at its expiry`,
    );
  if (secret.release !== pool.spec.release.image)
    return refuse(
      'ReleaseNotOfPool',
      `NodePool ${name} uses release ${pool.spec.release.image} and reports no config hash ${secret.hash}; the Secret names release ${secret.release}`,
    );
  const status = pool.status;
  // A status of an older generation does not speak for the release the spec names now.
  if (status?.observedGeneration === undefined || status.observedGeneration !== pool.metadata.generation)
    return undefined;
  const refused = (status.conditions ?? []).find((c) => TARGET_VERDICTS.includes(c.type) && c.status === 'False');
  if (refused)
    return refuse(
      'TargetRefused',
      `NodePool ${name} may not roll out release ${secret.release}: ${refused.type} is False (${refused.reason}: ${refused.message})`,
    );
  return undefined;
}
