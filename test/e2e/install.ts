/**
 * Kindling installed as a provider installs it (issue 25), for install.test.ts: the image built by
 * `scripts/image.js` and imported into the node's containerd, what an operator provides before the Pods can
 * start (docs/deploying.md: serving certificates, the signing key, the CA and the allowed registries), and
 * `kubectl apply -k` of the test's overlay (test/e2e/install/), which sets only the image and the tenants.
 */
import { execFile, spawnSync } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import * as k8s from '#k8s';
import { createApplier } from '../../support/src/apply.js';
import { loadCertificateAuthority } from '../bed/src/pki.js';
import { eventually, testbedBinary, type Cluster } from '../bed/src/index.js';
import { NODE_NETWORK, type KubeNode } from '../bed/src/node.js';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const OVERLAY = join(ROOT, 'test', 'e2e', 'install');
export const SYSTEM_NS = 'kindling-system';
export const TENANT_NS = 'tenants';
/** The image tag the overlay names; the upgrade rolls to the next one. */
export const FIRST_TAG = 'install-1';
export const NEXT_TAG = 'install-2';
export const COMPONENTS = ['nodepool-controller', 'ignition-server', 'inplace-upgrader', 'drainer'] as const;
export const IGNITION_SERVICE = `kindling-ignition-server.${SYSTEM_NS}.svc.cluster.local`;

/** Builds Kindling's image with the image script (build only), and imports it into the node's containerd. */
export async function loadKindlingImage(node: KubeNode, tag: string): Promise<void> {
  const archive = join(node.dir, `kindling-${tag}.tar`);
  const built = spawnSync(
    process.execPath,
    [join(ROOT, 'scripts', 'image.js'), '--tag', `kindling:${tag}`, '--no-check', '--save', archive],
    { cwd: ROOT, encoding: 'utf8', stdio: ['ignore', 'inherit', 'pipe'] },
  );
  if (built.status !== 0) throw new Error(`scripts/image.js failed (exit ${built.status}):\n${built.stderr}`);
  await node.importImage(archive);
}

/** `kubectl apply -k`, server-side (one field manager owns what the overlay sets, as for every later apply). */
export async function applyOverlay(mgmt: Cluster, dir = OVERLAY): Promise<string> {
  const { stdout } = await run(testbedBinary('kubectl'), [
    `--kubeconfig=${mgmt.kubeconfigPath}`,
    'apply',
    '--server-side',
    '--field-manager=kindling-install',
    '-k',
    dir,
  ]);
  return stdout;
}

/**
 * What a provider does to roll Kindling to a new tag: the overlay with another image tag (as `kustomize edit set
 * image` would write it), rendered and applied over the installed one.
 */
export async function applyOverlayWithTag(mgmt: Cluster, tag: string): Promise<void> {
  const kubectl = testbedBinary('kubectl');
  const { stdout } = await run(kubectl, ['kustomize', OVERLAY], { maxBuffer: 64 * 1024 * 1024 });
  const file = join(mgmt.dir, `kindling-${tag}.yaml`);
  await writeFile(file, stdout.replaceAll(`kindling:${FIRST_TAG}`, `kindling:${tag}`));
  await run(kubectl, [
    `--kubeconfig=${mgmt.kubeconfigPath}`,
    'apply',
    '--server-side',
    '--field-manager=kindling-install',
    '-f',
    file,
  ]);
}

/** The tenant namespace, labelled as Kindling's tenants are (the ExtensionConfig's namespaceSelector). */
export async function createTenantNamespace(mgmt: Cluster): Promise<void> {
  await createApplier(mgmt.kubeConfig, 'kindling-install').apply({
    apiVersion: 'v1',
    kind: 'Namespace',
    metadata: { name: TENANT_NS, labels: { 'kindling.dev/tenant': 'true' } },
  });
}

