/**
 * startNode(): a real node for a test-bed management cluster — containerd (Debian's), the kubelet and
 * kube-proxy (built by test/bed/node/build.sh), the Debian CNI bridge, and CoreDNS as a Pod behind the
 * kube-dns Service — for the test that installs Kindling from deploy/ as Pods.
 *
 * Everything of the node lives in a network namespace of its own, joined to the machine by one veth pair:
 * the bridge, kube-proxy's rules, forwarding and the Service routes never touch the machine's own network.
 * Inside it the Service range is routed to an interface with nowhere to go (as kube-proxy's IPVS mode does), so a Service
 * address kube-proxy did not translate is dropped there; the namespace has no default route at all. The
 * machine routes the Service range to the veth only, so booting hosts and tests reach Services as a
 * provider's hosts would, and nothing leaks to the default route.
 */
import { execFile, execFileSync } from 'node:child_process';
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import * as k8s from '#k8s';
import { createApplier } from '../../../support/src/apply.js';
import { ManagedProcess } from './process.js';
import type { Cluster } from './cluster.js';
import { eventually } from './eventually.js';

const run = promisify(execFile);
const BUILD_SCRIPT = fileURLToPath(new URL('../../../../test/bed/node/build.sh', import.meta.url));
const VERSIONS = fileURLToPath(new URL('../../../../test/bed/node/versions.env', import.meta.url));

/** The node's addresses: fixed, since one node test runs at a time (the heavy lock) and each cleans up first. */
export const NODE_NETWORK = {
  netns: 'kindling-node',
  hostVeth: 'kindling-h',
  nodeVeth: 'kindling-n',
  /** The machine's end of the veth: where the management (and guest) apiservers serve for the Pods. */
  hostAddress: '10.243.0.1',
  nodeAddress: '10.243.0.2',
  bridge: 'kindling0',
  podCidr: '10.244.0.0/24',
  podGateway: '10.244.0.1',
  /** The apiserver's --service-cluster-ip-range (cluster.ts). */
  serviceCidr: '10.0.0.0/24',
  dnsAddress: '10.0.0.10',
} as const;

interface NodeBuild {
  bin: string;
  images: string;
  versions: Record<string, string>;
}

let built: NodeBuild | undefined;

/** Builds what is missing (a no-op when cached): the node's binaries and image archives. */
function nodeBuild(): NodeBuild {
  if (built !== undefined) return built;
  const out = execFileSync('bash', [BUILD_SCRIPT], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });
  const dir = out.trim().split('\n').pop() ?? '';
  if (!existsSync(join(dir, 'bin', 'kubelet'))) throw new Error(`node build did not produce a kubelet in "${dir}"`);
  const versions = Object.fromEntries(
    execFileSync('bash', ['-c', `set -a; source "${VERSIONS}"; env`], { encoding: 'utf8', env: {} })
      .split('\n')
      .map((l) => l.split('=', 2) as [string, string])
      .filter(([k]) => /_(IMAGE|VERSION)$/.test(k)),
  );
  built = { bin: join(dir, 'bin'), images: join(dir, 'images'), versions };
  return built;
}

export interface KubeNode {
  readonly name: string;
  readonly dir: string;
  readonly processes: readonly ManagedProcess[];
  /** The Cluster API manager's image, imported with the node's own (test/bed/node/build.sh built it). */
  readonly capiManagerImage: string;
  /** Imports an image archive (OCI layout or `docker save`) into containerd's k8s.io namespace. */
  importImage(archive: string): Promise<void>;
  /** Stops the Pods, the node's processes, and removes the namespace, routes and mounts. Idempotent. */
  stop(): Promise<void>;
}

const sh = async (cmd: string, args: string[]): Promise<string> => (await run(cmd, args)).stdout;
const inNode = (args: string[]): Promise<string> => sh('nsenter', [`--net=/run/netns/${NODE_NETWORK.netns}`, ...args]);

/** Removes what a previous run (killed before its clean-up) left: the namespace, with it the veth; the route. */
export async function removeNodeNetwork(): Promise<void> {
  const n = NODE_NETWORK;
  await sh('ip', ['route', 'del', n.serviceCidr, 'via', n.nodeAddress]).catch(() => '');
  await sh('ip', ['netns', 'del', n.netns]).catch(() => '');
  // The veth goes with the namespace, but only once the kernel has released it: do not wait for that.
  await sh('ip', ['link', 'del', n.hostVeth]).catch(() => '');
}

