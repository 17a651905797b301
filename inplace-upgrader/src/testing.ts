/**
 * Helpers for the in-place integration tests and the benchmark (not shipped in any command).
 *
 * - runIgnitionServer: the real ignition server, `kindling ignition-server` as its own process against the
 *   management cluster, serving HTTPS under a CA made for the test, with a release image built by the code
 *   of `kindling release build` into an OCI layout. The test plays the nodepool-controller with
 *   tokenSecret(); the server mints the token and generates the payload; the upgrader fetches it with the
 *   pool's token, exactly as in production.
 * - AgentFleet: plays the kubelet for agent Pods. KWOK marks a Pod Running but runs nothing, so for each
 *   agent Pod the fleet runs a real `kindling agent` child process for that node against the node's own
 *   scratch root, restarts it whenever it exits (a simulated reboot exits it), and kills it when the Pod goes.
 * - AvailabilityWatcher: an independent watch on every Node event, counting the unavailable nodes.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as k8s from '@kubernetes/client-node';
import { ANNOTATIONS, LABELS, NODE_STATES, SECRET_KEYS, tokenSecretName } from '../../api/src/keys.js';
import { createCertificateAuthority } from '../../support/src/pki.js';
import { buildRelease, writeLayoutDir } from '../../ignition-server/src/release/build.js';
import { ecKeyPem, writeReleaseFolder } from '../../ignition-server/src/testing.js';
import { freePort, ManagedProcess, waitForPort } from '../../test/bed/src/index.js';
import { GUEST_NAMESPACE } from './desired.js';
import { isReady } from './select.js';

export const KINDLING_BIN = fileURLToPath(new URL('../../../bin/kindling.js', import.meta.url));

export interface IgnitionServerFixture {
  /** Base URL of /ignition. */
  url: string;
  caPem: string;
  /** The CA in a file, for the upgrader's --ignition-ca-file. */
  caFile: string;
  /** Reference of the release image (an OCI layout), for tokenSecret(). */
  release: string;
  stop(): Promise<void>;
}

/** What `kindling ignition-server` needs on disk: serving TLS under a CA made for the test, a signing key, a release. */
export interface IgnitionServerFiles {
  dir: string;
  caPem: string;
  caFile: string;
  certFile: string;
  keyFile: string;
  signingKeyFile: string;
  /** Reference of the release image (an OCI layout), for tokenSecret(). */
  release: string;
}

export async function writeIgnitionServerFiles(dir: string): Promise<IgnitionServerFiles> {
  await mkdir(dir, { recursive: true });
  const ca = await createCertificateAuthority('ignition serving CA');
  const serving = await ca.issue({ commonName: '127.0.0.1', ipAddresses: ['127.0.0.1'], usage: 'server' });
  const file = (name: string): string => join(dir, name);
  await Promise.all([
    writeFile(file('ca.pem'), ca.certPem),
    writeFile(file('tls.crt'), serving.certPem),
    writeFile(file('tls.key'), serving.keyPem),
    writeFile(file('signing.pem'), ecKeyPem()),
    buildRelease(await writeReleaseFolder(file('release-src')), 'v1').then((image) => writeLayoutDir(image, file('release'))),
  ]);
  return { dir, caPem: ca.certPem, caFile: file('ca.pem'), certFile: file('tls.crt'), keyFile: file('tls.key'), signingKeyFile: file('signing.pem'), release: `oci:${file('release')}:v1` };
}

/** The arguments of one `kindling ignition-server` replica serving on `port`, with its own payload cache. */
export function ignitionServerArgs(files: IgnitionServerFiles, opts: { kubeconfigPath: string; namespace: string; port: number; opsPort: number; cacheDir: string }): string[] {
  return [
    KINDLING_BIN, 'ignition-server', '--kubeconfig', opts.kubeconfigPath, '--namespace', opts.namespace,
    '--serving-address', `127.0.0.1:${opts.port}`, '--ops-address', `127.0.0.1:${opts.opsPort}`, '--tls-cert-file', files.certFile,
    '--tls-key-file', files.keyFile, '--signing-key-file', files.signingKeyFile, '--cache-dir', opts.cacheDir,
  ];
}

/** Starts the real ignition server in `dir` (its keys, release, payload cache and log), watching `namespace`. */
export async function runIgnitionServer(opts: { kubeconfigPath: string; dir: string; namespace: string }): Promise<IgnitionServerFixture> {
  const files = await writeIgnitionServerFiles(opts.dir);
  const [port, opsPort] = [await freePort(), await freePort()];
  const proc = new ManagedProcess({
    name: 'ignition-server',
    command: process.execPath,
    logFile: join(opts.dir, 'ignition-server.log'),
    args: [...ignitionServerArgs(files, { ...opts, port, opsPort, cacheDir: join(opts.dir, 'cache') }), '--leader-elect=false'],
  });
  await waitForPort(port, proc, 30_000);
  return { url: `https://127.0.0.1:${port}`, caPem: files.caPem, caFile: files.caFile, release: files.release, stop: () => proc.stop() };
}

/** The token Secret of a pool at a hash, as the nodepool-controller writes it: the server mints its token. */
export function tokenSecret(opts: { namespace: string; pool: string; hash: string; release: string; config: object[] }): k8s.V1Secret {
  return {
    metadata: { name: tokenSecretName(opts.pool, opts.hash), namespace: opts.namespace, labels: { [LABELS.tokenSecret]: 'true', [LABELS.nodePool]: opts.pool, [LABELS.configHash]: opts.hash } },
    stringData: { [SECRET_KEYS.release]: opts.release, [SECRET_KEYS.config]: JSON.stringify(opts.config), [SECRET_KEYS.pool]: `${opts.namespace}/${opts.pool}` },
  };
}

