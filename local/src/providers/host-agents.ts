/**
 * Hosts run the in-place agent for real: when the upgrader's agent Pod lands on the Node of a local host, the
 * host runs `kindling agent` as a local process with its root set to the host folder (the Pod itself stays
 * KWOK's, like every other Pod). The process is what the kubelet would run for that Pod: restarted when it
 * exits (a simulated reboot exits, and the restarted agent resumes from its journal and the annotations), and
 * stopped when the Pod goes. It uses the agent ServiceAccount's own token (TokenRequest) bound to the agent
 * Pod, as the kubelet's projected token is, so the agent's guest RBAC and the policy that holds it to its own
 * Node (keyed on the token's node-name claim) are the ones exercised here.
 */
import { access, mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as k8s from '#k8s';
import { LABELS } from '../../../api/src/keys.js';
import { agentTokenRequest } from '../../../inplace-upgrader/src/desired.js';
import { AGENT_SERVICE_ACCOUNT, GUEST_NAMESPACE } from '../../../api/src/node-agent.js';
import { GuestClusters, type GuestCluster } from '../../../support/src/guest-clusters.js';
import { ResilientInformer } from '../../../support/src/informer.js';
import type { Logger } from '../../../support/src/logger.js';
import { ManagedProcess } from '../../../test/bed/src/process.js';
import { tokenKubeconfig } from '../credentials.js';

const KINDLING = fileURLToPath(new URL('../../../../bin/kindling.js', import.meta.url));
/** The agent token's lifetime; each start of the agent gets a new one, bound to its Pod. */
const TOKEN_SECONDS = 24 * 3600;
const RESTART_DELAY_MS = 200;

const exists = (p: string): Promise<boolean> =>
  access(p).then(
    () => true,
    () => false,
  );

export interface HostAgentsOptions {
  kubeConfig: k8s.KubeConfig;
  stateDir: string;
  log: Logger;
  /** The root folder of the host behind a guest Node, from the management namespace of its cluster. */
  hostRoot: (namespace: string, node: string) => string;
}

class ClusterAgents {
  readonly #cluster: GuestCluster;
  readonly #opts: HostAgentsOptions;
  readonly #informer: ResilientInformer<k8s.V1Pod>;
  /** Node → its agent process and the uid of the Pod its token is bound to. */
  readonly #running = new Map<string, { proc: ManagedProcess; uid: string }>();
  /** Nodes whose agent is being started (credentials in flight), so two events start one process. */
  readonly #starting = new Set<string>();
  #closed = false;

  constructor(cluster: GuestCluster, opts: HostAgentsOptions) {
    this.#cluster = cluster;
    this.#opts = opts;
    const core = cluster.kubeConfig.makeApiClient(k8s.CoreV1Api);
    this.#informer = new ResilientInformer<k8s.V1Pod>({
      kubeConfig: cluster.kubeConfig,
      path: `/api/v1/namespaces/${GUEST_NAMESPACE}/pods`,
      labelSelector: LABELS.agentPod,
      list: () => core.listNamespacedPod({ namespace: GUEST_NAMESPACE, labelSelector: LABELS.agentPod }),
      log: cluster.log,
      onEvent: (pod) => void this.#sync(pod.spec?.nodeName),
    });
  }

  start(): Promise<void> {
    return this.#informer.start();
  }

  async close(): Promise<void> {
    this.#closed = true;
    await this.#informer.stop();
    await Promise.all([...this.#running.values()].map((r) => r.proc.stop()));
    this.#running.clear();
  }

  /** The agent Pod the host behind this node should run now: one bound to it and not going. */
  #wanted(node: string): k8s.V1Pod | undefined {
    if (this.#closed) return undefined;
    return this.#informer.list().find((p) => p.spec?.nodeName === node && !p.metadata?.deletionTimestamp);
  }

  async #sync(node: string | undefined): Promise<void> {
    if (!node) return;
    const pod = this.#wanted(node);
    await this.#stopStale(node, pod?.metadata?.uid);
    if (!pod || this.#running.has(node) || this.#starting.has(node)) return;
    this.#starting.add(node);
    try {
      const root = this.#opts.hostRoot(this.#cluster.namespace, node);
      // Only local hosts run agents: a Node of another kind (or a host not booted yet) keeps the Pod KWOK's alone.
      if (await exists(root)) {
        const kubeconfig = await this.#kubeconfigFile(node, pod);
        await mkdir(join(this.#opts.stateDir, 'logs', 'agents'), { recursive: true });
        this.#launch(node, root, kubeconfig, pod);
      }
    } catch (err) {
      this.#cluster.log.warn({ err, node }, 'Could not start the host agent; retrying');
      setTimeout(() => void this.#sync(node), 2000).unref();
    } finally {
      this.#starting.delete(node);
    }
  }

  /** A process of a Pod that went (or was replaced) holds a token bound to that Pod: it goes with it. */
  async #stopStale(node: string, uid: string | undefined): Promise<void> {
    const running = this.#running.get(node);
    if (!running || running.uid === uid) return;
    this.#running.delete(node);
    await running.proc.stop();
  }

  #launch(node: string, root: string, kubeconfig: string, pod: k8s.V1Pod): void {
    const uid = pod.metadata?.uid ?? '';
    if (this.#wanted(node)?.metadata?.uid !== uid) return;
    const logs = join(this.#opts.stateDir, 'logs', 'agents');
    const proc = new ManagedProcess({
      name: `agent ${node}`,
      command: process.execPath,
      args: [
        KINDLING,
        'agent',
        `--node=${node}`,
        `--root=${root}`,
        `--namespace=${GUEST_NAMESPACE}`,
        `--kubeconfig=${kubeconfig}`,
        '--reboot=simulated',
        '--poll=2s',
      ],
      logFile: join(logs, `${node}.log`),
    });
    this.#running.set(node, { proc, uid });
    this.#cluster.log.info({ node, root }, 'Host agent started');
    void proc.exited.then((code) => {
      if (this.#running.get(node)?.proc !== proc) return;
      this.#running.delete(node);
      // Exit 0 is a simulated reboot; anything else a crash. Either way the kubelet would start it again.
      this.#cluster.log.info(
        { node, code },
        code === 0 ? 'Host rebooted; restarting its agent' : 'Host agent exited; restarting it',
      );
      setTimeout(() => void this.#sync(node), RESTART_DELAY_MS).unref();
    });
  }

  async #kubeconfigFile(node: string, pod: k8s.V1Pod): Promise<string> {
    const core = this.#cluster.kubeConfig.makeApiClient(k8s.CoreV1Api);
    const request = await core.createNamespacedServiceAccountToken({
      name: AGENT_SERVICE_ACCOUNT,
      namespace: GUEST_NAMESPACE,
      body: agentTokenRequest(pod, TOKEN_SECONDS),
    });
    const dir = join(this.#opts.stateDir, 'credentials', 'agents');
    await mkdir(dir, { recursive: true });
    const file = join(dir, `${this.#cluster.namespace}.${this.#cluster.name}.${node}.kubeconfig`);
    await writeFile(
      file,
      tokenKubeconfig(this.#cluster.kubeConfig, AGENT_SERVICE_ACCOUNT, request.status?.token ?? ''),
      { mode: 0o600 },
    );
    return file;
  }
}

/** One agent set per guest cluster, opened and closed as the clusters' kubeconfig Secrets come and go. */
export function startHostAgents(opts: HostAgentsOptions): GuestClusters<ClusterAgents> {
  return new GuestClusters<ClusterAgents>({
    kubeConfig: opts.kubeConfig,
    // The hosts of every tenant: the local providers stand for the infrastructure provider, not for Kindling.
    namespaces: 'all',
    log: opts.log,
    create: (cluster) => new ClusterAgents(cluster, opts),
    start: (agents) => agents.start(),
    close: (agents) => agents.close(),
  });
}