/** What docs/deploying.md says to provide before the Pods start, with certificates from the cluster's CA. */
export async function provideOperatorInputs(mgmt: Cluster, allowedRegistries: string): Promise<void> {
  const ca = await loadCertificateAuthority(mgmt.ca);
  const serving = (service: string): ReturnType<typeof ca.issue> =>
    ca.issue({
      commonName: service,
      dnsNames: [`${service}.${SYSTEM_NS}.svc`, `${service}.${SYSTEM_NS}.svc.cluster.local`],
      usage: 'server',
    });
  const ignition = await serving('kindling-ignition-server');
  const extension = await serving('kindling-inplace-extension');
  const signingKey = generateKeyPairSync('ec', { namedCurve: 'P-256' })
    .privateKey.export({ type: 'pkcs8', format: 'pem' })
    .toString();
  const meta = (name: string): k8s.V1ObjectMeta => ({ name, namespace: SYSTEM_NS });
  const tls = 'kubernetes.io/tls';
  const objects = [
    { kind: 'Secret', metadata: meta('kindling-ignition-serving-cert'), type: tls, stringData: pair(ignition) },
    {
      kind: 'Secret',
      metadata: meta('kindling-extension-serving-cert'),
      type: tls,
      stringData: { ...pair(extension), 'ca.crt': mgmt.ca.certPem },
    },
    { kind: 'Secret', metadata: meta('kindling-ignition-signing-key'), stringData: { 'signing-key.pem': signingKey } },
    { kind: 'ConfigMap', metadata: meta('kindling-ignition-ca'), data: { 'ca.crt': mgmt.ca.certPem } },
    {
      kind: 'ConfigMap',
      metadata: meta('kindling-ignition-server'),
      data: { 'allowed-registries': allowedRegistries },
    },
  ];
  const applier = createApplier(mgmt.kubeConfig, 'kindling-install');
  for (const o of objects) await applier.apply({ apiVersion: 'v1', ...o });
}

const pair = (p: { certPem: string; keyPem: string }): Record<string, string> => ({
  'tls.crt': p.certPem,
  'tls.key': p.keyPem,
});

/** Available, with every replica on the current template (and on `image` when given) and ready. */
function rolledOut(d: k8s.V1Deployment, image?: string): boolean {
  const { replicas = 1, template } = d.spec ?? { template: {} };
  const { conditions = [], readyReplicas, updatedReplicas, replicas: current } = d.status ?? {};
  const available = conditions.some((c) => c.type === 'Available' && c.status === 'True');
  const onImage = image === undefined || template.spec?.containers[0]?.image === image;
  const counts = [readyReplicas, updatedReplicas, current];
  return available && onImage && counts.every((n) => n === replicas);
}

/** Waits until every component's Deployment is Available with all its replicas updated and ready. */
export async function waitAvailable(mgmt: Cluster, timeoutMs: number, image?: string): Promise<void> {
  const apps = mgmt.kubeConfig.makeApiClient(k8s.AppsV1Api);
  await eventually(
    'every Kindling Deployment Available',
    async () => {
      const { items } = await apps.listNamespacedDeployment({ namespace: SYSTEM_NS });
      const notReady = items.filter((d) => !rolledOut(d, image));
      if (items.length !== COMPONENTS.length || notReady.length > 0)
        throw new Error(`not Available: ${notReady.map((d) => d.metadata?.name).join(', ')}`);
      return true;
    },
    timeoutMs,
    1000,
  );
}

/** Why a component's Pods are not ready: each container's waiting/terminated reason, for failure messages. */
export async function podProblems(mgmt: Cluster): Promise<string> {
  const core = mgmt.kubeConfig.makeApiClient(k8s.CoreV1Api);
  const { items } = await core.listNamespacedPod({ namespace: SYSTEM_NS });
  return items.map(describePod).join('\n');
}

function describePod(pod: k8s.V1Pod): string {
  const { phase, containerStatuses = [] } = pod.status ?? {};
  const states = containerStatuses.map((c) => JSON.stringify({ ready: c.ready, state: c.state, last: c.lastState }));
  return `${pod.metadata?.name ?? '?'}: ${phase ?? '?'} ${states.join(' ')}`;
}

/** A Pod's metrics on the ops port, fetched from inside the node's namespace (the machine has no route to Pods). */
export async function podMetrics(ip: string): Promise<string> {
  const { stdout } = await run('nsenter', [
    `--net=/run/netns/${NODE_NETWORK.netns}`,
    'curl',
    '-sf',
    '--max-time',
    '2',
    `http://${ip}:8080/metrics`,
  ]);
  return stdout;
}
