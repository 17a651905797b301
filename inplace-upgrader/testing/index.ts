/**
 * Helpers for the in-place integration tests and the benchmark (not shipped in any command).
 *
 * - tokenSecret: the test plays the nodepool-controller's part for the real ignition server (runIgnitionServer
 *   in ignition-server/src/testing.ts): the server mints the token and generates the payload; the upgrader
 *   fetches it with the pool's token, exactly as in production.
 * - AgentFleet: plays the kubelet for agent Pods. KWOK marks a Pod Running but runs nothing, so for each
 *   agent Pod the fleet runs a real `kindling agent` child process for that node against the node's own
 *   scratch root, restarts it whenever it exits (a simulated reboot exits it), and kills it when the Pod goes.
 *   Each process runs with a ServiceAccount token bound to its Pod, so the agent-node policy judges it. At each
 *   start it also plays the host's kubelet booting, as the local environment's kubelet reports it: the root's
 *   boot ID and release versions into the Node's status, and Ready=False while the root's kubelet config is one
 *   the kubelet would refuse (what the agent's health gate waits for).
 * - AvailabilityWatcher: an independent watch on every Node event, counting the unavailable nodes.
 * - the Runtime Extension as its own process, and what tests playing Cluster API's part need: extension.ts.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import * as k8s from '#k8s';
import { ANNOTATIONS, LABELS, NODE_STATES } from '../../api/src/keys.js';
import { KINDLING_BIN } from '../../ignition-server/testing/index.js';
import { ensureNodePool, ownedTokenSecret } from '../../ignition-server/testing/pools.js';
import { RestartingWatch } from '../../test/bed/src/index.js';
import { tokenKubeconfig } from '../../local/src/credentials.js';
import { HostFs } from '../../local/src/providers/host-fs.js';
import { kubeletConfigProblem, parseReleaseInfo } from '../../local/src/providers/kubelet/host-files.js';
import { hostStatusPatches } from '../../local/src/providers/kubelet/node-status.js';
import { HOST_PATHS } from '../../api/src/host-paths.js';
import { agentTokenRequest } from '../src/desired.js';
import { AGENT_SERVICE_ACCOUNT, GUEST_NAMESPACE } from '../../api/src/node-agent.js';
import { isReady } from '../src/rollout-decision.js';
import { SIMULATION } from '../../test/bed/src/keys.js';
import { layAccounts } from '../../node-agent/testing/agent.js';

export { KINDLING_BIN };
/** The ExtensionConfig that registers the extension with the Cluster API manager (benches outside this folder). */
export { extensionConfig } from '../src/extension/hooks.js';
export * from './extension.js';

/**
 * The token Secret of a pool for a config, as the nodepool-controller writes it: owned by the NodePool (created
 * on that release and cluster if need be; the Kindling CRDs installed), named by the hash of its release and
 * config, which it returns. The server mints its token, with a bootstrap token in the cluster's guest.
 */
export async function tokenSecret(
  mgmt: k8s.KubeConfig,
  opts: { namespace: string; pool: string; cluster: string; release: string; config: object[] },
): Promise<{ hash: string; secret: k8s.V1Secret }> {
  const pool = await ensureNodePool(mgmt, {
    namespace: opts.namespace,
    name: opts.pool,
    release: opts.release,
    clusterName: opts.cluster,
    // The test writes the pool's children itself: a nodepool-controller running beside it leaves them alone.
    paused: true,
  });
  return ownedTokenSecret(pool, opts.release, opts.config);
}

/** A MachineConfig document carrying an Ignition config: what a pool's config ConfigMap holds. */
export function machineConfig(name: string, config: object): object {
  return {
    apiVersion: 'machineconfiguration.openshift.io/v1',
    kind: 'MachineConfig',
    metadata: { name },
    spec: { config },
  };
}

/**
 * A kubeconfig for an agent Pod's ServiceAccount with a token bound to that Pod, as the kubelet would mount it:
 * the identity the agent-node policy judges (its node-name claim is the Pod's node).
 */
export async function boundAgentKubeconfig(guest: k8s.KubeConfig, pod: k8s.V1Pod): Promise<string> {
  const core = guest.makeApiClient(k8s.CoreV1Api);
  const request = await core.createNamespacedServiceAccountToken({
    name: AGENT_SERVICE_ACCOUNT,
    namespace: GUEST_NAMESPACE,
    body: agentTokenRequest(pod, 3600),
  });
  return tokenKubeconfig(guest, AGENT_SERVICE_ACCOUNT, request.status?.token ?? '');
}

export interface FleetOptions {
  guest: k8s.KubeConfig;
  /** Folder holding one scratch host root per node. */
  rootsDir: string;
  logLevel?: string;
}

export class AgentFleet {
  readonly starts = new Map<string, number>();
  #opts: FleetOptions;
  #procs = new Map<string, ChildProcess>();
  #wanted = new Set<string>();
  /** Nodes whose agent is being started (its token in flight), so two calls start one process. */
  #spawning = new Set<string>();
  #stopped = false;
  #informer: k8s.Informer<k8s.V1Pod> & k8s.ObjectCache<k8s.V1Pod>;

