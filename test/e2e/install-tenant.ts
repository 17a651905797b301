/**
 * A tenant of the installed Kindling (issue 25), for install.test.ts: its guest apiserver and the release
 * registry serve on the machine's end of the node's veth (where Pods reach them, as they reach a provider's
 * endpoints), and its hosts boot as the local providers boot them (local/src/providers) — but from inside the
 * node's network namespace, with the cluster DNS as their resolver, so they fetch Ignition from the ignition
 * Service's name like a provider's hosts on the cluster's network. Nothing of this leaves the machine: the
 * namespace has no default route, and every address it reaches is one this test made.
 */
import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as k8s from '#k8s';
import { LABELS } from '../../api/src/keys.js';
import { createApplier } from '../../support/src/apply.js';
import { parseManifests } from '../../support/src/manifests.js';
import { createMissing, sampleReleases, startRegistry, type LocalRegistry } from '../../local/src/environment.js';
import { LOCAL_CRD_DIR } from '../../local/src/crds.js';
import { installCrds, ManagedProcess, startCluster, type Cluster } from '../bed/src/index.js';
import { NODE_NETWORK } from '../bed/src/node.js';
import { TENANT_NS } from './install.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const PROVIDERS = join(ROOT, 'dist', 'local', 'src', 'providers', 'main.js');
/** The tenant's pool on the MachineSet in-place engine, which Kindling updates itself. */
export const POOL = 'inplace';
/** The tenant's pool on the ClusterAPI in-place engine: Cluster API updates it, calling the extension. */
export const CAPI_POOL = 'capi';

export interface ReleaseRegistry {
  registry: LocalRegistry;
  /** version → image reference on the registry. */
  releases: Record<string, string>;
}

/** The sample releases on a registry the ignition server's Pods reach (its certificate from the cluster CA). */
export async function startReleaseRegistry(mgmt: Cluster, stateDir: string): Promise<ReleaseRegistry> {
  const registry = await startRegistry(stateDir, mgmt, NODE_NETWORK.hostAddress);
  return { registry, releases: await sampleReleases(registry, mgmt.ca.certPem) };
}

/** The guest control plane as the local environment runs it, serving where the node's Pods and hosts reach it. */
export function startGuest(): Promise<Cluster> {
  return startCluster({
    name: 'guest',
    kwok: true,
    nodeAuth: true,
    scheduler: true,
    listenAddress: NODE_NETWORK.hostAddress,
  });
}

/**
 * The local providers (LocalMachine, LocalControlPlane, the hosts' kubelets and agents) in the node's network
 * namespace, in a mount namespace of their own where /etc/resolv.conf names the cluster DNS, as a Pod's does:
 * Ignition and the agents resolve Service names through CoreDNS and reach them through kube-proxy.
 */
export async function startHosts(mgmt: Cluster, stateDir: string): Promise<ManagedProcess> {
  await installCrds(mgmt, LOCAL_CRD_DIR);
  await mkdir(stateDir, { recursive: true });
  const resolvConf = join(stateDir, 'resolv.conf');
  await writeFile(
    resolvConf,
    `nameserver ${NODE_NETWORK.dnsAddress}\nsearch svc.cluster.local cluster.local\noptions ndots:5\n`,
  );
  return new ManagedProcess({
    name: 'local-providers',
    command: 'unshare',
    args: [
      '--mount',
      '--propagation=private',
      'sh',
      '-c',
      'mount --bind "$1" /etc/resolv.conf && shift && exec nsenter --net="$@"',
      'sh',
      resolvConf,
      `/run/netns/${NODE_NETWORK.netns}`,
      process.execPath,
      PROVIDERS,
      `--kubeconfig=${mgmt.kubeconfigPath}`,
      `--state-dir=${stateDir}`,
    ],
    logFile: join(stateDir, 'local-providers.log'),
  });
}