/** A MachineConfig document carrying an Ignition config: what a pool's config ConfigMap holds. */
export function machineConfig(name: string, config: object): object {
  return { apiVersion: 'machineconfiguration.openshift.io/v1', kind: 'MachineConfig', metadata: { name }, spec: { config } };
}

export interface FleetOptions {
  guest: k8s.KubeConfig;
  kubeconfigPath: string;
  /** Folder holding one scratch host root per node. */
  rootsDir: string;
  logLevel?: string;
}

export class AgentFleet {
  readonly starts = new Map<string, number>();
  #opts: FleetOptions;
  #procs = new Map<string, ChildProcess>();
  #wanted = new Set<string>();
  #stopped = false;
  #informer: k8s.Informer<k8s.V1Pod> & k8s.ObjectCache<k8s.V1Pod>;

  constructor(opts: FleetOptions) {
    this.#opts = opts;
    const core = opts.guest.makeApiClient(k8s.CoreV1Api);
    this.#informer = k8s.makeInformer(opts.guest, `/api/v1/namespaces/${GUEST_NAMESPACE}/pods`, () => core.listNamespacedPod({ namespace: GUEST_NAMESPACE, labelSelector: LABELS.agentPod }), LABELS.agentPod);
    this.#informer.on(k8s.ADD, (p) => this.#want(p));
    this.#informer.on(k8s.UPDATE, (p) => this.#want(p));
    this.#informer.on(k8s.DELETE, (p) => this.#unwant(p.spec?.nodeName ?? ''));
    this.#informer.on(k8s.ERROR, () => {
      if (!this.#stopped) setTimeout(() => void this.#informer.start().catch(() => undefined), 500);
    });
  }

  rootOf(node: string): string {
    return join(this.#opts.rootsDir, node);
  }

  async start(): Promise<void> {
    await this.#informer.start();
  }

  /** Nodes whose agent process is running now. */
  running(): string[] {
    return [...this.#procs.keys()];
  }

  /** SIGKILLs a node's agent (it comes back, as a crashed container would). */
  kill(node: string): boolean {
    return this.#procs.get(node)?.kill('SIGKILL') ?? false;
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    await this.#informer.stop();
    this.#wanted.clear();
    await Promise.all([...this.#procs.values()].map((p) => new Promise((r) => (p.exitCode === null && p.signalCode === null ? (p.once('exit', r), p.kill('SIGKILL')) : r(undefined)))));
  }

  #want(pod: k8s.V1Pod): void {
    const node = pod.spec?.nodeName;
    if (!node || pod.metadata?.deletionTimestamp || this.#wanted.has(node)) return;
    this.#wanted.add(node);
    void this.#spawn(node);
  }

  #unwant(node: string): void {
    this.#wanted.delete(node);
    this.#procs.get(node)?.kill('SIGTERM');
  }

  async #spawn(node: string): Promise<void> {
    if (!this.#wanted.has(node) || this.#procs.has(node)) return;
    await mkdir(this.rootOf(node), { recursive: true });
    const args = [KINDLING_BIN, 'agent', '--node', node, '--root', this.rootOf(node), '--kubeconfig', this.#opts.kubeconfigPath, '--reboot', 'simulated', '--poll', '1s', '--log-level', this.#opts.logLevel ?? 'warn'];
    const child = spawn(process.execPath, args, { stdio: ['ignore', 'ignore', 'inherit'] });
    this.#procs.set(node, child);
    this.starts.set(node, (this.starts.get(node) ?? 0) + 1);
    child.once('exit', () => {
      this.#procs.delete(node);
      // The kubelet restarts a container that exited (restartPolicy Always): a simulated reboot, or a kill.
      setTimeout(() => void this.#spawn(node), 100);
    });
  }
}

/** Unavailable, as the invariant counts it: cordoned, not Ready, or the agent working on it. */
export const unavailable = (node: k8s.V1Node): boolean =>
  node.spec?.unschedulable === true || !isReady(node) || node.metadata?.annotations?.[ANNOTATIONS.state] === NODE_STATES.working;

export class AvailabilityWatcher {
  max = 0;
  events = 0;
  #state = new Map<string, boolean>();
  #request: { abort(): void } | undefined;
  #kc: k8s.KubeConfig;
  #nodes: Set<string>;

  constructor(kc: k8s.KubeConfig, nodes: Iterable<string>) {
    this.#kc = kc;
    this.#nodes = new Set(nodes);
  }

  #stopped = false;

  async start(): Promise<void> {
    // A watch the server ends is started again: the count must not miss a window.
    this.#request = await new k8s.Watch(this.#kc).watch('/api/v1/nodes', {}, (type: string, node: k8s.V1Node) => this.#observe(type, node), () => {
      if (!this.#stopped) void this.start();
    });
  }

  stop(): void {
    this.#stopped = true;
    this.#request?.abort();
  }

  /** Counts these nodes too from now on: nodes that joined, once Ready (a joining node never was available). */
  track(names: Iterable<string>): void {
    for (const name of names) this.#nodes.add(name);
  }

  /** Starts the count again (between rollouts). */
  reset(): void {
    this.max = [...this.#state.values()].filter(Boolean).length;
  }

  #observe(type: string, node: k8s.V1Node): void {
    const name = node.metadata?.name ?? '';
    if (!this.#nodes.has(name)) return;
    this.events++;
    this.#state.set(name, type !== 'DELETED' && unavailable(node));
    this.max = Math.max(this.max, [...this.#state.values()].filter(Boolean).length);
  }
}
