/**
 * startCluster(): a real Kubernetes control plane on loopback — etcd, kube-apiserver, and optionally
 * kube-controller-manager (garbage collector, namespaces, PDB status, Deployments), kube-scheduler and KWOK
 * (guest Nodes and Pods) — with a generated CA, service-account keys and an admin client certificate.
 * With `nodeAuth` it is a guest control plane as a hosted control plane runs one: kubelets join it with
 * bootstrap tokens and CSRs and are held to their own Node.
 *
 * Given a `dir` that already holds a cluster, it resumes it: same CA and credentials, same etcd data, and the
 * same apiserver address while that port is free (hosts keep the endpoint they were given).
 */
import { mkdir, readFile, writeFile, mkdtemp, rm, access } from 'node:fs/promises';
import { request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateKeyPairSync } from 'node:crypto';
import * as k8s from '#k8s';
import { createCertificateAuthority, type KeyPairPem } from './pki.js';
import { kubeconfigSecretName, LABELS, SECRET_KEYS } from '../../../api/src/keys.js';
import { ManagedProcess } from './process.js';
import { keptPort } from './ports.js';
import { KWOK_STAGES_FILE, testbedBinary } from './testbed.js';
import { treeRssBytes } from './memory.js';

export interface ClusterOptions {
  /** Name of the cluster; for a guest cluster, the Cluster API Cluster name. */
  name: string;
  /** State folder; a temporary one (removed by stop()) when absent. Reused when it already holds a cluster. */
  dir?: string;
  /** Run kube-controller-manager (default true). */
  controllerManager?: boolean;
  /** Run KWOK so Nodes and Pods come alive (default false). */
  kwok?: boolean;
  /** Management cluster in which to write the CAPI kubeconfig Secret `<name>-kubeconfig`. */
  management?: { cluster: Cluster; namespace: string };
  /** Audit every request at Metadata level (who, verb, resource, answer code) to `<dir>/audit.log`. */
  audit?: boolean;
  /** Admission plugins enabled besides the defaults (e.g. OwnerReferencesPermissionEnforcement, as in production). */
  admissionPlugins?: string[];
  /**
   * A guest control plane as a hosted control plane runs it: bootstrap-token authentication, `Node,RBAC`
   * authorization and the NodeRestriction admission plugin; the controller-manager signs CSRs with the cluster
   * CA (csrsigning), runs csrapproving, csrcleaner and tokencleaner. Nothing binds a bootstrap group to an
   * auto-approval role, so csrapproving approves no bootstrap CSR by itself: any approval is someone's on purpose.
   */
  nodeAuth?: boolean;
  /** Run the real kube-scheduler (no leader election, no serving port), so Pods without a nodeName land, and the
   * controller-manager's nodelifecycle, which lifts the not-ready taint of a new Node once KWOK makes it Ready
   * (a controller-manager is needed: the default). */
  scheduler?: boolean;
  /**
   * A management cluster with a real node (node.ts): the apiserver serves on `address` (one the pods can reach)
   * instead of loopback, and advertises it as the `kubernetes` Service's endpoint; Pods get ServiceAccount
   * tokens and the cluster CA; EndpointSlices are kept for Services.
   */
  podNetwork?: { address: string };
  /**
   * Serve on this address instead of loopback, nothing else changed: a guest apiserver that the node's Pods and
   * hosts (node.ts) reach, as they reach a hosted control plane's endpoint.
   */
  listenAddress?: string;
}

export interface Cluster {
  readonly name: string;
  readonly dir: string;
  readonly server: string;
  readonly kubeconfigPath: string;
  /** Kubeconfig YAML with an admin (system:masters) client certificate. */
  readonly kubeconfigYaml: string;
  readonly kubeConfig: k8s.KubeConfig;
  readonly ca: KeyPairPem;
  /** The audit log (JSON lines), when started with `audit`. */
  readonly auditLogPath?: string;
  readonly processes: readonly ManagedProcess[];
  /** Resident memory of every process of this cluster, in bytes. */
  rssBytes(): number;
  /** Stops every process; leaves no process or port behind. Idempotent. */
  stop(): Promise<void>;
}

