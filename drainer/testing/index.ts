/** Helpers for integration tests on the real test bed (not shipped in any command). */
import * as k8s from '#k8s';
import type { Machine, MachineSet } from '../../api/src/capi.js';
import { CAPI_API_VERSION } from '../../api/src/capi.js';
import { LABELS } from '../../api/src/keys.js';
import { createApplier } from '../../support/src/apply.js';

export { eventually } from '../../test/bed/src/eventually.js';

/** A CAPI MachineSet as the nodepool-controller would write it (only what the drainer and upgrader read). */
export function testMachineSet(opts: {
  name: string;
  namespace: string;
  cluster: string;
  replicas: number;
  drainTimeoutSeconds?: number;
  annotations?: Record<string, string>;
  /** The NodePool it belongs to (LABELS.nodePool); its own name by default. */
  pool?: string;
}): MachineSet {
  const pool = opts.pool ?? opts.name;
  return {
    apiVersion: CAPI_API_VERSION,
    kind: 'MachineSet',
    metadata: {
      name: opts.name,
      namespace: opts.namespace,
      annotations: opts.annotations,
      labels: { [LABELS.nodePool]: pool },
    },
    spec: {
      clusterName: opts.cluster,
      replicas: opts.replicas,
      selector: { matchLabels: { [LABELS.nodePool]: pool } },
      template: {
        metadata: { labels: { [LABELS.nodePool]: pool } },
        spec: {
          clusterName: opts.cluster,
          bootstrap: { dataSecretName: `user-data-${opts.name}` },
          infrastructureRef: { apiGroup: 'infrastructure.kindling.dev', kind: 'LocalMachineTemplate', name: opts.name },
          deletion:
            opts.drainTimeoutSeconds === undefined ? undefined : { nodeDrainTimeoutSeconds: opts.drainTimeoutSeconds },
        },
      },
    },
  };
}

/**
 * Creates a Machine of a MachineSet, as Cluster API would; with `node`, also its status.nodeRef, as once the
 * node registered (without: a Machine still provisioning, see setTestNodeRef).
 */
export async function createTestMachine(
  mgmt: k8s.KubeConfig,
  opts: { name: string; namespace: string; cluster: string; machineSet: string; node?: string; pool?: string },
): Promise<void> {
  const applier = createApplier(mgmt, 'kindling-test');
  const machine: Machine = {
    apiVersion: CAPI_API_VERSION,
    kind: 'Machine',
    metadata: {
      name: opts.name,
      namespace: opts.namespace,
      labels: { [LABELS.capiSetName]: opts.machineSet, [LABELS.nodePool]: opts.pool ?? opts.machineSet },
    },
    spec: {
      clusterName: opts.cluster,
      bootstrap: { dataSecretName: `user-data-${opts.machineSet}` },
      infrastructureRef: { apiGroup: 'infrastructure.kindling.dev', kind: 'LocalMachine', name: opts.name },
    },
  };
  await applier.apply(machine);
  if (opts.node !== undefined)
    await setTestNodeRef(mgmt, { name: opts.name, namespace: opts.namespace, node: opts.node });
}

/** Sets a Machine's status.nodeRef, as Cluster API does once its node registered. */
export async function setTestNodeRef(
  mgmt: k8s.KubeConfig,
  opts: { name: string; namespace: string; node: string },
): Promise<void> {
  await createApplier(mgmt, 'kindling-test').applyStatus({
    apiVersion: CAPI_API_VERSION,
    kind: 'Machine',
    metadata: { name: opts.name, namespace: opts.namespace },
    status: { nodeRef: { name: opts.node } },
  } as k8s.KubernetesObject);
}

/** Creates a guest Node (with taints, which keep the scheduler's Pods off it unless they tolerate them); KWOK makes it Ready. */
export async function createTestNode(
  guest: k8s.KubeConfig,
  name: string,
  labels: Record<string, string> = {},
  taints: k8s.V1Taint[] = [],
): Promise<void> {
  await guest.makeApiClient(k8s.CoreV1Api).createNode({
    body: { metadata: { name, labels: { 'kubernetes.io/hostname': name, ...labels } }, spec: { taints } },
  });
}

/**
 * A bare pod only `node` takes: the real kube-scheduler places it by the node's hostname label (and its
 * `tolerations`, when a taint keeps the node for it). Labelled `app: <name>`, for a PodDisruptionBudget.
 */
export function testPodFor(name: string, node: string, tolerations: k8s.V1Toleration[] = []): k8s.V1Pod {
  return {
    metadata: { name, labels: { app: name } },
    spec: { nodeSelector: { 'kubernetes.io/hostname': node }, tolerations, containers: [{ name: 'c', image: 'x' }] },
  };
}