/**
 * The node's namespace and veth, first: the management cluster serves on the machine's end (hostAddress), which
 * must exist before its apiserver starts. startNode() runs the node in it; its stop() removes it.
 */
export async function createNodeNetwork(): Promise<void> {
  const n = NODE_NETWORK;
  await removeNodeNetwork();
  await sweepPreviousNodes();
  await sh('ip', ['netns', 'add', n.netns]);
  await sh('ip', ['link', 'add', n.hostVeth, 'type', 'veth', 'peer', 'name', n.nodeVeth, 'netns', n.netns]);
  await sh('ip', ['addr', 'add', `${n.hostAddress}/30`, 'dev', n.hostVeth]);
  await sh('ip', ['link', 'set', n.hostVeth, 'up']);
  await sh('ip', ['route', 'add', n.serviceCidr, 'via', n.nodeAddress]);
  await inNode(['ip', 'link', 'set', 'lo', 'up']);
  await inNode(['ip', 'addr', 'add', `${n.nodeAddress}/30`, 'dev', n.nodeVeth]);
  await inNode(['ip', 'link', 'set', n.nodeVeth, 'up']);
  // A bridge with no port stands in for kube-proxy's dummy interface (this machine's kernel has no dummy driver):
  // a route to it lets the kernel translate a Service address first and drops whatever was not translated.
  await inNode(['ip', 'link', 'add', 'kube-services', 'type', 'bridge']);
  await inNode(['ip', 'link', 'set', 'kube-services', 'up']);
  await inNode(['ip', 'route', 'add', n.serviceCidr, 'dev', 'kube-services']);
  // Forwarding and bridge filtering are per namespace: kube-proxy needs both, the machine gets neither.
  await inNode(['sysctl', '-qw', 'net.ipv4.ip_forward=1', 'net.bridge.bridge-nf-call-iptables=1']);
  // Pods reach the apiservers on the machine's end as the node: the machine needs no route to the Pods.
  await inNode(['iptables', '-t', 'nat', '-A', 'POSTROUTING', '-s', n.podCidr, '-o', n.nodeVeth, '-j', 'MASQUERADE']);
}

function containerdConfig(dir: string, pauseImage: string): string {
  return `version = 2
root = "${dir}/containerd/root"
state = "${dir}/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = "${dir}/containerd.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "${dir}/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "${pauseImage}"
  # Root here lacks CAP_SYS_RESOURCE: the kubelet's -998 for sandboxes is refused by the kernel (runc's nsexec
  # fails with "can't get final child's PID from pipe"), so scores are clamped to containerd's own.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "${dir}/cni"
`;
}

function cniConfig(dir: string): string {
  const n = NODE_NETWORK;
  return JSON.stringify({
    cniVersion: '1.0.0',
    name: 'kindling',
    plugins: [
      {
        type: 'bridge',
        bridge: n.bridge,
        isGateway: true,
        ipMasq: false,
        hairpinMode: true,
        ipam: {
          type: 'host-local',
          dataDir: join(dir, 'cni-ipam'),
          ranges: [[{ subnet: n.podCidr, gateway: n.podGateway }]],
          routes: [{ dst: '0.0.0.0/0' }],
        },
      },
      { type: 'portmap', capabilities: { portMappings: true } },
    ],
  });
}

function kubeletConfig(dir: string, caFile: string): string {
  return JSON.stringify({
    apiVersion: 'kubelet.config.k8s.io/v1beta1',
    kind: 'KubeletConfiguration',
    // This machine has cgroup v1 (hybrid); 1.36 refuses it unless told otherwise, and still supports it.
    failCgroupV1: false,
    // containerd 1.6 does not answer the CRI RuntimeConfig call: the kubelet falls back to this setting.
    cgroupDriver: 'cgroupfs',
    containerRuntimeEndpoint: `unix://${dir}/containerd.sock`,
    // Reachable only through the node's namespace, from the machine: the apiserver's logs and exec calls.
    authentication: { anonymous: { enabled: true }, webhook: { enabled: false }, x509: { clientCAFile: caFile } },
    authorization: { mode: 'AlwaysAllow' },
    readOnlyPort: 0,
    healthzBindAddress: '127.0.0.1',
    clusterDomain: 'cluster.local',
    clusterDNS: [NODE_NETWORK.dnsAddress],
    // Pods must not inherit the machine's resolvers: nothing outside the cluster is ever asked.
    resolvConf: join(dir, 'resolv.conf'),
    failSwapOn: false,
    // The images were imported, not pulled: garbage collection must never remove them.
    imageGCHighThresholdPercent: 100,
    imageGCLowThresholdPercent: 99,
    evictionHard: { 'memory.available': '100Mi', 'nodefs.available': '1%', 'imagefs.available': '1%' },
    maxPods: 60,
    serializeImagePulls: false,
  });
}

