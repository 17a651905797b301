/**
 * Least privilege in the local environment: every Kindling component runs with its own ServiceAccount's token
 * and exactly the RBAC of deploy/ (rendered from the local overlay with the test bed's kubectl), never with
 * the admin certificate. Tokens come from the TokenRequest API and are requested again at every start, so a
 * resumed environment never runs on an expired one.
 */
import { execFile } from 'node:child_process';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import * as k8s from '#k8s';
import { LABELS } from '../../api/src/keys.js';
import { createApplier } from '../../support/src/apply.js';
import { parseManifests } from '../../support/src/manifests.js';
import { testbedBinary, type Cluster } from '../../test/bed/src/index.js';
import { SIMULATION } from '../../test/bed/src/keys.js';

export const DEPLOY_BASE = fileURLToPath(new URL('../../../deploy/base', import.meta.url));
export const LOCAL_OVERLAY = fileURLToPath(new URL('../../../deploy/overlays/local', import.meta.url));
export const KINDLING_NAMESPACE = 'kindling-system';
/** What the local environment needs of a rendered overlay: the namespace and the RBAC, nothing that runs. */
const RBAC_KINDS = new Set(['Namespace', 'ServiceAccount', 'ClusterRole', 'ClusterRoleBinding', 'Role', 'RoleBinding']);
/** Outlives any local session; a new token is requested at each start anyway. */
const TOKEN_SECONDS = 7 * 24 * 3600;

/** `kubectl kustomize <dir>` with the test bed's kubectl, parsed. */
export async function renderKustomization(dir: string): Promise<k8s.KubernetesObject[]> {
  const { stdout } = await promisify(execFile)(testbedBinary('kubectl'), ['kustomize', dir], {
    maxBuffer: 16 * 1024 * 1024,
  });
  return parseManifests(stdout, `kubectl kustomize ${dir}`);
}

/** The component a Kindling ServiceAccount belongs to: `kindling-drainer` → `drainer`. */
export const componentOf = (serviceAccount: string): string => serviceAccount.replace(/^kindling-/, '');

/** A kubeconfig for the cluster `admin` points at, holding a ServiceAccount token instead of the admin's credentials. */
export function tokenKubeconfig(admin: k8s.KubeConfig, user: string, token: string, namespace?: string): string {
  const cluster = admin.getCurrentCluster();
  if (!cluster) throw new Error('the kubeconfig names no cluster');
  const kc = new k8s.KubeConfig();
  kc.loadFromOptions({
    clusters: [cluster],
    users: [{ name: user, token }],
    contexts: [{ name: user, cluster: cluster.name, user, ...(namespace ? { namespace } : {}) }],
    currentContext: user,
  });
  return kc.exportConfig();
}

/** The tenant namespaces the local overlay grants the components (its Roles' namespaces, bar kindling-system). */
export function tenantsOf(rendered: k8s.KubernetesObject[]): string[] {
  const namespaces = rendered
    .filter((o) => o.kind === 'Role' && o.metadata?.namespace !== KINDLING_NAMESPACE)
    .map((o) => o.metadata?.namespace ?? '');
  return [...new Set(namespaces)].sort();
}

/**
 * Creates the tenant namespace of the environment, labelled as a tenant (LABELS.tenant); it must be one the
 * local overlay lists, or the components, which run under exactly that RBAC, could not act there.
 */
export async function ensureTenantNamespace(mgmt: Cluster, namespace: string): Promise<void> {
  const tenants = tenantsOf(await renderKustomization(LOCAL_OVERLAY));
  if (!tenants.includes(namespace))
    throw new Error(
      `the namespace "${namespace}" is not a tenant of deploy/overlays/local (${tenants.join(', ')}): add it as docs/tenants.md says`,
    );
  await createApplier(mgmt.kubeConfig, SIMULATION.fieldManager).apply({
    apiVersion: 'v1',
    kind: 'Namespace',
    metadata: { name: namespace, labels: { [LABELS.tenant]: 'true' } },
  });
}

/**
 * Applies the local overlay's namespace and RBAC to the management cluster, requests a token for each
 * component's ServiceAccount and writes a kubeconfig per component to `<state>/credentials/<component>.kubeconfig`.
 * Returns component name (`nodepool-controller`, …) → kubeconfig path.
 */
export async function componentKubeconfigs(mgmt: Cluster, stateDir: string): Promise<Record<string, string>> {
  const rbac = (await renderKustomization(LOCAL_OVERLAY)).filter((o) => RBAC_KINDS.has(o.kind ?? ''));
  const applier = createApplier(mgmt.kubeConfig, SIMULATION.fieldManager);
  // Namespace first, then the rest (bindings may name roles applied in the same round: RBAC resolves lazily).
  for (const ns of rbac.filter((o) => o.kind === 'Namespace')) await applier.apply(ns);
  await Promise.all(rbac.filter((o) => o.kind !== 'Namespace').map((o) => applier.apply(o)));
  const dir = join(stateDir, 'credentials');
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const core = mgmt.kubeConfig.makeApiClient(k8s.CoreV1Api);
  const accounts = rbac.filter((o) => o.kind === 'ServiceAccount').map((o) => o.metadata?.name ?? '');
  const entries = await Promise.all(
    accounts.map(async (name) => {
      const request = await core.createNamespacedServiceAccountToken({
        name,
        namespace: KINDLING_NAMESPACE,
        body: { spec: { audiences: [], expirationSeconds: TOKEN_SECONDS } },
      });
      const path = join(dir, `${componentOf(name)}.kubeconfig`);
      await writeFile(
        path,
        tokenKubeconfig(
          mgmt.kubeConfig,
          `system:serviceaccount:${KINDLING_NAMESPACE}:${name}`,
          request.status?.token ?? '',
          KINDLING_NAMESPACE,
        ),
        { mode: 0o600 },
      );
      return [componentOf(name), path] as const;
    }),
  );
  return Object.fromEntries(entries);
}