  constructor(opts: FleetOptions) {
    this.#opts = opts;
    const core = opts.guest.makeApiClient(k8s.CoreV1Api);
    this.#informer = k8s.makeInformer(
      opts.guest,
      `/api/v1/namespaces/${GUEST_NAMESPACE}/pods`,
      () => core.listNamespacedPod({ namespace: GUEST_NAMESPACE, labelSelector: LABELS.agentPod }),
      LABELS.agentPod,
    );
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
    await Promise.all(
      [...this.#procs.values()].map(
        (p) =>
          new Promise((r) =>
            p.exitCode === null && p.signalCode === null ? (p.once('exit', r), p.kill('SIGKILL')) : r(undefined),
          ),
      ),
    );
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
    if (!this.#wanted.has(node) || this.#procs.has(node) || this.#spawning.has(node)) return;
    this.#spawning.add(node);
    try {
      // A host's own accounts, as its OS image has them: SSH keys go to a user the host knows.
      await layAccounts(this.rootOf(node));
      const kubeconfig = await this.#kubeconfigOf(node);
      if (!this.#wanted.has(node)) return;
      await this.#boot(node);
      const args = [
        KINDLING_BIN,
        'agent',
        '--node',
        node,
        '--root',
        this.rootOf(node),
        '--kubeconfig',
        kubeconfig,
        '--reboot',
        'simulated',
        '--poll',
        '1s',
        '--log-level',
        this.#opts.logLevel ?? 'warn',
      ];
      const child = spawn(process.execPath, args, { stdio: ['ignore', 'ignore', 'inherit'] });
      this.#procs.set(node, child);
      this.starts.set(node, (this.starts.get(node) ?? 0) + 1);
      child.once('exit', () => {
        this.#procs.delete(node);
        // The kubelet restarts a container that exited (restartPolicy Always): a simulated reboot, or a kill.
        setTimeout(() => void this.#spawn(node), 100);
      });
    } catch {
      // The Pod went (or was replaced) while its token was requested: the informer's next event decides.
      setTimeout(() => void this.#spawn(node), 500);
    } finally {
      this.#spawning.delete(node);
    }
  }

  /**
   * The host's kubelet at boot: its status from the root (see the top of this file). A root with no kubelet
   * config yet (a scratch root before its first payload) counts as one the kubelet accepts.
   */
  async #boot(node: string): Promise<void> {
    const fs = new HostFs(this.rootOf(node));
    const [release, bootId, config] = await Promise.all([
      fs.read(HOST_PATHS.releaseInfo),
      fs.read(HOST_PATHS.bootId),
      fs.read(HOST_PATHS.kubeletConfig),
    ]);
    const status = {
      release: parseReleaseInfo(release),
      bootId: bootId?.trim() || undefined,
      configProblem: config === undefined ? undefined : kubeletConfigProblem(config),
    };
    const core = this.#opts.guest.makeApiClient(k8s.CoreV1Api);
    const current = await core.readNode({ name: node });
    const patches = hostStatusPatches(status, current.metadata?.annotations?.[SIMULATION.hostDown], new Date());
    if (patches.metadata)
      await core.patchNode(
        { name: node, body: { metadata: patches.metadata } },
        k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
      );
    await core.patchNodeStatus(
      { name: node, body: { status: patches.status } },
      k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.StrategicMergePatch),
    );
  }

  /** Each start gets a fresh token bound to the node's agent Pod, as a kubelet mounts one per container. */
  async #kubeconfigOf(node: string): Promise<string> {
    const pod = this.#informer
      .list(GUEST_NAMESPACE)
      .find((p) => p.spec?.nodeName === node && !p.metadata?.deletionTimestamp);
    if (!pod) throw new Error(`no agent Pod on ${node}`);
    const file = join(this.#opts.rootsDir, `${node}.kubeconfig`);
    await writeFile(file, await boundAgentKubeconfig(this.#opts.guest, pod), { mode: 0o600 });
    return file;
  }
}

/** Unavailable, as the invariant counts it: cordoned, not Ready, or the agent working on it. */
const unavailable = (node: k8s.V1Node): boolean =>
  node.spec?.unschedulable === true ||
  !isReady(node) ||
  node.metadata?.annotations?.[ANNOTATIONS.state] === NODE_STATES.working;

export class AvailabilityWatcher {
  max = 0;
  events = 0;
  #state = new Map<string, boolean>();
  readonly #watch: RestartingWatch<k8s.V1Node>;
  #nodes: Set<string>;

  constructor(kc: k8s.KubeConfig, nodes: Iterable<string>) {
    this.#watch = new RestartingWatch(kc, '/api/v1/nodes', {}, (type, node) => this.#observe(type, node));
    this.#nodes = new Set(nodes);
  }

  start(): Promise<void> {
    return this.#watch.start();
  }

  stop(): void {
    this.#watch.stop();
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