function kubeProxyConfig(kubeconfig: string, nodeName: string): string {
  return JSON.stringify({
    apiVersion: 'kubeproxy.config.k8s.io/v1alpha1',
    kind: 'KubeProxyConfiguration',
    clientConnection: { kubeconfig },
    mode: 'iptables',
    clusterCIDR: NODE_NETWORK.podCidr,
    hostnameOverride: nodeName,
    bindAddress: NODE_NETWORK.nodeAddress,
    healthzBindAddress: '127.0.0.1:10256',
    metricsBindAddress: '127.0.0.1:10249',
    // Leave the kernel's conntrack limits alone: the sysctls behind them are the machine's, not the node's.
    conntrack: { maxPerCore: 0, min: 0, tcpEstablishedTimeout: '0s', tcpCloseWaitTimeout: '0s' },
    iptables: { localhostNodePorts: false },
  });
}

const COREDNS_CONFIG = `.:53 {
    errors
    health :8080
    ready :8181
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 30
}
`;

/** CoreDNS as clusters run it (a Deployment behind kube-dns), answering for cluster.local only: no forwarding. */
function corednsManifests(image: string): (k8s.KubernetesObject & Record<string, unknown>)[] {
  const labels = { 'k8s-app': 'kube-dns' };
  return [
    { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'coredns', namespace: 'kube-system' } },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRole',
      metadata: { name: 'system:coredns' },
      rules: [
        { apiGroups: [''], resources: ['services', 'pods', 'namespaces'], verbs: ['list', 'watch'] },
        { apiGroups: ['discovery.k8s.io'], resources: ['endpointslices'], verbs: ['list', 'watch'] },
      ],
    },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRoleBinding',
      metadata: { name: 'system:coredns' },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'system:coredns' },
      subjects: [{ kind: 'ServiceAccount', name: 'coredns', namespace: 'kube-system' }],
    },
    {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: 'coredns', namespace: 'kube-system' },
      data: { Corefile: COREDNS_CONFIG },
    },
    {
      apiVersion: 'apps/v1',
      kind: 'Deployment',
      metadata: { name: 'coredns', namespace: 'kube-system', labels },
      spec: {
        replicas: 1,
        selector: { matchLabels: labels },
        template: {
          metadata: { labels },
          spec: {
            serviceAccountName: 'coredns',
            dnsPolicy: 'Default',
            containers: [
              {
                name: 'coredns',
                image,
                imagePullPolicy: 'Never',
                args: ['-conf', '/etc/coredns/Corefile'],
                ports: [
                  { name: 'dns', containerPort: 53, protocol: 'UDP' },
                  { name: 'dns-tcp', containerPort: 53, protocol: 'TCP' },
                  { name: 'health', containerPort: 8080 },
                ],
                readinessProbe: { httpGet: { path: '/ready', port: 8181 }, periodSeconds: 2 },
                livenessProbe: { httpGet: { path: '/health', port: 8080 }, periodSeconds: 10 },
                volumeMounts: [{ name: 'config', mountPath: '/etc/coredns', readOnly: true }],
              },
            ],
            volumes: [{ name: 'config', configMap: { name: 'coredns' } }],
          },
        },
      },
    },
    {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: 'kube-dns', namespace: 'kube-system', labels },
      spec: {
        selector: labels,
        clusterIP: NODE_NETWORK.dnsAddress,
        ports: [
          { name: 'dns', port: 53, protocol: 'UDP', targetPort: 53 },
          { name: 'dns-tcp', port: 53, protocol: 'TCP', targetPort: 53 },
          { name: 'health', port: 8080, protocol: 'TCP', targetPort: 8080 },
        ],
      },
    },
  ];
}

/**
 * Lets the kubelet tear every Pod down as it would on a drain (CNI DEL, the sandbox's namespace, its mounts): the
 * node is cordoned so nothing lands again, its Pods are deleted at once, and this waits until containerd runs no
 * task. Bounded: whatever is left is killed by removeContainers().
 */