interface Pki {
  ca: KeyPairPem;
  serving: KeyPairPem;
  admin: KeyPairPem;
  saPublicPem: string;
  saPrivatePem: string;
}

async function exists(path: string): Promise<boolean> {
  return access(path).then(
    () => true,
    () => false,
  );
}

async function loadOrCreatePki(dir: string, address?: string): Promise<Pki> {
  const file = join(dir, 'pki.json');
  if (await exists(file)) return JSON.parse(await readFile(file, 'utf8')) as Pki;
  const ca = await createCertificateAuthority('kindling-testbed-ca');
  const serving = await ca.issue({
    commonName: 'kube-apiserver',
    dnsNames: ['localhost', 'kubernetes', 'kubernetes.default', 'kubernetes.default.svc'],
    ipAddresses: ['127.0.0.1', '10.0.0.1', ...(address ? [address] : [])],
    usage: 'server',
  });
  const admin = await ca.issue({ commonName: 'kindling-admin', organizations: ['system:masters'], usage: 'client' });
  const sa = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  const pki: Pki = {
    ca: { certPem: ca.certPem, keyPem: ca.keyPem },
    serving,
    admin,
    saPublicPem: sa.publicKey.export({ type: 'spki', format: 'pem' }).toString(),
    saPrivatePem: sa.privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
  };
  await writeFile(file, JSON.stringify(pki), { mode: 0o600 });
  return pki;
}

async function writePkiFiles(dir: string, pki: Pki): Promise<Record<string, string>> {
  const files: Record<string, string> = {
    caCert: join(dir, 'ca.crt'),
    caKey: join(dir, 'ca.key'),
    servingCert: join(dir, 'apiserver.crt'),
    servingKey: join(dir, 'apiserver.key'),
    saPub: join(dir, 'sa.pub'),
    saKey: join(dir, 'sa.key'),
  };
  const contents: Record<string, string> = {
    caCert: pki.ca.certPem,
    caKey: pki.ca.keyPem,
    servingCert: pki.serving.certPem,
    servingKey: pki.serving.keyPem,
    saPub: pki.saPublicPem,
    saKey: pki.saPrivatePem,
  };
  await Promise.all(Object.entries(files).map(([k, f]) => writeFile(f, contents[k] ?? '', { mode: 0o600 })));
  return files;
}

export function kubeconfigFor(name: string, server: string, caPem: string, client: KeyPairPem): string {
  const b64 = (s: string): string => Buffer.from(s).toString('base64');
  return [
    'apiVersion: v1',
    'kind: Config',
    `clusters:\n- name: ${name}\n  cluster:\n    server: ${server}\n    certificate-authority-data: ${b64(caPem)}`,
    `users:\n- name: ${name}-admin\n  user:\n    client-certificate-data: ${b64(client.certPem)}\n    client-key-data: ${b64(client.keyPem)}`,
    `contexts:\n- name: ${name}\n  context:\n    cluster: ${name}\n    user: ${name}-admin`,
    `current-context: ${name}`,
    '',
  ].join('\n');
}

