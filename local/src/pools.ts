/** Waits for every NodePool of a namespace to be Ready, printing a line when a pool's readiness changes. */
import * as k8s from '#k8s';
import type { NodePool } from '../../api/src/nodepool.js';
import type { Cluster } from '../../test/bed/src/index.js';

function readiness(pool: NodePool): string {
  const ready = pool.status?.conditions?.find((c) => c.type === 'Ready');
  return `${pool.metadata.name}: ${pool.status?.replicas ?? 0}/${pool.spec.replicas ?? '?'} ${ready?.status === 'True' ? 'Ready' : `not ready (${ready?.message ?? 'no status yet'})`}`;
}

export async function waitForPools(
  mgmt: Cluster,
  namespace: string,
  timeoutMs: number,
  print: (line: string) => void,
): Promise<void> {
  const api = mgmt.kubeConfig.makeApiClient(k8s.CustomObjectsApi);
  const deadline = Date.now() + timeoutMs;
  const seen = new Map<string, string>();
  print('');
  for (;;) {
    const list = (await api.listNamespacedCustomObject({
      group: 'kindling.dev',
      version: 'v1beta1',
      namespace,
      plural: 'nodepools',
    })) as { items: NodePool[] };
    for (const pool of list.items) {
      const line = readiness(pool);
      if (seen.get(pool.metadata.name) !== line) print(`    ${line}`);
      seen.set(pool.metadata.name, line);
    }
    const ready = list.items.every((p) => p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True'));
    if (list.items.length > 0 && ready) return;
    if (Date.now() > deadline)
      throw new Error(`NodePools not Ready after ${timeoutMs / 1000} s:\n${list.items.map(readiness).join('\n')}`);
    await new Promise((r) => setTimeout(r, 1000));
  }
}
