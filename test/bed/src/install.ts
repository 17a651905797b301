/** Installs CRDs into a test-bed cluster and waits until the apiserver serves them. */
import * as k8s from '#k8s';
import { loadManifests } from '../../../support/src/manifests.js';
import { createApplier } from '../../../support/src/apply.js';
import { CRD_DIR } from '../../../api/src/crd.js';
import { capiCrdDir } from './testbed.js';
import type { Cluster } from './cluster.js';

async function waitEstablished(api: k8s.ApiextensionsV1Api, name: string, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const crd = await api.readCustomResourceDefinition({ name });
    if (crd.status?.conditions?.some((c) => c.type === 'Established' && c.status === 'True')) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`CRD ${name} not Established after ${timeoutMs} ms`);
}

export async function installCrds(cluster: Cluster, path: string): Promise<string[]> {
  const applier = createApplier(cluster.kubeConfig, 'kindling-testbed');
  const crds = (await loadManifests(path)).filter((o) => o.kind === 'CustomResourceDefinition');
  await Promise.all(crds.map((crd) => applier.apply(crd)));
  const api = cluster.kubeConfig.makeApiClient(k8s.ApiextensionsV1Api);
  const names = crds.map((c) => c.metadata?.name ?? '');
  await Promise.all(names.map((n) => waitEstablished(api, n)));
  return names;
}

/** Kindling's own CRDs (api/crds). */
export const installKindlingCrds = (cluster: Cluster): Promise<string[]> => installCrds(cluster, CRD_DIR);

/** The real Cluster API CRDs from the sigs.k8s.io/cluster-api module. */
export const installCapiCrds = (cluster: Cluster): Promise<string[]> => installCrds(cluster, capiCrdDir());