async function drainNode(mgmt: Cluster, name: string, dir: string): Promise<void> {
  const core = mgmt.kubeConfig.makeApiClient(k8s.CoreV1Api);
  const tasks = async (): Promise<string[]> =>
    (await sh('ctr', [`--address=${dir}/containerd.sock`, '-n', 'k8s.io', 'tasks', 'ls', '-q']).catch(() => ''))
      .split('\n')
      .filter(Boolean);
  try {
    await core.patchNode(
      { name, body: { spec: { unschedulable: true } } },
      k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
    );
    const { items } = await core.listPodForAllNamespaces({ fieldSelector: `spec.nodeName=${name}` });
    await Promise.all(
      items.map((p) =>
        core.deleteNamespacedPod({
          name: p.metadata?.name ?? '',
          namespace: p.metadata?.namespace ?? '',
          gracePeriodSeconds: 0,
        }),
      ),
    );
    await eventually('no container left on the node', async () => (await tasks()).length === 0, 60_000, 500);
  } catch {
    // The apiserver may be gone already: the fallback below still removes every container.
  }
}

/** Kills every container and sandbox containerd still runs, so no shim or mount outlives the node. */
async function removeContainers(dir: string): Promise<void> {
  const ctr = (args: string[]): Promise<string> =>
    sh('ctr', [`--address=${dir}/containerd.sock`, '-n', 'k8s.io', ...args]).catch(() => '');
  const tasks = (await ctr(['tasks', 'ls', '-q'])).split('\n').filter(Boolean);
  await Promise.all(tasks.map((t) => ctr(['tasks', 'kill', '-s', 'SIGKILL', t])));
  await new Promise((r) => setTimeout(r, 500));
  await Promise.all(tasks.map((t) => ctr(['tasks', 'delete', '-f', t])));
}

/** Unmounts whatever the kubelet and containerd mounted below the node's folder (deepest first). */
async function unmountBelow(dir: string): Promise<void> {
  const mounts = (await sh('findmnt', ['-rn', '-o', 'TARGET']).catch(() => ''))
    .split('\n')
    .filter((m) => m.startsWith(`${dir}/`))
    .sort((a, b) => b.length - a.length);
  for (const m of mounts) await sh('umount', ['-l', m]).catch(() => '');
}

/** The folders (and the kubelet's mounts in them) of nodes whose test was killed before its clean-up. */
async function sweepPreviousNodes(): Promise<void> {
  const prefix = join(tmpdir(), 'kindling-node-');
  const mounts = (await sh('findmnt', ['-rn', '-o', 'TARGET']).catch(() => ''))
    .split('\n')
    .filter((m) => m.startsWith(prefix))
    .sort((a, b) => b.length - a.length);
  for (const m of mounts) await sh('umount', ['-l', m]).catch(() => '');
  for (const dir of new Set(mounts.map((m) => prefix + (m.slice(prefix.length).split('/')[0] ?? ''))))
    await rm(dir, { recursive: true, force: true });
}

export interface NodeOptions {
  mgmt: Cluster;
  name?: string;
}

async function writeNodeFiles(dir: string, mgmt: Cluster, name: string, pauseImage: string): Promise<void> {
  await mkdir(join(dir, 'cni'), { recursive: true });
  await mkdir(join(dir, 'kubelet'), { recursive: true });
  const caFile = join(dir, 'ca.crt');
  await writeFile(caFile, mgmt.ca.certPem);
  // The admin identity: the management cluster authorizes by RBAC only (no Node authorizer) in the test bed.
  await writeFile(join(dir, 'kubeconfig'), mgmt.kubeconfigYaml, { mode: 0o600 });
  await writeFile(join(dir, 'resolv.conf'), `nameserver ${NODE_NETWORK.dnsAddress}\n`);
  await writeFile(join(dir, 'containerd.toml'), containerdConfig(dir, pauseImage));
  await writeFile(join(dir, 'cni', '10-kindling.conflist'), cniConfig(dir));
  await writeFile(join(dir, 'kubelet.json'), kubeletConfig(dir, caFile));
  await writeFile(join(dir, 'kube-proxy.json'), kubeProxyConfig(join(dir, 'kubeconfig'), name));
}

function startNodeProcess(dir: string, name: string, binary: string, args: string[]): ManagedProcess {
  return new ManagedProcess({
    name,
    command: 'nsenter',
    args: [`--net=/run/netns/${NODE_NETWORK.netns}`, binary, ...args],
    logFile: join(dir, `${name}.log`),
  });
}

