/**
 * The sample pool `capi` (ClusterAPI in-place engine, 2 Machines, maxUnavailable 1) as the end-to-end tests of
 * that engine drive it: its Machines, Nodes and hosts, an in-place change of its own config document, a
 * workload of the test's own on its nodes behind a PodDisruptionBudget, and the independent watchers of an
 * update (nodes unavailable, pods available and evicted, budgets).
 */
import assert from 'node:assert/strict';
import * as k8s from '#k8s';
import { ANNOTATIONS } from '../../api/src/keys.js';
import { AvailabilityWatcher } from '../../inplace-upgrader/testing/index.js';
import { eventually } from '../bed/src/index.js';
import { PdbWatcher } from './disruption.js';
import { NS, WorkloadWatcher, type LocalEnvironment, type Machine, type Workload } from './environment.js';

const MINUTES = 60_000;
export const POOL = 'capi';
/** The test's own workload on the pool's two nodes: a drain evicts its pods one at a time, as the budget allows. */
const WEB: Workload = {
  namespace: 'default',
  name: 'capi-web',
  labelSelector: 'app=capi-web',
  replicas: 3,
  maxUnavailable: 1,
};
/** A file of the pool's own config document (ConfigMap EXTRA): a new value is a new payload, done in place. */
const EXTRA = { configMap: 'capi-extra', path: 'etc/kindling/capi-extra' } as const;

export interface CapiMachine extends Machine {
  spec?: { bootstrap?: { configRef?: { name: string }; dataSecretName?: string } };
  status?: Machine['status'] & { conditions?: { type: string; status: string; reason?: string }[] };
}

/** A pool Node's agent annotations. */
export interface NodeConfig {
  name: string;
  desired?: string;
  current?: string;
  state?: string;
}

/** What an update went through, seen from the guest independently of Kindling. */
export interface Watchers {
  nodes: AvailabilityWatcher;
  pods: WorkloadWatcher;
  pdbs: PdbWatcher;
}

/** Never more than maxUnavailable (1) nodes down and at least one seen down; pods evicted, the budget never broken. */
export function assertHeld(w: Watchers, context = ''): void {
  assert.ok(w.nodes.events > 0, `the node watcher saw Node events ${context}`);
  assert.ok(
    w.nodes.max >= 1,
    `the watcher never saw a node unavailable (${w.nodes.events} events): the bound below was not measured ${context}`,
  );
  assert.ok(w.nodes.max <= 1, `at most 1 unavailable (maxUnavailable), saw ${w.nodes.max} ${context}`);
  assert.ok(
    w.pods.evicted.size >= 1,
    `no pod of ${WEB.namespace}/${WEB.name} was evicted through the Eviction API (${w.pods.events} events): the drains did not meet the budget ${context}`,
  );
  const floor = WEB.replicas - WEB.maxUnavailable;
  assert.ok(
    Number.isFinite(w.pods.min) && w.pods.min >= floor,
    `never fewer than ${floor} of ${WEB.replicas} pods available, saw ${w.pods.min} ${context}`,
  );
  assert.ok(w.pdbs.events > 0, `the PodDisruptionBudget watcher saw the budgets ${context}`);
  assert.deepEqual(w.pdbs.violations, [], `PodDisruptionBudgets violated ${context}`);
}

export class CapiPool {
  readonly #env: LocalEnvironment;

  constructor(env: LocalEnvironment) {
    this.#env = env;
  }

