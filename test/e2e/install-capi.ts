/**
 * The Cluster API core manager as a Pod of the node (issue 25), for install.test.ts: a Deployment in
 * `capi-system` labelled as Cluster API's own manifests label it (deploy/base's NetworkPolicy for the extension
 * names those labels), its webhooks behind the `capi-webhook-service` Service with a certificate for that name,
 * so the apiserver calls them through the Service and the manager resolves Kindling's extension by its Service
 * name, as in production. Its image is the test bed's binary (test/bed/node/build.sh); its configuration is
 * the test bed's own (capi.ts): the same feature gates.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import * as k8s from '#k8s';
import { createApplier } from '../../support/src/apply.js';
import { parseManifests } from '../../support/src/manifests.js';
import { loadCertificateAuthority } from '../bed/src/pki.js';
import { capiCrdDir } from '../bed/src/testbed.js';
import { eventually, type Cluster } from '../bed/src/index.js';
import { podMetrics, SYSTEM_NS } from './install.js';

const CAPI_NS = 'capi-system';
const NAME = 'capi-controller-manager';
const WEBHOOK_SERVICE = 'capi-webhook-service';
const LABELS = { 'cluster.x-k8s.io/provider': 'cluster-api', 'control-plane': 'controller-manager' };
const FEATURE_GATES = 'RuntimeSDK=true,InPlaceUpdates=true,MachineTaintPropagation=true';

type Manifest = k8s.KubernetesObject & Record<string, unknown>;

interface WebhookEntry {
  clientConfig: { service?: { path?: string } };
}

/** Cluster API's webhook configurations with every service reference on the manager's Service and its CA. */
async function serviceWebhooks(caPem: string): Promise<Manifest[]> {
  const text = await readFile(join(capiCrdDir(), '..', 'cluster-api-webhooks.yaml'), 'utf8');
  return parseManifests(text, 'cluster-api-webhooks.yaml').map((config) => {
    const webhooks = (config as unknown as { webhooks: WebhookEntry[] }).webhooks.map((w) => ({
      ...w,
      clientConfig: {
        service: { namespace: CAPI_NS, name: WEBHOOK_SERVICE, path: w.clientConfig.service?.path ?? '/' },
        caBundle: Buffer.from(caPem).toString('base64'),
      },
    }));
    return { ...config, metadata: { name: `capi-${config.metadata?.name ?? ''}` }, webhooks };
  });
}

function managerDeployment(image: string): Manifest {
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name: NAME, namespace: CAPI_NS, labels: LABELS },
    spec: {
      replicas: 1,
      selector: { matchLabels: LABELS },
      template: {
        metadata: { labels: LABELS },
        spec: {
          serviceAccountName: 'capi-manager',
          containers: [
            {
              name: 'manager',
              image,
              imagePullPolicy: 'Never',
              args: ['--leader-elect', '--diagnostics-address=0', `--feature-gates=${FEATURE_GATES}`, '--v=1'],
              ports: [{ name: 'webhook-server', containerPort: 9443 }],
              readinessProbe: { httpGet: { path: '/readyz', port: 9440 }, periodSeconds: 2 },
              securityContext: { runAsNonRoot: true, readOnlyRootFilesystem: true, allowPrivilegeEscalation: false },
              volumeMounts: [{ name: 'cert', mountPath: '/tmp/k8s-webhook-server/serving-certs', readOnly: true }],
            },
          ],
          volumes: [{ name: 'cert', secret: { secretName: `${WEBHOOK_SERVICE}-cert` } }],
        },
      },
    },
  };
}

