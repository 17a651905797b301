/**
 * The Runtime Extension for the tests that play Cluster API's part (re-exported by index.ts):
 * - runExtension: `kindling inplace-upgrader` serving the Runtime Extension as its own process, under a CA
 *   made for the test (the ExtensionConfig's caBundle); killable with SIGKILL and startable again. callHook
 *   calls one of its hooks over HTTPS as the Cluster API manager does.
 * - clusterApiNodePool / beginInPlaceUpdate: what the extension checks a request against: a pool on the
 *   ClusterAPI engine, and a Machine marked for an in-place update with its KindlingConfig at the new hash.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { request } from 'node:https';
import { mkdir, open, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import * as k8s from '#k8s';
import { BOOTSTRAP_API_VERSION, BOOTSTRAP_GROUP_NAME, KINDLING_CONFIG_KIND } from '../../api/src/bootstrap.js';
import { CAPI_API_VERSION, CAPI_GROUP } from '../../api/src/capi.js';
import { ANNOTATIONS, LABELS, userDataSecretName } from '../../api/src/keys.js';
import { NODEPOOL_API_VERSION, NODEPOOL_KIND, type NodePool } from '../../api/src/nodepool.js';
import { createApplier } from '../../support/src/apply.js';
import { createCertificateAuthority } from '../../test/bed/src/pki.js';
import { freePort, waitForPort } from '../../test/bed/src/index.js';
import { KINDLING_BIN, type IgnitionServer } from '../../ignition-server/testing/index.js';
import { HOOKS_API_VERSION } from '../src/extension/hooks.js';

export interface ExtensionFixture {
  /** Base URL of the hooks, for an ExtensionConfig's clientConfig.url. */
  url: string;
  caPem: string;
  /** Its log (JSON lines), kept across restarts. */
  logFile: string;
  /** The running process (a new one after restart()). */
  process(): ChildProcess;
  /** SIGKILLs the process and starts a new one on the same port. */
  restart(): Promise<void>;
  stop(): Promise<void>;
}

/**
 * `kindling inplace-upgrader --extension-address …` against the management cluster, as its own process (no
 * leader election; the MachineSet upgrader runs too, and finds no InPlace MachineSet unless a test makes one).
 */
export async function runExtension(opts: {
  kubeconfigPath: string;
  /** The tenant namespaces served (--namespaces). */
  namespaces: string;
  dir: string;
  ignition: Pick<IgnitionServer, 'url' | 'caFile'>;
  retryAfter?: string;
}): Promise<ExtensionFixture> {
  await mkdir(opts.dir, { recursive: true });
  const ca = await createCertificateAuthority('extension serving CA');
  const serving = await ca.issue({
    commonName: '127.0.0.1',
    ipAddresses: ['127.0.0.1'],
    dnsNames: ['localhost'],
    usage: 'server',
  });
  const file = (name: string): string => join(opts.dir, name);
  await Promise.all([writeFile(file('tls.crt'), serving.certPem), writeFile(file('tls.key'), serving.keyPem)]);
  const port = await freePort();
  const args = [
    KINDLING_BIN,
    'inplace-upgrader',
    `--kubeconfig=${opts.kubeconfigPath}`,
    `--namespaces=${opts.namespaces}`,
    '--leader-elect=false',
    `--ignition-url=${opts.ignition.url}`,
    `--ignition-ca-file=${opts.ignition.caFile}`,
    '--agent-image=kindling:test',
    `--extension-address=127.0.0.1:${port}`,
    `--extension-tls-cert-file=${file('tls.crt')}`,
    `--extension-tls-key-file=${file('tls.key')}`,
    `--extension-retry-after=${opts.retryAfter ?? '1s'}`,
    '--log-level=info',
  ];
  let child: ChildProcess | undefined;
  const launch = async (): Promise<void> => {
    const log = await open(file('extension.log'), 'a');
    const started = spawn(process.execPath, args, { stdio: ['ignore', log.fd, log.fd] });
    await log.close();
    child = started;
    const tail = async (): Promise<string> =>
      (await readFile(file('extension.log'), 'utf8')).split('\n').slice(-20).join('\n');
    await waitForPort(
      port,
      {
        name: 'extension',
        get alive() {
          return started.exitCode === null && started.signalCode === null;
        },
        tail: () => '',
      },
      30_000,
    ).catch(async (err: unknown) => {
      throw new Error(`${(err as Error).message}\n${await tail()}`, { cause: err });
    });
  };
  const kill = async (signal: NodeJS.Signals): Promise<void> => {
    const c = child;
    if (!c || c.exitCode !== null || c.signalCode !== null) return;
    await new Promise((resolve) => (c.once('exit', resolve), c.kill(signal)));
  };
  await launch();
  return {
    url: `https://127.0.0.1:${port}`,
    caPem: ca.certPem,
    logFile: file('extension.log'),
    process: () => child as ChildProcess,
    restart: async () => {
      await kill('SIGKILL');
      await launch();
    },
    stop: () => kill('SIGTERM'),
  };
}

/**
 * A NodePool InPlace on the ClusterAPI engine: the only kind of pool whose Machines the extension updates. Its
 * release is the one its token Secrets name, or the ignition server refuses them (ReleaseNotOfPool).
 */
