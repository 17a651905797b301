/**
 * Whether the extension may act on a hook request, as pure functions of the request and the upgrader's own
 * caches. The request only says which objects it is about: whoever can reach the extension's port can send
 * one, so nothing the extension writes is taken from it. UpdateMachine hands out a node only for a Machine
 * Cluster API is updating in place right now (its update-in-progress marker, in the cache), of a pool on the
 * ClusterAPI in-place engine, towards the hash its own KindlingConfig names; the pool, the hash, the Machine's
 * name, namespace and cluster for every write come from the cache. The payload CanUpdateMachine(Set) fetches
 * to decide is likewise only ever a cached ClusterAPI-engine pool's.
 */
import type { KindlingConfig } from '../../../api/src/bootstrap.js';
import { BOOTSTRAP_GROUP_NAME, KINDLING_CONFIG_KIND } from '../../../api/src/bootstrap.js';
import type { Machine } from '../../../api/src/capi.js';
import { ANNOTATIONS, LABELS } from '../../../api/src/keys.js';
import { inPlaceEngine, type NodePool } from '../../../api/src/nodepool.js';

/** The objects the extension caches, by namespace and name. */
export interface ExtensionCache {
  machine(namespace: string, name: string): Machine | undefined;
  kindlingConfig(namespace: string, name: string): KindlingConfig | undefined;
  nodePool(namespace: string, name: string): NodePool | undefined;
}

/** What an UpdateMachine request asks for (read from its body: names to look up, never to act on). */
export interface UpdateRequest {
  namespace: string;
  machine: string;
  pool: string;
  hash: string;
}

/** Why a request is refused (the start of the Failure's message). */
export type RefusalReason =
  /** No cached Machine of that namespace and name. */
  | 'UnknownMachine'
  /** The Machine lacks Cluster API's update-in-progress marker: Cluster API is not updating it in place. */
  | 'NotUpdatingInPlace'
  /** The Machine has no pool label. */
  | 'NoPoolLabel'
  /** The request names another pool than the Machine's label. */
  | 'PoolMismatch'
  /** The Machine does not boot from a KindlingConfig (bootstrap.configRef). */
  | 'NoKindlingConfig'
  | 'UnknownKindlingConfig'
  /** The Machine's KindlingConfig names another pool than the Machine's label. */
  | 'KindlingConfigPoolMismatch'
  /** The request names another hash than the Machine's KindlingConfig. */
  | 'HashMismatch'
  | 'UnknownNodePool'
  /** The pool is not InPlace on the ClusterAPI engine: Cluster API does not update its Machines in place. */
  | 'NotClusterApiEngine'
  /** The pool belongs to another guest cluster than the Machine. */
  | 'ClusterMismatch';

/** What the extension acts on: every field from the cache. */
export interface UpdateTarget {
  namespace: string;
  machine: string;
  /** The Machine's guest cluster (its spec.clusterName). */
  cluster: string;
  pool: string;
  hash: string;
}

export type UpdateCheck =
  { allowed: true; target: UpdateTarget } | { allowed: false; reason: RefusalReason; message: string };

const refuse = (reason: RefusalReason, message: string): UpdateCheck => ({ allowed: false, reason, message });

/** The pool as far as the hooks may use it: cached, and InPlace on the ClusterAPI engine. */
export function clusterApiPool(
  cache: Pick<ExtensionCache, 'nodePool'>,
  namespace: string,
  name: string,
): { pool: NodePool } | { reason: 'UnknownNodePool' | 'NotClusterApiEngine'; message: string } {
  const pool = cache.nodePool(namespace, name);
  if (!pool) return { reason: 'UnknownNodePool', message: `NodePool ${namespace}/${name} does not exist` };
  const engine = inPlaceEngine(pool);
  if (engine !== 'ClusterAPI')
    return {
      reason: 'NotClusterApiEngine',
      message: `NodePool ${namespace}/${name} is ${engine ? `InPlace on the ${engine} engine` : pool.spec.management.upgradeType}, not InPlace on the ClusterAPI engine: Cluster API does not update its Machines through this extension`,
    };
  return { pool };
}

/** The Machine's KindlingConfig, or why there is none to trust. */
function kindlingConfigOf(
  cache: ExtensionCache,
  machine: Machine,
  where: string,
): { config: KindlingConfig } | { refusal: UpdateCheck } {
  const ref = machine.spec.bootstrap.configRef;
  if (ref?.apiGroup !== BOOTSTRAP_GROUP_NAME || ref.kind !== KINDLING_CONFIG_KIND)
    return {
      refusal: refuse(
        'NoKindlingConfig',
        `${where} does not boot from a ${KINDLING_CONFIG_KIND} (bootstrap.configRef)`,
      ),
    };
  const config = cache.kindlingConfig(machine.metadata.namespace ?? '', ref.name);
  if (!config)
    return {
      refusal: refuse('UnknownKindlingConfig', `${where}: its ${KINDLING_CONFIG_KIND} ${ref.name} does not exist`),
    };
  return { config };
}

/**
 * May UpdateMachine act on the Machine the request names? Only as Cluster API would ask: see the top of this
 * file. Every refusal says which check failed.
 */
export function checkUpdateMachine(request: UpdateRequest, cache: ExtensionCache): UpdateCheck {
  const where = `Machine ${request.namespace}/${request.machine}`;
  const machine = cache.machine(request.namespace, request.machine);
  if (!machine) return refuse('UnknownMachine', `${where} does not exist`);
  if (machine.metadata.annotations?.[ANNOTATIONS.capiUpdateInProgress] === undefined)
    return refuse(
      'NotUpdatingInPlace',
      `${where} is not being updated in place by Cluster API (no ${ANNOTATIONS.capiUpdateInProgress} annotation)`,
    );
  const label = machine.metadata.labels?.[LABELS.nodePool];
  if (!label) return refuse('NoPoolLabel', `${where} has no ${LABELS.nodePool} label`);
  if (label !== request.pool)
    return refuse('PoolMismatch', `${where} is of pool ${label}, not of pool ${request.pool} the request names`);
  return checkConfigAndPool(request, cache, machine, label);
}

/** The second half of checkUpdateMachine: the Machine's KindlingConfig and pool against the request. */
function checkConfigAndPool(
  request: UpdateRequest,
  cache: ExtensionCache,
  machine: Machine,
  label: string,
): UpdateCheck {
  const where = `Machine ${request.namespace}/${request.machine}`;
  const found = kindlingConfigOf(cache, machine, where);
  if ('refusal' in found) return found.refusal;
  const spec = found.config.spec;
  if (spec.nodePool !== label)
    return refuse(
      'KindlingConfigPoolMismatch',
      `${where} is of pool ${label} but its ${KINDLING_CONFIG_KIND} names pool ${spec.nodePool}`,
    );
  if (spec.configHash !== request.hash)
    return refuse(
      'HashMismatch',
      `${where}: its ${KINDLING_CONFIG_KIND} names config hash ${spec.configHash}, not ${request.hash} the request names`,
    );
  const namespace = machine.metadata.namespace ?? request.namespace;
  const pool = clusterApiPool(cache, namespace, label);
  if ('reason' in pool) return refuse(pool.reason, `${where}: ${pool.message}`);
  const cluster = machine.spec.clusterName;
  if (pool.pool.spec.clusterName !== cluster)
    return refuse(
      'ClusterMismatch',
      `${where} is in cluster ${cluster} but NodePool ${label} is of cluster ${pool.pool.spec.clusterName}`,
    );
  return {
    allowed: true,
    target: { namespace, machine: machine.metadata.name, cluster, pool: label, hash: spec.configHash },
  };
}