/** Everything but the webhook configurations, which wait for the manager to be ready (their policy is Fail). */
async function managerManifests(mgmt: Cluster, image: string): Promise<Manifest[]> {
  const ca = await loadCertificateAuthority(mgmt.ca);
  const serving = await ca.issue({
    commonName: WEBHOOK_SERVICE,
    dnsNames: [`${WEBHOOK_SERVICE}.${CAPI_NS}.svc`, `${WEBHOOK_SERVICE}.${CAPI_NS}.svc.cluster.local`],
    usage: 'server',
  });
  const meta = (name: string): k8s.V1ObjectMeta => ({ name, namespace: CAPI_NS });
  return [
    { apiVersion: 'v1', kind: 'Namespace', metadata: { name: CAPI_NS } },
    { apiVersion: 'v1', kind: 'ServiceAccount', metadata: meta('capi-manager') },
    // Cluster API's own ClusterRole is generated from its code's markers, which the test bed does not build:
    // the manager is cluster-admin here. Kindling's aggregated rules are proven by test/deploy instead.
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRoleBinding',
      metadata: { name: 'capi-manager' },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'cluster-admin' },
      subjects: [{ kind: 'ServiceAccount', name: 'capi-manager', namespace: CAPI_NS }],
    },
    {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: meta(`${WEBHOOK_SERVICE}-cert`),
      type: 'kubernetes.io/tls',
      stringData: { 'tls.crt': serving.certPem, 'tls.key': serving.keyPem },
    },
    {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: meta(WEBHOOK_SERVICE),
      spec: { selector: LABELS, ports: [{ port: 443, targetPort: 'webhook-server' }] },
    },
    managerDeployment(image),
  ];
}

/** Installs the manager, waits for its Pod to be ready, then registers its webhooks. */
export async function installCapiManager(mgmt: Cluster, image: string): Promise<void> {
  const applier = createApplier(mgmt.kubeConfig, 'kindling-install');
  for (const obj of await managerManifests(mgmt, image)) await applier.apply(obj);
  const apps = mgmt.kubeConfig.makeApiClient(k8s.AppsV1Api);
  await eventually(
    'the Cluster API manager ready',
    async () => {
      const d = await apps.readNamespacedDeployment({ name: NAME, namespace: CAPI_NS });
      return (d.status?.readyReplicas ?? 0) >= 1;
    },
    3 * 60_000,
    1000,
  );
  for (const config of await serviceWebhooks(mgmt.ca.certPem)) await applier.apply(config);
}

interface ExtensionConfigView {
  spec?: { clientConfig?: { caBundle?: string } };
  status?: { handlers?: { name: string }[]; conditions?: { type: string; status: string; message?: string }[] };
}

/** The ExtensionConfig once Cluster API has injected its CA and discovered its handlers. */
export async function discoveredExtension(mgmt: Cluster, name: string): Promise<ExtensionConfigView> {
  const custom = mgmt.kubeConfig.makeApiClient(k8s.CustomObjectsApi);
  return eventually(
    `ExtensionConfig ${name} discovered`,
    async () => {
      const config = (await custom.getClusterCustomObject({
        group: 'runtime.cluster.x-k8s.io',
        version: 'v1beta2',
        plural: 'extensionconfigs',
        name,
      })) as ExtensionConfigView;
      const discovered = config.status?.conditions?.find((c) => c.type === 'Discovered');
      if (discovered?.status !== 'True') throw new Error(`not discovered: ${discovered?.message ?? 'no condition'}`);
      return config;
    },
    3 * 60_000,
    1000,
  );
}

const HOOK_CALLS = /^kindling_extension_hook_requests_total\{([^}]*)\} (\d+)$/gm;

/**
 * The extension's hook calls answered by the inplace-upgrader's Pods, from their own metrics, summed by
 * `<hook> <status>`: whatever reached them came through the ExtensionConfig's Service, the only address of the
 * extension the Cluster API manager knows.
 */
export async function extensionHookCalls(mgmt: Cluster): Promise<Map<string, number>> {
  const { items } = await mgmt.kubeConfig.makeApiClient(k8s.CoreV1Api).listNamespacedPod({
    namespace: SYSTEM_NS,
    labelSelector: 'app.kubernetes.io/name=kindling-inplace-upgrader',
  });
  const calls = new Map<string, number>();
  for (const pod of items) {
    const metrics = await podMetrics(pod.status?.podIP ?? '').catch(() => '');
    for (const [, labels = '', count] of metrics.matchAll(HOOK_CALLS)) {
      const hook = /hook="([^"]*)"/.exec(labels)?.[1];
      const status = /status="([^"]*)"/.exec(labels)?.[1];
      const key = `${hook} ${status}`;
      calls.set(key, (calls.get(key) ?? 0) + Number(count));
    }
  }
  return calls;
}