export function clusterApiNodePool(opts: {
  namespace: string;
  pool: string;
  cluster: string;
  release?: string;
}): NodePool {
  return {
    apiVersion: NODEPOOL_API_VERSION,
    kind: NODEPOOL_KIND,
    metadata: { name: opts.pool, namespace: opts.namespace },
    spec: {
      clusterName: opts.cluster,
      replicas: 1,
      release: { image: opts.release ?? 'registry.local/release:test' },
      management: { upgradeType: 'InPlace', inPlace: { engine: 'ClusterAPI', maxSurge: 0, maxUnavailable: 1 } },
      platform: {
        infrastructureTemplateRef: {
          apiGroup: 'infrastructure.kindling.dev',
          kind: 'LocalMachineTemplate',
          name: 'small',
        },
      },
    },
  };
}

/**
 * What Cluster API does before it calls UpdateMachine for a Machine (MachineSet controller, then Machine
 * controller): its KindlingConfig (named as the Machine) moved to `hash`, and the Machine and the config marked
 * update-in-progress. Without the pending-hooks annotation, a running Cluster API manager leaves them as they are.
 */
export async function beginInPlaceUpdate(
  mgmt: k8s.KubeConfig,
  m: { namespace: string; machine: string; pool: string; hash: string },
): Promise<void> {
  const apply = createApplier(mgmt, 'kindling-test');
  const marked = { [ANNOTATIONS.capiUpdateInProgress]: '' };
  await apply.apply({
    apiVersion: BOOTSTRAP_API_VERSION,
    kind: KINDLING_CONFIG_KIND,
    metadata: { name: m.machine, namespace: m.namespace, annotations: marked },
    spec: { nodePool: m.pool, configHash: m.hash },
  });
  await mgmt.makeApiClient(k8s.CustomObjectsApi).patchNamespacedCustomObject(
    {
      group: CAPI_GROUP,
      version: CAPI_API_VERSION.split('/')[1] ?? '',
      namespace: m.namespace,
      plural: 'machines',
      name: m.machine,
      body: {
        metadata: { annotations: marked },
        spec: {
          bootstrap: { configRef: { apiGroup: BOOTSTRAP_GROUP_NAME, kind: KINDLING_CONFIG_KIND, name: m.machine } },
        },
      },
    },
    k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
  );
}

/** The UpdateMachine request the Machine controller sends for a Machine of a pool: the desired Machine (no
 * status), its InfraMachine and its KindlingConfig at the hash. */
export function updateMachineRequest(m: {
  namespace: string;
  pool: string;
  cluster: string;
  machine: string;
  hash: string;
  version?: string;
}): object {
  return {
    apiVersion: HOOKS_API_VERSION,
    kind: 'UpdateMachineRequest',
    desired: {
      machine: {
        apiVersion: CAPI_API_VERSION,
        kind: 'Machine',
        metadata: {
          name: m.machine,
          namespace: m.namespace,
          labels: { [LABELS.nodePool]: m.pool, [LABELS.capiSetName]: m.pool },
        },
        spec: {
          clusterName: m.cluster,
          bootstrap: {
            dataSecretName: userDataSecretName(m.pool, m.hash),
            configRef: { apiGroup: BOOTSTRAP_GROUP_NAME, kind: KINDLING_CONFIG_KIND, name: m.machine },
          },
          infrastructureRef: { apiGroup: 'infrastructure.kindling.dev', kind: 'LocalMachine', name: m.machine },
          ...(m.version === undefined ? {} : { version: m.version }),
        },
      },
      infrastructureMachine: {
        apiVersion: 'infrastructure.kindling.dev/v1alpha1',
        kind: 'LocalMachine',
        metadata: { name: m.machine, namespace: m.namespace },
        spec: {},
      },
      bootstrapConfig: {
        apiVersion: BOOTSTRAP_API_VERSION,
        kind: KINDLING_CONFIG_KIND,
        metadata: { name: m.machine, namespace: m.namespace },
        spec: { nodePool: m.pool, configHash: m.hash },
      },
    },
  };
}

/** What a hook answered, as far as the tests read it. */
export interface HookAnswer {
  status: string;
  message: string;
  retryAfterSeconds: number;
}

/** POSTs a hook over HTTPS as the Cluster API manager does, trusting only the extension's CA, and times the answer. */
export function callHook(
  ext: Pick<ExtensionFixture, 'url' | 'caPem'>,
  path: string,
  body: object,
): Promise<{ answer: HookAnswer; ms: number }> {
  const started = performance.now();
  return new Promise((resolve, reject) => {
    const req = request(
      new URL(`${path}?timeout=5s`, ext.url),
      { method: 'POST', ca: ext.caPem, timeout: 5_000 },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          if (res.statusCode !== 200)
            return reject(new Error(`HTTP ${res.statusCode}: ${Buffer.concat(chunks).toString()}`));
          resolve({
            answer: JSON.parse(Buffer.concat(chunks).toString()) as HookAnswer,
            ms: performance.now() - started,
          });
        });
      },
    );
    req.on('timeout', () => req.destroy(new Error('no answer in 5 s')));
    req.on('error', reject);
    req.end(JSON.stringify(body));
  });
}