/** The guest's admin kubeconfig (what the LocalControlPlane publishes), then the tenant: Cluster and pool. */
export async function applyTenant(mgmt: Cluster, guest: Cluster, release: string): Promise<void> {
  await createApplier(mgmt.kubeConfig, 'kindling-install').apply({
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: { name: 'guest-admin', namespace: TENANT_NS },
    stringData: { value: guest.kubeconfigYaml },
  } as k8s.KubernetesObject);
  const text = (await readFile(join(ROOT, 'test', 'e2e', 'install-tenant.yaml'), 'utf8'))
    .replaceAll('${NAMESPACE}', TENANT_NS)
    .replaceAll('${RELEASE}', release);
  await createMissing(mgmt.kubeConfig, parseManifests(text, 'install-tenant.yaml'));
}

/** A file of every host of the pool (undefined where a host lacks it), by host name. */
export async function hostFiles(stateDir: string, path: string, pool = POOL): Promise<Map<string, string | undefined>> {
  const dir = join(stateDir, 'hosts', TENANT_NS);
  const hosts = (await readdir(dir).catch(() => [])).filter((h) => h.startsWith(`${pool}-`)).sort();
  const files = await Promise.all(hosts.map((h) => readFile(join(dir, h, path), 'utf8').catch(() => undefined)));
  return new Map(hosts.map((h, i) => [h, files[i]]));
}

interface PoolView {
  spec: { replicas?: number; release: { image: string } };
  status?: { replicas?: number; conditions?: { type: string; status: string; reason?: string; message?: string }[] };
}

async function readPool(mgmt: Cluster, pool: string): Promise<PoolView> {
  const custom = mgmt.kubeConfig.makeApiClient(k8s.CustomObjectsApi);
  return (await custom.getNamespacedCustomObject({
    group: 'kindling.dev',
    version: 'v1beta1',
    namespace: TENANT_NS,
    plural: 'nodepools',
    name: pool,
  })) as PoolView;
}

/** Ready, or why not: every condition of the pool that is not True, for failure messages. */
export async function poolReady(mgmt: Cluster, name = POOL): Promise<true> {
  const pool = await readPool(mgmt, name);
  const ready = pool.status?.conditions?.find((c) => c.type === 'Ready');
  if (ready?.status === 'True') return true;
  throw new Error(`pool ${name} not Ready ${notReady(pool)}`);
}

function notReady(pool: PoolView): string {
  const problems = (pool.status?.conditions ?? []).filter((c) => c.status !== 'True');
  const conditions = problems.map((c) => `${c.type} ${c.reason ?? ''}: ${c.message ?? ''}`).join('; ');
  return `(${pool.status?.replicas ?? 0}/${pool.spec.replicas ?? '?'}): ${conditions}`;
}

export async function patchPool(mgmt: Cluster, body: object, pool = POOL): Promise<void> {
  await mgmt.kubeConfig
    .makeApiClient(k8s.CustomObjectsApi)
    .patchNamespacedCustomObject(
      { group: 'kindling.dev', version: 'v1beta1', namespace: TENANT_NS, plural: 'nodepools', name: pool, body },
      k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
    );
}

export interface PoolMachine {
  uid: string;
  upToDate: boolean;
}

/** A pool's Machines (not being deleted): their UIDs and whether Cluster API counts them UpToDate. */
export async function poolMachines(mgmt: Cluster, pool: string): Promise<PoolMachine[]> {
  const { items } = (await mgmt.kubeConfig.makeApiClient(k8s.CustomObjectsApi).listNamespacedCustomObject({
    group: 'cluster.x-k8s.io',
    version: 'v1beta2',
    namespace: TENANT_NS,
    plural: 'machines',
    labelSelector: `${LABELS.nodePool}=${pool}`,
  })) as { items: MachineView[] };
  return items
    .filter((m) => !m.metadata.deletionTimestamp)
    .map((m) => ({
      uid: m.metadata.uid,
      upToDate: m.status?.conditions?.some((c) => c.type === 'UpToDate' && c.status === 'True') ?? false,
    }));
}

interface MachineView {
  metadata: { uid: string; deletionTimestamp?: string };
  status?: { conditions?: { type: string; status: string }[] };
}