/** Polls an HTTPS health endpoint of the apiserver until it answers 200, or the process dies. */
async function waitHealthy(url: string, pki: Pki, proc: ManagedProcess, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (!proc.alive) throw new Error(`${proc.name} exited while starting:\n${proc.tail()}`);
    const status = await new Promise<number>((resolve) => {
      const req = request(
        url,
        { ca: pki.ca.certPem, cert: pki.admin.certPem, key: pki.admin.keyPem, timeout: 2000 },
        (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        },
      );
      req.on('error', () => resolve(0));
      req.on('timeout', () => req.destroy());
      req.end();
    });
    if (status === 200) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${proc.name} not healthy at ${url} after ${timeoutMs} ms:\n${proc.tail()}`);
}

interface Ports {
  etcdClient: number;
  etcdPeer: number;
  apiserver: number;
}

function startEtcd(dir: string, ports: Ports): ManagedProcess {
  const client = `http://127.0.0.1:${ports.etcdClient}`;
  return new ManagedProcess({
    name: 'etcd',
    command: testbedBinary('etcd'),
    args: [
      `--data-dir=${join(dir, 'etcd')}`,
      `--listen-client-urls=${client}`,
      `--advertise-client-urls=${client}`,
      `--listen-peer-urls=http://127.0.0.1:${ports.etcdPeer}`,
      `--initial-advertise-peer-urls=http://127.0.0.1:${ports.etcdPeer}`,
      `--initial-cluster=default=http://127.0.0.1:${ports.etcdPeer}`,
      '--unsafe-no-fsync',
      // Lean: a small backend quota and frequent compaction keep a test cluster's memory low.
      '--quota-backend-bytes=1073741824',
      '--snapshot-count=5000',
      '--log-level=warn',
    ],
    logFile: join(dir, 'etcd.log'),
  });
}

const AUDIT_POLICY = JSON.stringify({
  apiVersion: 'audit.k8s.io/v1',
  kind: 'Policy',
  omitStages: ['RequestReceived'],
  rules: [{ level: 'Metadata' }],
});

/** kube-apiserver flags of the optional features (audit log, extra admission plugins, node authentication). */
async function optionalApiserverArgs(dir: string, opts: ClusterOptions): Promise<string[]> {
  const args: string[] = [];
  if (opts.audit) {
    const policy = join(dir, 'audit-policy.json');
    await writeFile(policy, AUDIT_POLICY);
    args.push(
      `--audit-policy-file=${policy}`,
      `--audit-log-path=${join(dir, 'audit.log')}`,
      '--audit-log-format=json',
      '--audit-log-mode=blocking',
    );
  }
  const plugins = [...(opts.nodeAuth ? ['NodeRestriction'] : []), ...(opts.admissionPlugins ?? [])];
  if (plugins.length) args.push(`--enable-admission-plugins=${[...new Set(plugins)].join(',')}`);
  args.push(opts.nodeAuth ? '--authorization-mode=Node,RBAC' : '--authorization-mode=RBAC');
  if (opts.nodeAuth) args.push('--enable-bootstrap-token-auth=true');
  return args;
}

/** Where the apiserver serves: the Pods' address, else the one asked for, else loopback. */
const servingAddress = (opts: ClusterOptions): string | undefined => opts.podNetwork?.address ?? opts.listenAddress;

/** The apiserver flags that differ when Pods run against it (see ClusterOptions.podNetwork). */
function addressArgs(opts: ClusterOptions): string[] {
  const address = opts.podNetwork?.address;
  if (address === undefined) {
    const listen = opts.listenAddress ?? '127.0.0.1';
    // No token controller mounts default tokens; components ask for theirs with the TokenRequest API.
    return [
      `--bind-address=${listen}`,
      `--advertise-address=${listen}`,
      '--disable-admission-plugins=ServiceAccount',
      '--endpoint-reconciler-type=none',
    ];
  }
  return [`--bind-address=${address}`, `--advertise-address=${address}`, '--endpoint-reconciler-type=lease'];
}

function startApiserver(dir: string, ports: Ports, files: Record<string, string>, extraArgs: string[]): ManagedProcess {
  return new ManagedProcess({
    name: 'kube-apiserver',
    command: testbedBinary('kube-apiserver'),
    args: [
      `--etcd-servers=http://127.0.0.1:${ports.etcdClient}`,
      `--secure-port=${ports.apiserver}`,
      `--tls-cert-file=${files.servingCert}`,
      `--tls-private-key-file=${files.servingKey}`,
      `--client-ca-file=${files.caCert}`,
      `--cert-dir=${join(dir, 'apiserver-certs')}`,
      '--service-cluster-ip-range=10.0.0.0/24',
      '--allow-privileged=true',
      `--service-account-key-file=${files.saPub}`,
      `--service-account-signing-key-file=${files.saKey}`,
      '--profiling=false',
      '--enable-priority-and-fairness=false',
      '--v=1',
      ...extraArgs,
    ],
    logFile: join(dir, 'kube-apiserver.log'),
  });
}

