/**
 * The sample tenant's workload (local/workload.yaml) in the guest cluster. It is created once the inplace
 * pool's nodes can take pods (Ready, and the not-ready taint the apiserver puts on every new Node lifted by the
 * guest's nodelifecycle controller): pods created before would all land on the first node to join, since a
 * soft spread only weighs the nodes that exist when a pod is placed.
 */
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import * as k8s from '#k8s';
import { parseManifests } from '../../support/src/manifests.js';
import { eventually, type Cluster } from '../../test/bed/src/index.js';
import { createMissing } from './environment.js';

const WORKLOAD_FILE = fileURLToPath(new URL('../../../local/workload.yaml', import.meta.url));
/** The label the sample's inplace pool puts on its Nodes (local/samples.yaml, nodeLabels), which the workload selects. */
const INPLACE_NODES = 'kindling.dev/pool=inplace';
const NOT_READY_TAINT = 'node.kubernetes.io/not-ready';

const joined = (node: k8s.V1Node): boolean => !node.spec?.taints?.some((t) => t.key === NOT_READY_TAINT);

/**
 * Waits (at most `timeoutMs`) until no inplace node still carries the not-ready taint, then creates what is
 * missing of the workload. The wait only improves the first placement: past it (a node that never became
 * Ready), the workload is created all the same, and `print` says why its pods may be uneven.
 */
export async function applyWorkload(guest: Cluster, print: (line: string) => void, timeoutMs = 60_000): Promise<void> {
  const core = guest.kubeConfig.makeApiClient(k8s.CoreV1Api);
  const allJoined = async (): Promise<boolean> =>
    (await core.listNode({ labelSelector: INPLACE_NODES })).items.every(joined);
  await eventually('the inplace nodes to take pods', allJoined, timeoutMs, 500).catch((err: unknown) => {
    print(
      `\n    ${err instanceof Error ? err.message : String(err)}: creating the workload anyway (its pods may not be spread)`,
    );
  });
  const text = await readFile(WORKLOAD_FILE, 'utf8');
  await createMissing(guest.kubeConfig, parseManifests(text, 'workload.yaml'));
}
