/** One-shot reads for the operator commands: a pool's objects in the management cluster and its guest Nodes. */
import * as k8s from '#k8s';
import { LABELS } from '../../api/src/keys.js';
import { NODEPOOL_KIND, type NodePool } from '../../api/src/nodepool.js';
import { type Machine, type MachineDeployment, type MachineSet } from '../../api/src/capi.js';
import { isNotFound } from '../../support/src/errors.js';
import { parseManifests } from '../../support/src/manifests.js';
import { createGuestKubeConfigs, type GuestKubeConfigs } from '../../support/src/guest-kubeconfigs.js';
import type { PoolState } from './plan-model.js';
import { RESOURCES, type ResourceType } from '../../api/src/resources.js';

/** `namespace/name`, or `name` in the default namespace. */
export function parsePoolRef(ref: string, defaultNamespace = 'default'): { namespace: string; name: string } {
  const parts = ref.split('/');
  if (parts.length > 2 || parts.some((p) => p === ''))
    throw new Error(`"${ref}" is not a pool: use <namespace>/<name>`);
  return parts.length === 2
    ? { namespace: parts[0] ?? '', name: parts[1] ?? '' }
    : { namespace: defaultNamespace, name: ref };
}

/** A NodePool from a YAML file's text (the first NodePool document). */
export function poolFromYaml(text: string, source?: string): NodePool {
  const pool = parseManifests(text, source).find((d): d is NodePool => d.kind === NODEPOOL_KIND);
  if (!pool?.metadata?.name || !pool.spec) throw new Error('the file holds no NodePool with metadata.name and spec');
  return pool;
}

async function orUndefined<T>(read: Promise<T>): Promise<T | undefined> {
  try {
    return await read;
  } catch (err) {
    if (isNotFound(err)) return undefined;
    throw err;
  }
}

export async function readNodePool(kc: k8s.KubeConfig, namespace: string, name: string): Promise<NodePool | undefined> {
  const custom = kc.makeApiClient(k8s.CustomObjectsApi);
  return (await orUndefined(
    custom.getNamespacedCustomObject({
      ...RESOURCES.nodePools,
      namespace,
      name,
    }),
  )) as NodePool | undefined;
}

/** The guest clusters' kubeconfigs, read from their CAPI `<cluster>-kubeconfig` Secrets. */
export function guestKubeConfigs(kc: k8s.KubeConfig): GuestKubeConfigs {
  const core = kc.makeApiClient(k8s.CoreV1Api);
  return createGuestKubeConfigs((namespace, name) => core.readNamespacedSecret({ namespace, name }));
}

async function guestNodes(
  guests: GuestKubeConfigs,
  pool: NodePool,
  machines: readonly Machine[],
): Promise<Pick<PoolState, 'nodes' | 'guestError'>> {
  const names = new Set(machines.map((m) => m.status?.nodeRef?.name).filter((n): n is string => !!n));
  if (names.size === 0) return { nodes: [] };
  try {
    const kc = await guests.get(pool.metadata.namespace ?? '', pool.spec.clusterName);
    const nodes = await kc.makeApiClient(k8s.CoreV1Api).listNode();
    return { nodes: nodes.items.filter((n) => names.has(n.metadata?.name ?? '')) };
  } catch (err) {
    return { nodes: [], guestError: `guest cluster ${pool.spec.clusterName}: ${(err as Error).message}` };
  }
}

/** Everything `plan` needs about a pool, read once. */
export async function readPoolState(kc: k8s.KubeConfig, guests: GuestKubeConfigs, pool: NodePool): Promise<PoolState> {
  const namespace = pool.metadata.namespace ?? '';
  const core = kc.makeApiClient(k8s.CoreV1Api);
  const custom = kc.makeApiClient(k8s.CustomObjectsApi);
  const labelSelector = `${LABELS.nodePool}=${pool.metadata.name}`;
  const capi = async <T>(resource: ResourceType): Promise<T[]> =>
    (
      (await custom.listNamespacedCustomObject({
        ...resource,
        namespace,
        labelSelector,
      })) as { items: T[] }
    ).items;
  const [configMaps, secrets, machineSets, machineDeployments, machines] = await Promise.all([
    Promise.all(
      (pool.spec.config ?? []).map((c) => orUndefined(core.readNamespacedConfigMap({ namespace, name: c.name }))),
    ),
    core.listNamespacedSecret({ namespace, labelSelector }),
    capi<MachineSet>(RESOURCES.machineSets),
    capi<MachineDeployment>(RESOURCES.machineDeployments),
    capi<Machine>(RESOURCES.machines),
  ]);
  return {
    configMaps: configMaps.filter((c): c is k8s.V1ConfigMap => c !== undefined),
    secrets: secrets.items,
    machineSets,
    machineDeployments,
    machines,
    ...(await guestNodes(guests, pool, machines)),
  };
}