const CONTROLLERS = ['garbagecollector', 'namespace', 'disruption', 'deployment', 'replicaset', 'serviceaccount'];
/** What a hosted control plane adds for kubelets that join by TLS bootstrap. */
const NODE_AUTH_CONTROLLERS = ['csrsigning', 'csrapproving', 'csrcleaner', 'tokencleaner'];

function startControllerManager(
  dir: string,
  kubeconfigPath: string,
  files: Record<string, string>,
  opts: ClusterOptions,
): ManagedProcess {
  const nodeAuth = opts.nodeAuth ?? false;
  // nodelifecycle lifts the not-ready taint admission puts on every new Node once it is Ready, or nothing lands.
  const controllers = [
    ...CONTROLLERS,
    ...(nodeAuth ? NODE_AUTH_CONTROLLERS : []),
    ...(opts.scheduler ? ['nodelifecycle'] : []),
    // Services' endpoints for kube-proxy and CoreDNS; the CA every Pod's ServiceAccount volume projects.
    ...(opts.podNetwork ? ['endpointslice', 'root-ca-cert-publisher'] : []),
  ];
  const signing = nodeAuth
    ? [`--cluster-signing-cert-file=${files.caCert}`, `--cluster-signing-key-file=${files.caKey}`]
    : [];
  return new ManagedProcess({
    name: 'kube-controller-manager',
    command: testbedBinary('kube-controller-manager'),
    args: [
      `--kubeconfig=${kubeconfigPath}`,
      `--controllers=${controllers.join(',')}`,
      ...signing,
      '--leader-elect=false',
      '--secure-port=0',
      `--root-ca-file=${files.caCert}`,
      `--service-account-private-key-file=${files.saKey}`,
      '--use-service-account-credentials=false',
      '--concurrent-gc-syncs=5',
      '--v=1',
    ],
    logFile: join(dir, 'kube-controller-manager.log'),
  });
}

function startScheduler(dir: string, kubeconfigPath: string): ManagedProcess {
  return new ManagedProcess({
    name: 'kube-scheduler',
    command: testbedBinary('kube-scheduler'),
    args: [`--kubeconfig=${kubeconfigPath}`, '--leader-elect=false', '--secure-port=0', '--v=1'],
    logFile: join(dir, 'kube-scheduler.log'),
  });
}

async function startKwok(dir: string, kubeconfigPath: string): Promise<ManagedProcess> {
  return new ManagedProcess({
    name: 'kwok',
    command: testbedBinary('kwok'),
    args: [
      `--kubeconfig=${kubeconfigPath}`,
      `--config=${KWOK_STAGES_FILE}`,
      '--manage-all-nodes=true',
      `--server-address=127.0.0.1:${await keptPort(join(dir, 'kwok-port'), { movable: true })}`,
      '--node-lease-duration-seconds=40',
      '-v=WARN',
    ],
    logFile: join(dir, 'kwok.log'),
  });
}

/** Writes the CAPI-convention `<cluster>-kubeconfig` Secret of a guest cluster into the management cluster. */
export async function writeKubeconfigSecret(
  mgmt: Cluster,
  namespace: string,
  name: string,
  yaml: string,
): Promise<void> {
  const objects = k8s.KubernetesObjectApi.makeApiClient(mgmt.kubeConfig);
  await objects.patch(
    {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: kubeconfigSecretName(name), namespace, labels: { [LABELS.capiClusterName]: name } },
      type: 'cluster.x-k8s.io/secret',
      stringData: { [SECRET_KEYS.kubeconfig]: yaml },
    } as k8s.KubernetesObject,
    undefined,
    undefined,
    'kindling-testbed',
    true,
    k8s.PatchStrategy.ServerSideApply,
  );
}

