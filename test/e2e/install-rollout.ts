/**
 * What install.test.ts measures while Kindling is upgraded in the middle of a tenant's in-place rollout
 * (issue 25): the payload generations of every ignition-server Pod, read from its own metrics on the ops port,
 * the configuration change that starts the rollout, and a budget that holds one node's drain meanwhile.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import * as k8s from '#k8s';
import { createApplier } from '../../support/src/apply.js';
import { NODE_NETWORK } from '../bed/src/node.js';
import { eventually, type Cluster } from '../bed/src/index.js';
import { SYSTEM_NS, TENANT_NS } from './install.js';
import { patchPool } from './install-tenant.js';

const run = promisify(execFile);
const GENERATED = /^kindling_ignition_payload_generation_seconds_count\{[^}]*outcome="success"[^}]*\} (\d+)$/m;

/** A Pod's metrics, fetched from inside the node's namespace (the machine has no route to the Pods). */
async function podMetrics(ip: string): Promise<string> {
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

/** Payloads generated, from a Pod's metrics; undefined before its first generation (no sample yet). */
function generatedCount(metrics: string): number | undefined {
  const match = GENERATED.exec(metrics);
  return match ? Number(match[1]) : undefined;
}

/**
 * Samples every ignition-server Pod's count of payloads generated, every `periodMs`, keeping the highest seen
 * per Pod (a Pod replaced by the upgrade keeps its last sample).
 */
export class GenerationSampler {
  readonly generated = new Map<string, number>();
  #timer: NodeJS.Timeout | undefined;
  #sampling: Promise<void> = Promise.resolve();

  constructor(
    private readonly mgmt: Cluster,
    private readonly periodMs = 2000,
  ) {}

  start(): void {
    this.#timer = setInterval(() => {
      this.#sampling = this.#sampling.then(() => this.sample());
    }, this.periodMs);
  }

  async stop(): Promise<Map<string, number>> {
    clearInterval(this.#timer);
    await this.#sampling;
    await this.sample();
    return this.generated;
  }

  async sample(): Promise<void> {
    const core = this.mgmt.kubeConfig.makeApiClient(k8s.CoreV1Api);
    const { items } = await core
      .listNamespacedPod({ namespace: SYSTEM_NS, labelSelector: 'app.kubernetes.io/name=kindling-ignition-server' })
      .catch(() => ({ items: [] as k8s.V1Pod[] }));
    await Promise.all(items.map((pod) => this.#samplePod(pod)));
  }

  async #samplePod(pod: k8s.V1Pod): Promise<void> {
    const ip = pod.status?.podIP;
    if (ip === undefined || pod.metadata?.deletionTimestamp) return;
    // A Pod not serving yet (or gone between the list and the fetch) is sampled at the next round.
    const count = generatedCount(await podMetrics(ip).catch(() => ''));
    if (count === undefined) return;
    const name = pod.metadata?.name ?? '';
    this.generated.set(name, Math.max(count, this.generated.get(name) ?? 0));
  }
}

/** A MachineConfig of the pool (a motd), which changes every host's payload: an in-place rollout of the pool. */
export async function addMotd(mgmt: Cluster, text: string): Promise<void> {
  const config = [
    'apiVersion: machineconfiguration.openshift.io/v1',
    'kind: MachineConfig',
    'metadata: { name: 99-motd }',
    'spec:',
    '  config:',
    '    ignition: { version: 3.2.0 }',
    '    storage:',
    '      files:',
    `        - { path: /etc/motd, mode: 420, contents: { source: "data:,${encodeURIComponent(text)}" } }`,
    '',
  ].join('\n');
  await createApplier(mgmt.kubeConfig, 'kindling-install').apply({
    apiVersion: 'v1',
    kind: 'ConfigMap',
    metadata: { name: 'motd', namespace: TENANT_NS },
    data: { config },
  } as k8s.KubernetesObject);
  await patchPool(mgmt, { spec: { config: [{ name: 'motd' }] } });
}

const HOLD = { namespace: 'default', name: 'hold' };

/**
 * One Pod on a node of the pool behind a budget that allows no disruption: that node's drain waits until
 * releaseHold(), so the rollout is still under way, with a drain in progress, whenever the test upgrades Kindling.
 * Returns the node the Pod landed on.
 */
export async function holdOneNode(guest: Cluster): Promise<string> {
  const labels = { app: HOLD.name };
  const applier = createApplier(guest.kubeConfig, 'kindling-install');
  await applier.apply({
    apiVersion: 'policy/v1',
    kind: 'PodDisruptionBudget',
    metadata: HOLD,
    spec: { minAvailable: 1, selector: { matchLabels: labels } },
  } as k8s.KubernetesObject);
  await applier.apply({
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: HOLD,
    spec: {
      replicas: 1,
      selector: { matchLabels: labels },
      template: {
        metadata: { labels },
        spec: {
          nodeSelector: { 'kindling.dev/pool': 'inplace' },
          containers: [{ name: 'pause', image: 'registry.k8s.io/pause:3.10' }],
        },
      },
    },
  } as k8s.KubernetesObject);
  const core = guest.kubeConfig.makeApiClient(k8s.CoreV1Api);
  return eventually(
    'the held Pod running',
    async () => {
      const { items } = await core.listNamespacedPod({ namespace: HOLD.namespace, labelSelector: `app=${HOLD.name}` });
      const pod = items.find((p) => p.status?.phase === 'Running');
      return pod?.spec?.nodeName;
    },
    2 * 60_000,
    500,
  );
}

/** Lets the held node's drain go on. */
export async function releaseHold(guest: Cluster): Promise<void> {
  await guest.kubeConfig.makeApiClient(k8s.PolicyV1Api).deleteNamespacedPodDisruptionBudget(HOLD);
}
