/**
 * LocalControlPlane controller: stands for a hosted control plane backed by a guest apiserver of the test bed.
 * It publishes the endpoint, `controlPlaneInitialized`, `externalManagedControlPlane` (no control-plane
 * Machines, so Cluster API still drains and deletes Nodes) and the version from the guest's /version, and
 * writes the `<cluster>-kubeconfig` Secret Cluster API and Kindling read.
 */
import * as k8s from '#k8s';
import { kubeconfigSecretName, LABELS, SECRET_KEYS } from '../../../api/src/keys.js';
import { NotReadyError } from '../../../support/src/errors.js';
import { createApplier } from '../../../support/src/apply.js';
import { guestKubeConfig } from '../../../support/src/guest-kubeconfig-parse.js';
import type { Logger } from '../../../support/src/logger.js';
import type { ProviderContext } from './common.js';
import { SIMULATION } from '../../../test/bed/src/keys.js';

export interface LocalControlPlane extends k8s.KubernetesObject {
  metadata: k8s.V1ObjectMeta & { name: string; namespace: string };
  spec: { adminKubeconfigSecretRef: { name: string }; controlPlaneEndpoint?: { host?: string; port?: number } };
  status?: {
    initialization?: { controlPlaneInitialized?: boolean };
    externalManagedControlPlane?: boolean;
    version?: string;
  };
}

/** The Cluster this control plane belongs to: Cluster API labels it, and owns it once the Cluster exists. */
function clusterOf(cp: LocalControlPlane): string | undefined {
  return (
    cp.metadata.labels?.[LABELS.capiClusterName] ?? cp.metadata.ownerReferences?.find((o) => o.kind === 'Cluster')?.name
  );
}

export class LocalControlPlaneReconciler {
  readonly #applier;

  constructor(private readonly ctx: ProviderContext & { kubeConfig: k8s.KubeConfig }) {
    this.#applier = createApplier(ctx.kubeConfig, SIMULATION.fieldManager);
  }

  async reconcile(cp: LocalControlPlane, log: Logger): Promise<void> {
    if (cp.metadata.deletionTimestamp) return;
    const cluster = clusterOf(cp);
    if (!cluster) throw new NotReadyError('waiting for Cluster API to link the control plane to its Cluster', 2000);
    const { kubeconfig, version, server } = await this.#guest(cp);
    await this.#publishKubeconfig(cp.metadata.namespace, cluster, kubeconfig);
    await this.#publishEndpoint(cp, { host: server.hostname, port: Number(server.port || 443) });
    if (cp.status?.version === version && cp.status.initialization?.controlPlaneInitialized) return;
    await this.#patch(cp, 'status', {
      status: { initialization: { controlPlaneInitialized: true }, externalManagedControlPlane: true, version },
    });
    log.info({ cluster, version, endpoint: server.host }, 'Control plane published');
  }

  /** The guest apiserver this control plane stands for: its admin kubeconfig, version and address. */
  async #guest(cp: LocalControlPlane): Promise<{ kubeconfig: string; version: string; server: URL }> {
    const admin = await this.ctx.core.readNamespacedSecret({
      name: cp.spec.adminKubeconfigSecretRef.name,
      namespace: cp.metadata.namespace,
    });
    const kubeconfig = Buffer.from(admin.data?.[SECRET_KEYS.kubeconfig] ?? '', 'base64').toString();
    const kc = guestKubeConfig(kubeconfig);
    const version = (await kc.makeApiClient(k8s.VersionApi).getCode()).gitVersion;
    return { kubeconfig, version, server: new URL(kc.getCurrentCluster()?.server ?? 'https://127.0.0.1:443') };
  }

  async #publishKubeconfig(namespace: string, cluster: string, kubeconfig: string): Promise<void> {
    await this.#applier.apply({
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: kubeconfigSecretName(cluster), namespace, labels: { [LABELS.capiClusterName]: cluster } },
      type: 'cluster.x-k8s.io/secret',
      stringData: { [SECRET_KEYS.kubeconfig]: kubeconfig },
    } as k8s.KubernetesObject);
  }

  async #publishEndpoint(cp: LocalControlPlane, endpoint: { host: string; port: number }): Promise<void> {
    const current = cp.spec.controlPlaneEndpoint;
    if (current?.host === endpoint.host && current.port === endpoint.port) return;
    await this.#patch(cp, 'spec', { spec: { controlPlaneEndpoint: endpoint } });
  }

  async #patch(cp: LocalControlPlane, part: 'spec' | 'status', body: object): Promise<void> {
    const params = {
      group: 'controlplane.kindling.dev',
      version: 'v1alpha1',
      namespace: cp.metadata.namespace,
      plural: 'localcontrolplanes',
      name: cp.metadata.name,
      body,
    };
    const merge = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch);
    if (part === 'status') await this.ctx.custom.patchNamespacedCustomObjectStatus(params, merge);
    else await this.ctx.custom.patchNamespacedCustomObject(params, merge);
  }
}
