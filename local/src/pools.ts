/**
 * Waits for every NodePool of a namespace to be Ready, printing a line when a pool's readiness changes. A pool
 * that is not Ready in time is reported, not fatal: the environment is what a person needs to see why (a failed
 * update, a refused child), so it stays up with the report.
 */
import * as k8s from '#k8s';
import { isFine } from '../../api/src/conditions.js';
import type { NodePool } from '../../api/src/nodepool.js';
import type { Cluster } from '../../test/bed/src/index.js';

const isReady = (pool: NodePool): boolean =>
  pool.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') === true;

function readiness(pool: NodePool): string {
  const ready = pool.status?.conditions?.find((c) => c.type === 'Ready');
  return `${pool.metadata.name}: ${pool.status?.replicas ?? 0}/${pool.spec.replicas ?? '?'} ${ready?.status === 'True' ? 'Ready' : `not ready (${ready?.message ?? 'no status yet'})`}`;
}

/** The pools that are not Ready, each with every other condition that is not fine and its message. */
export function notReadyReport(pools: readonly NodePool[]): string[] {
  return pools
    .filter((p) => !isReady(p))
    .flatMap((p) => [
      readiness(p),
      ...(p.status?.conditions ?? [])
        .filter((c) => c.type !== 'Ready' && !isFine(c))
        .map((c) => `  ${c.type} ${c.status} ${c.reason}: ${c.message}`),
    ]);
}

/**
 * Lists the pools every `pollMs` until all are Ready (an empty report) or `timeoutMs` has passed (the report of
 * those that are not).
 */
export async function waitUntilReady(
  list: () => Promise<NodePool[]>,
  timeouts: { timeoutMs: number; pollMs: number },
  print: (line: string) => void,
): Promise<string[]> {
  const deadline = Date.now() + timeouts.timeoutMs;
  const seen = new Map<string, string>();
  for (;;) {
    const pools = await list();
    for (const pool of pools) {
      const line = readiness(pool);
      if (seen.get(pool.metadata.name) !== line) print(`    ${line}`);
      seen.set(pool.metadata.name, line);
    }
    if (pools.length > 0 && pools.every(isReady)) return [];
    if (Date.now() >= deadline) return pools.length > 0 ? notReadyReport(pools) : ['no NodePool in the namespace'];
    await new Promise((r) => setTimeout(r, timeouts.pollMs));
  }
}

/** waitUntilReady for the NodePools of `namespace` on the management cluster, polled each second. */
export function waitForPools(
  mgmt: Cluster,
  namespace: string,
  timeoutMs: number,
  print: (line: string) => void,
): Promise<string[]> {
  const api = mgmt.kubeConfig.makeApiClient(k8s.CustomObjectsApi);
  const list = async (): Promise<NodePool[]> =>
    (
      (await api.listNamespacedCustomObject({
        group: 'kindling.dev',
        version: 'v1beta1',
        namespace,
        plural: 'nodepools',
      })) as { items: NodePool[] }
    ).items;
  print('');
  return waitUntilReady(list, { timeoutMs, pollMs: 1000 }, print);
}