  async machines(): Promise<CapiMachine[]> {
    return (await this.#env.machines(POOL)).filter((m) => !m.metadata.deletionTimestamp);
  }

  async uids(): Promise<string[]> {
    return (await this.machines()).map((m) => m.metadata.uid ?? '').sort();
  }

  async hostFiles(path: string): Promise<(string | undefined)[]> {
    return Promise.all((await this.#env.hosts(POOL)).map((h) => this.#env.hostFile(h, path)));
  }

  async ready(): Promise<boolean> {
    return (await this.condition('Ready'))?.status === 'True';
  }

  async upToDate(): Promise<boolean> {
    return (await this.machines()).every((m) =>
      m.status?.conditions?.some((c) => c.type === 'UpToDate' && c.status === 'True'),
    );
  }

  async condition(type: string): Promise<{ status: string; message?: string } | undefined> {
    return (await this.#env.pool(POOL)).status?.conditions?.find((c) => c.type === type);
  }

  async nodeConfigs(): Promise<NodeConfig[]> {
    return (await this.#env.nodes(POOL)).map((n) => {
      const ann = n.metadata?.annotations ?? {};
      return {
        name: n.metadata?.name ?? '',
        desired: ann[ANNOTATIONS.desiredConfig],
        current: ann[ANNOTATIONS.currentConfig],
        state: ann[ANNOTATIONS.state],
      };
    });
  }

  /** The first pool Node handed a payload other than `from`, once one is. */
  handedOut(from: string): Promise<NodeConfig> {
    return eventually(
      `a ${POOL} node handed a payload other than ${from}`,
      async () => (await this.nodeConfigs()).find((n) => n.desired !== undefined && n.desired !== from),
      5 * MINUTES,
      200,
    );
  }

  async deploymentPaused(): Promise<boolean> {
    const md = (await this.#env.custom.getNamespacedCustomObject({
      group: 'cluster.x-k8s.io',
      version: 'v1beta2',
      namespace: NS,
      plural: 'machinedeployments',
      name: POOL,
    })) as Machine;
    return md.metadata.annotations?.[ANNOTATIONS.capiPaused] !== undefined;
  }

  /** The pool's own config document (ConfigMap EXTRA) writing `value` into EXTRA.path: a new payload each time. */
  async setExtra(value: string): Promise<void> {
    const core = this.#env.mgmt.makeApiClient(k8s.CoreV1Api);
    const doc = [
      'apiVersion: machineconfiguration.openshift.io/v1',
      'kind: MachineConfig',
      'metadata: { name: 60-capi-extra }',
      'spec:',
      '  config:',
      '    ignition: { version: 3.2.0 }',
      `    storage: { files: [{ path: /${EXTRA.path}, mode: 420, overwrite: true, contents: { source: "data:,${value}%0A" } }] }`,
    ].join('\n');
    const body = { metadata: { name: EXTRA.configMap }, data: { config: doc } };
    const exists = await core.readNamespacedConfigMap({ name: EXTRA.configMap, namespace: NS }).then(
      () => true,
      () => false,
    );
    if (exists) {
      await core.replaceNamespacedConfigMap({ name: EXTRA.configMap, namespace: NS, body });
      return;
    }
    await core.createNamespacedConfigMap({ namespace: NS, body });
    await this.#env.patchPool(POOL, { spec: { config: [{ name: 'motd' }, { name: EXTRA.configMap }] } });
  }

  /** Every host with EXTRA.path at `value`, on the Machines `old`, each UpToDate, the pool Ready: an update in place is done. */
  updatedInPlace(old: string[], value: string): Promise<boolean> {
    return eventually(
      `every ${POOL} host with /${EXTRA.path} = ${value}, its Machine UpToDate`,
      async () => {
        const files = await this.hostFiles(EXTRA.path);
        return (
          files.length === 2 &&
          files.every((f) => f === `${value}\n`) &&
          (await this.uids()).join() === old.join() &&
          (await this.upToDate()) &&
          (await this.ready())
        );
      },
      15 * MINUTES,
      2000,
    );
  }

  /** The test's workload on the pool's nodes, once every pod runs there and its budget allows one disruption. */
  async startWorkload(): Promise<void> {
    const labels = { app: WEB.name };
    const policy = this.#env.guest.makeApiClient(k8s.PolicyV1Api);
    const core = this.#env.guest.makeApiClient(k8s.CoreV1Api);
    // A soft spread: a hard one would leave an evicted pod nowhere to go while its node is cordoned.
    const spread = {
      maxSkew: 1,
      topologyKey: 'kubernetes.io/hostname',
      whenUnsatisfiable: 'ScheduleAnyway',
      labelSelector: { matchLabels: labels },
    };
    await this.#env.guest.makeApiClient(k8s.AppsV1Api).createNamespacedDeployment({
      namespace: WEB.namespace,
      body: {
        metadata: { name: WEB.name },
        spec: {
          replicas: WEB.replicas,
          selector: { matchLabels: labels },
          template: {
            metadata: { labels },
            spec: {
              nodeSelector: { 'kindling.dev/pool': POOL },
              topologySpreadConstraints: [spread],
              containers: [{ name: 'pause', image: 'registry.k8s.io/pause:3.10' }],
            },
          },
        },
      },
    });
    await policy.createNamespacedPodDisruptionBudget({
      namespace: WEB.namespace,
      body: {
        metadata: { name: WEB.name },
        spec: { maxUnavailable: WEB.maxUnavailable, selector: { matchLabels: labels } },
      },
    });
    await eventually(
      `${WEB.namespace}/${WEB.name} running on the ${POOL} nodes, its budget allowing one disruption`,
      async () => {
        const nodes = new Set((await this.#env.nodes(POOL)).map((n) => n.metadata?.name));
        const pods = (await core.listNamespacedPod({ namespace: WEB.namespace, labelSelector: WEB.labelSelector }))
          .items;
        const running = pods.filter(
          (p) =>
            nodes.has(p.spec?.nodeName) && p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True'),
        );
        const pdb = await policy.readNamespacedPodDisruptionBudget({ name: WEB.name, namespace: WEB.namespace });
        return (
          running.length === WEB.replicas &&
          pdb.status?.currentHealthy === WEB.replicas &&
          pdb.status.disruptionsAllowed === WEB.maxUnavailable
        );
      },
      3 * MINUTES,
      1000,
    );
  }

  /** Removes the test's workload and its budget (Cluster API's own drains of a rollout then have nothing to wait for). */
  async stopWorkload(): Promise<void> {
    await this.#env.guest
      .makeApiClient(k8s.PolicyV1Api)
      .deleteNamespacedPodDisruptionBudget({ name: WEB.name, namespace: WEB.namespace });
    await this.#env.guest
      .makeApiClient(k8s.AppsV1Api)
      .deleteNamespacedDeployment({ name: WEB.name, namespace: WEB.namespace });
  }

  async startWatchers(): Promise<Watchers> {
    const env = this.#env;
    const w = {
      nodes: new AvailabilityWatcher(
        env.guest,
        (await env.nodes(POOL)).map((n) => n.metadata?.name ?? ''),
      ),
      pods: new WorkloadWatcher(env.guest, WEB),
      pdbs: new PdbWatcher(env.guest),
    };
    await Promise.all([w.nodes.start(), w.pods.start(), w.pdbs.start()]);
    return w;
  }
}

export function stopWatchers(w: Watchers): void {
  w.nodes.stop();
  w.pods.stop();
  w.pdbs.stop();
}