async function waitNodeReady(mgmt: Cluster, name: string, kubelet: ManagedProcess): Promise<void> {
  const core = mgmt.kubeConfig.makeApiClient(k8s.CoreV1Api);
  await eventually(
    `Node ${name} Ready`,
    async () => {
      if (!kubelet.alive) throw new Error(`the kubelet exited:\n${kubelet.tail()}`);
      const node = await core.readNode({ name });
      const ready = node.status?.conditions?.find((c) => c.type === 'Ready');
      if (ready?.status !== 'True') throw new Error(`Node ${name} not Ready: ${ready?.message ?? 'no condition'}`);
      return true;
    },
    120_000,
    500,
  );
}

export async function startNode(opts: NodeOptions): Promise<KubeNode> {
  const { mgmt } = opts;
  const name = opts.name ?? 'kindling-node';
  const build = nodeBuild();
  const dir = await mkdtemp(join(tmpdir(), 'kindling-node-'));
  const pauseImage = build.versions['PAUSE_IMAGE'] ?? '';
  const processes: ManagedProcess[] = [];
  let stopped = false;
  const netnsBefore = new Set(await readdir('/run/netns').catch(() => []));
  let failed = false;
  const node: KubeNode = {
    name,
    dir,
    processes,
    capiManagerImage: build.versions['CAPI_MANAGER_IMAGE'] ?? '',
    importImage: async (archive) => {
      await sh('ctr', [
        `--address=${dir}/containerd.sock`,
        '-n',
        'k8s.io',
        'images',
        'import',
        '--no-unpack=false',
        archive,
      ]);
    },
    stop: async () => {
      if (stopped) return;
      stopped = true;
      await drainNode(mgmt, name, dir);
      const containerd = processes[0];
      for (const p of processes.slice(1).reverse()) await p.stop();
      await removeContainers(dir);
      await containerd?.stop();
      // Sandboxes the kubelet could not tear down keep their namespace files (containerd names them cni-…).
      const left = (await readdir('/run/netns').catch(() => [])).filter(
        (f) => f.startsWith('cni-') && !netnsBefore.has(f),
      );
      for (const ns of left) await sh('ip', ['netns', 'del', ns]).catch(() => '');
      await unmountBelow(dir);
      await removeNodeNetwork();
      // A node that failed to start keeps its folder: its logs say why.
      if (!failed) await rm(dir, { recursive: true, force: true });
    },
  };
  try {
    await writeNodeFiles(dir, mgmt, name, pauseImage);
    const containerd = startNodeProcess(dir, 'containerd', '/usr/bin/containerd', [
      '--config',
      join(dir, 'containerd.toml'),
    ]);
    processes.push(containerd);
    await eventually(
      'containerd answering',
      async () => {
        if (!existsSync(join(dir, 'containerd.sock'))) throw new Error(`containerd not up:\n${containerd.tail()}`);
        return sh('ctr', [`--address=${dir}/containerd.sock`, 'version']);
      },
      30_000,
      200,
    );
    for (const image of ['PAUSE_IMAGE', 'COREDNS_IMAGE', 'CAPI_MANAGER_IMAGE']) {
      const ref = build.versions[image] ?? '';
      await node.importImage(join(build.images, `${ref.replaceAll(/[:/]/g, '_')}.tar`));
    }
    const kubelet = startNodeProcess(dir, 'kubelet', join(build.bin, 'kubelet'), [
      `--config=${join(dir, 'kubelet.json')}`,
      `--kubeconfig=${join(dir, 'kubeconfig')}`,
      `--root-dir=${join(dir, 'kubelet')}`,
      `--cert-dir=${join(dir, 'kubelet-pki')}`,
      `--hostname-override=${name}`,
      `--node-ip=${NODE_NETWORK.nodeAddress}`,
      '--v=1',
    ]);
    processes.push(kubelet);
    processes.push(
      startNodeProcess(dir, 'kube-proxy', join(build.bin, 'kube-proxy'), [
        `--config=${join(dir, 'kube-proxy.json')}`,
        '--v=1',
      ]),
    );
    await waitNodeReady(mgmt, name, kubelet);
    const applier = createApplier(mgmt.kubeConfig, 'kindling-testbed');
    for (const obj of corednsManifests(build.versions['COREDNS_IMAGE'] ?? '')) await applier.apply(obj);
    return node;
  } catch (err) {
    failed = true;
    await node.stop();
    throw new Error(`failed to start the test-bed node "${name}" (logs in ${dir})`, { cause: err });
  }
}
