/**
 * Helpers for integration tests on the real test bed (not shipped in any command).
 *
 * TestScheduler stands in for kube-scheduler, which the test bed does not run: it binds pending pods to
 * Ready, schedulable nodes through the real Binding API, spreading them round-robin. It honours cordons,
 * which is all a drain test needs from a scheduler (evicted pods must come back elsewhere).
 */
import * as k8s from '@kubernetes/client-node';
import type { Machine, MachineSet } from '../../api/src/capi.js';
import { CAPI_API_VERSION } from '../../api/src/capi.js';
import { LABELS } from '../../api/src/keys.js';
import { createApplier } from '../../support/src/apply.js';

export { eventually } from '../../test/bed/src/eventually.js';


export const isReady = (node: k8s.V1Node): boolean => node.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') === true;

export class TestScheduler {
  #core: k8s.CoreV1Api;
  #timer: NodeJS.Timeout | undefined;
  #next = 0;
  #busy = false;
  bound = 0;

  constructor(kc: k8s.KubeConfig) {
    this.#core = kc.makeApiClient(k8s.CoreV1Api);
  }

  start(everyMs = 100): void {
    this.#timer = setInterval(() => void this.#tick(), everyMs);
  }

  stop(): void {
    clearInterval(this.#timer);
  }

  async #tick(): Promise<void> {
    if (this.#busy) return;
    this.#busy = true;
    try {
      const pending = (await this.#core.listPodForAllNamespaces({ fieldSelector: 'spec.nodeName=' })).items.filter((p) => !p.metadata?.deletionTimestamp);
      if (pending.length === 0) return;
      const nodes = (await this.#core.listNode()).items
        .filter((n) => n.spec?.unschedulable !== true && isReady(n))
        .map((n) => n.metadata?.name ?? '')
        .sort();
      for (const pod of nodes.length > 0 ? pending : []) await this.#bind(pod, nodes[this.#next++ % nodes.length] ?? '');
    } catch {
      // The next tick tries again; a scheduler never gives up on a pending pod.
    } finally {
      this.#busy = false;
    }
  }

  async #bind(pod: k8s.V1Pod, node: string): Promise<void> {
    const { name = '', namespace = '' } = pod.metadata ?? {};
    await this.#core.createNamespacedPodBinding({ name, namespace, body: { metadata: { name }, target: { kind: 'Node', name: node } } });
    this.bound++;
  }
}

/** A CAPI MachineSet as the nodepool-controller would write it (only what the drainer and upgrader read). */
export function testMachineSet(opts: { name: string; namespace: string; cluster: string; replicas: number; drainTimeoutSeconds?: number; annotations?: Record<string, string> }): MachineSet {
  return {
    apiVersion: CAPI_API_VERSION,
    kind: 'MachineSet',
    metadata: { name: opts.name, namespace: opts.namespace, annotations: opts.annotations, labels: { [LABELS.nodePool]: opts.name } },
    spec: {
      clusterName: opts.cluster,
      replicas: opts.replicas,
      selector: { matchLabels: { [LABELS.nodePool]: opts.name } },
      template: {
        metadata: { labels: { [LABELS.nodePool]: opts.name } },
        spec: {
          clusterName: opts.cluster,
          bootstrap: { dataSecretName: `user-data-${opts.name}` },
          infrastructureRef: { apiGroup: 'infrastructure.kindling.dev', kind: 'LocalMachineTemplate', name: opts.name },
          deletion: opts.drainTimeoutSeconds === undefined ? undefined : { nodeDrainTimeoutSeconds: opts.drainTimeoutSeconds },
        },
      },
    },
  };
}

/**
 * Creates a Machine of a MachineSet, as Cluster API would; with `node`, also its status.nodeRef, as once the
 * node registered (without: a Machine still provisioning, see setTestNodeRef).
 */
export async function createTestMachine(mgmt: k8s.KubeConfig, opts: { name: string; namespace: string; cluster: string; machineSet: string; node?: string }): Promise<void> {
  const applier = createApplier(mgmt, 'kindling-test');
  const machine: Machine = {
    apiVersion: CAPI_API_VERSION,
    kind: 'Machine',
    metadata: { name: opts.name, namespace: opts.namespace, labels: { [LABELS.capiSetName]: opts.machineSet, [LABELS.nodePool]: opts.machineSet } },
    spec: {
      clusterName: opts.cluster,
      bootstrap: { dataSecretName: `user-data-${opts.machineSet}` },
      infrastructureRef: { apiGroup: 'infrastructure.kindling.dev', kind: 'LocalMachine', name: opts.name },
    },
  };
  await applier.apply(machine);
  if (opts.node !== undefined) await setTestNodeRef(mgmt, { name: opts.name, namespace: opts.namespace, node: opts.node });
}

/** Sets a Machine's status.nodeRef, as Cluster API does once its node registered. */
export async function setTestNodeRef(mgmt: k8s.KubeConfig, opts: { name: string; namespace: string; node: string }): Promise<void> {
  await createApplier(mgmt, 'kindling-test').applyStatus({ apiVersion: CAPI_API_VERSION, kind: 'Machine', metadata: { name: opts.name, namespace: opts.namespace }, status: { nodeRef: { name: opts.node } } } as k8s.KubernetesObject);
}

/** Creates a guest Node; KWOK makes it Ready. */
export async function createTestNode(guest: k8s.KubeConfig, name: string, labels: Record<string, string> = {}): Promise<void> {
  await guest.makeApiClient(k8s.CoreV1Api).createNode({ body: { metadata: { name, labels: { 'kubernetes.io/hostname': name, ...labels } } } });
}