async function launch(dir: string, opts: ClusterOptions, pki: Pki, started: ManagedProcess[]): Promise<string> {
  const files = await writePkiFiles(dir, pki);
  const ports: Ports = {
    // Kept, so that a resumed cluster does not draw a port another component of the environment keeps.
    etcdClient: await keptPort(join(dir, 'etcd-client-port'), { movable: true }),
    etcdPeer: await keptPort(join(dir, 'etcd-peer-port'), { movable: true }),
    apiserver: await keptPort(join(dir, 'apiserver-port'), { movable: true }),
  };
  const server = `https://${servingAddress(opts) ?? '127.0.0.1'}:${ports.apiserver}`;
  const kubeconfigYaml = kubeconfigFor(opts.name, server, pki.ca.certPem, pki.admin);
  const kubeconfigPath = join(dir, 'kubeconfig');
  await writeFile(kubeconfigPath, kubeconfigYaml, { mode: 0o600 });

  started.push(startEtcd(dir, ports));
  const apiserver = startApiserver(dir, ports, files, [
    `--service-account-issuer=${server}`,
    ...addressArgs(opts),
    ...(await optionalApiserverArgs(dir, opts)),
  ]);
  started.push(apiserver);
  await waitHealthy(`${server}/readyz`, pki, apiserver);
  if (opts.controllerManager ?? true) started.push(startControllerManager(dir, kubeconfigPath, files, opts));
  if (opts.scheduler ?? false) started.push(startScheduler(dir, kubeconfigPath));
  if (opts.kwok ?? false) started.push(await startKwok(dir, kubeconfigPath));
  return server;
}

export async function startCluster(opts: ClusterOptions): Promise<Cluster> {
  // The unit tier is what a newcomer runs in a minute (scripts/run-tests.js --tier unit): a test that needs a
  // cluster says so in its file name.
  if (process.env['KINDLING_TEST_TIER'] === 'unit')
    throw new Error(`cluster ${opts.name} started by a unit test: name its file x.cluster.test.ts`);
  const temporary = opts.dir === undefined;
  const dir = opts.dir ?? (await mkdtemp(join(tmpdir(), `kindling-${opts.name}-`)));
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const pki = await loadOrCreatePki(dir, servingAddress(opts));
  const processes: ManagedProcess[] = [];
  let stopped = false;
  const stop = async (): Promise<void> => {
    if (stopped) return;
    stopped = true;
    // Reverse order: clients first, etcd last, so nothing logs errors about a vanished apiserver for long.
    for (const p of [...processes].reverse()) await p.stop();
    if (temporary) await rm(dir, { recursive: true, force: true });
  };
  try {
    const server = await launch(dir, opts, pki, processes);
    const kubeconfigPath = join(dir, 'kubeconfig');
    const kubeconfigYaml = await readFile(kubeconfigPath, 'utf8');
    const kubeConfig = new k8s.KubeConfig();
    kubeConfig.loadFromString(kubeconfigYaml);
    const cluster: Cluster = {
      name: opts.name,
      dir,
      server,
      kubeconfigPath,
      kubeconfigYaml,
      kubeConfig,
      ca: pki.ca,
      auditLogPath: opts.audit ? join(dir, 'audit.log') : undefined,
      processes,
      rssBytes: () => processes.reduce((sum, p) => sum + (p.guardPid ? treeRssBytes(p.guardPid) : 0), 0),
      stop,
    };
    if (opts.management)
      await writeKubeconfigSecret(opts.management.cluster, opts.management.namespace, opts.name, kubeconfigYaml);
    return cluster;
  } catch (err) {
    await stop();
    // The cause's message too: a child process's output often carries only the message.
    const why = err instanceof Error ? err.message : String(err);
    throw new Error(`failed to start test-bed cluster "${opts.name}": ${why}`, { cause: err });
  }
}
