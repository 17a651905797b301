/**
 * Hosts run the in-place agent for real: when the upgrader's agent Pod lands on the Node of a local host, the
 * host runs `kindling agent` as a local process with its root set to the host folder (the Pod itself stays
 * KWOK's, like every other Pod). The process is what the kubelet would run for that Pod: restarted when it
 * exits (a simulated reboot exits, and the restarted agent resumes from its journal and the annotations), and
 * stopped when the Pod goes. It uses the agent ServiceAccount's own token (TokenRequest), so the agent's
 * guest RBAC is the one exercised here.
 */
import { access, mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as k8s from '@kubernetes/client-node';
import { LABELS } from '../../../api/src/keys.js';
import { AGENT_SERVICE_ACCOUNT, GUEST_NAMESPACE } from '../../../inplace-upgrader/src/desired.js';
import { GuestClusters, type GuestCluster } from '../../../support/src/guest-clusters.js';
import { ResilientInformer } from '../../../support/src/informer.js';
import type { Logger } from '../../../support/src/logger.js';
import { ManagedProcess } from '../../../test/bed/src/process.js';
import { tokenKubeconfig } from '../credentials.js';

const KINDLING = fileURLToPath(new URL('../../../../bin/kindling.js', import.meta.url));
/** The agent token's lifetime; a new one is requested once half of it has passed. */
const TOKEN_SECONDS = 24 * 3600;
const RESTART_DELAY_MS = 200;

const exists = (p: string): Promise<boolean> => access(p).then(() => true, () => false);

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
  readonly #running = new Map<string, ManagedProcess>();
  /** Nodes whose agent is being started (credentials in flight), so two events start one process. */
  readonly #starting = new Set<string>();
  #credentials: { file: string; renewAt: number } | undefined;
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
    await Promise.all([...this.#running.values()].map((p) => p.stop()));
    this.#running.clear();
  }

  /** Whether the host behind this node should run its agent now: an agent Pod is bound to it and not going. */
  #wanted(node: string): boolean {
    return !this.#closed && this.#informer.list().some((p) => p.spec?.nodeName === node && !p.metadata?.deletionTimestamp);
  }

  async #sync(node: string | undefined): Promise<void> {
    if (!node) return;
    const running = this.#running.get(node);
    if (!this.#wanted(node)) {
      this.#running.delete(node);
      await running?.stop();
      return;
    }
    if (running || this.#starting.has(node)) return;
    this.#starting.add(node);
    try {
      const root = this.#opts.hostRoot(this.#cluster.namespace, node);
      // Only local hosts run agents: a Node of another kind (or a host not booted yet) keeps the Pod KWOK's alone.
      if (await exists(root)) {
        const kubeconfig = await this.#kubeconfigFile();
        await mkdir(join(this.#opts.stateDir, 'logs', 'agents'), { recursive: true });
        this.#launch(node, root, kubeconfig);
      }
    } catch (err) {
      this.#cluster.log.warn({ err, node }, 'Could not start the host agent; retrying');
      setTimeout(() => void this.#sync(node), 2000).unref();
    } finally {
      this.#starting.delete(node);
    }
  }

  #launch(node: string, root: string, kubeconfig: string): void {
    if (!this.#wanted(node)) return;
    const logs = join(this.#opts.stateDir, 'logs', 'agents');
    const proc = new ManagedProcess({
      name: `agent ${node}`,
      command: process.execPath,
      args: [KINDLING, 'agent', `--node=${node}`, `--root=${root}`, `--namespace=${GUEST_NAMESPACE}`, `--kubeconfig=${kubeconfig}`, '--reboot=simulated', '--poll=2s'],
      logFile: join(logs, `${node}.log`),
    });
    this.#running.set(node, proc);
    this.#cluster.log.info({ node, root }, 'Host agent started');
    void proc.exited.then((code) => {
      if (this.#running.get(node) !== proc) return;
      this.#running.delete(node);
      // Exit 0 is a simulated reboot; anything else a crash. Either way the kubelet would start it again.
      this.#cluster.log.info({ node, code }, code === 0 ? 'Host rebooted; restarting its agent' : 'Host agent exited; restarting it');
      setTimeout(() => void this.#sync(node), RESTART_DELAY_MS).unref();
    });
  }

  async #kubeconfigFile(): Promise<string> {
    if (this.#credentials && Date.now() < this.#credentials.renewAt) return this.#credentials.file;
    const core = this.#cluster.kubeConfig.makeApiClient(k8s.CoreV1Api);
    const request = await core.createNamespacedServiceAccountToken({
      name: AGENT_SERVICE_ACCOUNT,
      namespace: GUEST_NAMESPACE,
      body: { spec: { audiences: [], expirationSeconds: TOKEN_SECONDS } },
    });
    const dir = join(this.#opts.stateDir, 'credentials', 'agents');
    await mkdir(dir, { recursive: true });
    const file = join(dir, `${this.#cluster.namespace}.${this.#cluster.name}.kubeconfig`);
    await writeFile(file, tokenKubeconfig(this.#cluster.kubeConfig, AGENT_SERVICE_ACCOUNT, request.status?.token ?? ''), { mode: 0o600 });
    this.#credentials = { file, renewAt: Date.now() + (TOKEN_SECONDS * 1000) / 2 };
    return file;
  }
}

/** One agent set per guest cluster, opened and closed as the clusters' kubeconfig Secrets come and go. */
export function startHostAgents(opts: HostAgentsOptions): GuestClusters<ClusterAgents> {
  return new GuestClusters<ClusterAgents>({
    kubeConfig: opts.kubeConfig,
    log: opts.log,
    create: (cluster) => new ClusterAgents(cluster, opts),
    start: (agents) => agents.start(),
    close: (agents) => agents.close(),
  });
}
