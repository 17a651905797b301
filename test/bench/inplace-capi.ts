/**
 * The ClusterAPI engine of the in-place rollout benchmark (inplace.ts --engine ClusterAPI): a NodePool on the
 * ClusterAPI engine, whose MachineDeployment the real Cluster API manager (RuntimeSDK, InPlaceUpdates) updates
 * in place by calling Kindling's Runtime Extension (`kindling inplace-upgrader --extension-address`, its own
 * process, registered by an ExtensionConfig), which drives the agent protocol with the central drainer.
 *
 * Real: both test-bed clusters, the Cluster API manager and its webhooks, the nodepool-controller (writes the
 * MachineDeployment, the KindlingConfigTemplate per hash, and answers each KindlingConfig as the bootstrap
 * provider), the ignition server, the extension, the drainer. Simulated: the agents (simulated-agents.ts) and
 * the infrastructure — each LocalMachine is reported provisioned at once and its Node is a KWOK Node with its
 * providerID (booting hosts is not what is measured), and the LocalControlPlane is reported initialized.
 *
 * Besides the total it times each Machine's steps, to say where Cluster API's time goes: Cluster API picks
 * the Machine (its update-in-progress annotation appears), first UpdateMachine call, the agent takes it up,
 * the agent is done, UpdateMachine answers done, Cluster API clears the annotation, and the next pick.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as k8s from '#k8s';
import { Registry } from 'prom-client';
import { CAPI_API_VERSION, CAPI_GROUP, type Machine } from '../../api/src/capi.js';
import { ANNOTATIONS, LABELS } from '../../api/src/keys.js';
import type { NodePool } from '../../api/src/nodepool.js';
import { BOOTSTRAP_GROUP_NAME, type KindlingConfig } from '../../api/src/bootstrap.js';
import { createApplier } from '../../support/src/apply.js';
import { ResilientInformer } from '../../support/src/informer.js';
import type { Logger } from '../../support/src/logger.js';
import { Drainer } from '../../drainer/src/drainer.js';
import { createNodePoolController } from '../../nodepool-controller/src/controller.js';
import { AvailabilityWatcher, extensionConfig, runExtension } from '../../inplace-upgrader/testing/index.js';
import { runIgnitionServer } from '../../ignition-server/testing/index.js';
import { LOCAL_CRD_DIR } from '../../local/src/crds.js';
import {
  eventually,
  installCapiCrds,
  installCrds,
  installKindlingCrds,
  startCapiManager,
  startCluster,
} from '../bed/src/index.js';
import { now, SimulatedAgents, type EngineRun, type RolloutResult } from './simulated-agents.js';

const NS = 'default';
const POOL = 'bench';
const CLUSTER = 'guest';
const FROM = '1.36.2';
const TO = '1.36.3';
const merge = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch);

type MachineObject = Machine &
  k8s.KubernetesObject & { status?: Machine['status'] & { conditions?: { type: string; status: string }[] } };
interface LocalMachine extends k8s.KubernetesObject {
  metadata: k8s.V1ObjectMeta & { name: string; namespace: string };
  spec?: { providerID?: string };
  status?: { initialization?: { provisioned?: boolean } };
}

interface HookLine {
  /** ISO time (the logger's). */
  time: string;
  object?: string;
  message?: string;
  durationMs?: number;
}

/** One Machine's in-place update as Cluster API and the extension saw it (epoch ms). */
interface MachineTimes {
  picked?: number;
  released?: number;
  firstCall?: number;
  doneAnswer?: number;
}

function pool(n: number, k: number, release: string): NodePool {
  return {
    apiVersion: 'kindling.dev/v1beta1',
    kind: 'NodePool',
    metadata: { name: POOL, namespace: NS },
    spec: {
      clusterName: CLUSTER,
      release: { image: release },
      replicas: n,
      management: { upgradeType: 'InPlace', inPlace: { engine: 'ClusterAPI', maxUnavailable: k } },
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
 * The infrastructure and control-plane providers, simulated: a LocalMachine is provisioned at once, with a
 * providerID and a KWOK Node of that providerID (annotated at its KindlingConfig's hash, as the agent leaves a
 * booted host); the LocalControlPlane reports itself initialized (the guest apiserver is already up).
 */
class SimulatedInfrastructure {
  #informer: ResilientInformer<LocalMachine>;
  #custom: k8s.CustomObjectsApi;
  #guest: k8s.CoreV1Api;
  #seen = new Set<string>();
  #log: Logger;

  constructor(mgmt: k8s.KubeConfig, guest: k8s.KubeConfig, log: Logger) {
    this.#custom = mgmt.makeApiClient(k8s.CustomObjectsApi);
    this.#guest = guest.makeApiClient(k8s.CoreV1Api);
    this.#log = log;
    const list = async (): Promise<k8s.KubernetesListObject<LocalMachine>> =>
      (await this.#custom.listNamespacedCustomObject({
        group: 'infrastructure.kindling.dev',
        version: 'v1alpha1',
        namespace: NS,
        plural: 'localmachines',
      })) as k8s.KubernetesListObject<LocalMachine>;
    this.#informer = new ResilientInformer<LocalMachine>({
      kubeConfig: mgmt,
      path: `/apis/infrastructure.kindling.dev/v1alpha1/namespaces/${NS}/localmachines`,
      list,
      log,
      onEvent: (lm) => void this.#provision(lm),
    });
  }

  start(): Promise<void> {
    return this.#informer.start();
  }

  stop(): Promise<void> {
    return this.#informer.stop();
  }

  async #provision(lm: LocalMachine): Promise<void> {
    const name = lm.metadata.name;
    if (this.#seen.has(name)) return;
    this.#seen.add(name);
    await this.#boot(name).catch((err: unknown) => {
      // Tried again on the LocalMachine's next event.
      this.#seen.delete(name);
      this.#log.error({ err, localMachine: name }, 'Simulated provisioning failed');
    });
  }

  async #boot(name: string): Promise<void> {
    const providerID = `kindling-bench://${NS}/${name}`;
    // The host boots what its Machine asks for: its KindlingConfig's hash and its version (Cluster API names
    // the LocalMachine and the KindlingConfig after the Machine, and creates both before the LocalMachine is provisioned).
    const [config, machine] = await eventually(
      `the Machine and KindlingConfig of ${name}`,
      async () => {
        const get = (group: string, version: string, plural: string): Promise<unknown> =>
          this.#custom.getNamespacedCustomObject({ group, version, namespace: NS, plural, name });
        return [
          (await get(BOOTSTRAP_GROUP_NAME, 'v1beta1', 'kindlingconfigs')) as KindlingConfig,
          (await get(CAPI_GROUP, 'v1beta2', 'machines')) as MachineObject,
        ] as const;
      },
      60_000,
      250,
    );
    const params = {
      group: 'infrastructure.kindling.dev',
      version: 'v1alpha1',
      namespace: NS,
      plural: 'localmachines',
      name,
    };
    await this.#custom.patchNamespacedCustomObject({ ...params, body: { spec: { providerID } } }, merge);
    await this.#custom.patchNamespacedCustomObjectStatus(
      { ...params, body: { status: { initialization: { provisioned: true } } } },
      merge,
    );
    await this.#guest.createNode({
      body: {
        metadata: {
          name,
          labels: { 'kubernetes.io/hostname': name },
          annotations: { [ANNOTATIONS.currentConfig]: config.spec.configHash, [ANNOTATIONS.state]: 'Done' },
        },
        spec: { providerID },
        // What the host's kubelet registers: Cluster API holds a Machine UpToDate only while its Node's kubelet is at the Machine's version.
        status: { nodeInfo: { kubeletVersion: machine.spec.version ?? '' } } as k8s.V1NodeStatus,
      },
    });
  }
}

/** Watches the pool's Machines for Cluster API's update-in-progress annotation: when each was picked and released. */
class MachineWatch {
  readonly times = new Map<string, MachineTimes>();
  readonly nodeOf = new Map<string, string>();
  #informer: ResilientInformer<MachineObject>;
  armed = false;

  constructor(mgmt: k8s.KubeConfig, log: Logger) {
    const custom = mgmt.makeApiClient(k8s.CustomObjectsApi);
    const list = async (): Promise<k8s.KubernetesListObject<MachineObject>> =>
      (await custom.listNamespacedCustomObject({
        group: CAPI_GROUP,
        version: 'v1beta2',
        namespace: NS,
        plural: 'machines',
      })) as k8s.KubernetesListObject<MachineObject>;
    this.#informer = new ResilientInformer<MachineObject>({
      kubeConfig: mgmt,
      path: `/apis/${CAPI_GROUP}/v1beta2/namespaces/${NS}/machines`,
      list,
      log,
      onEvent: (m) => this.#observe(m),
    });
  }

  list(): MachineObject[] {
    return this.#informer.list(NS).filter((m) => !m.metadata.deletionTimestamp);
  }

  start(): Promise<void> {
    return this.#informer.start();
  }

  stop(): Promise<void> {
    return this.#informer.stop();
  }

  #observe(m: MachineObject): void {
    const name = m.metadata.name ?? '';
    const node = m.status?.nodeRef?.name;
    if (node) this.nodeOf.set(name, node);
    if (this.armed) this.#stamp(name, m.metadata.annotations?.[ANNOTATIONS.capiUpdateInProgress] !== undefined);
  }

  #stamp(name: string, updating: boolean): void {
    const t = this.times.get(name) ?? {};
    if (updating) t.picked ??= now();
    else if (t.picked !== undefined) t.released ??= now();
    this.times.set(name, t);
  }
}

/** The extension's UpdateMachine answers per Machine: the first call, and the first answer that said done. */
async function hookTimes(logFile: string, times: Map<string, MachineTimes>): Promise<void> {
  const lines = (await readFile(logFile, 'utf8')).split('\n').filter((line) => line.includes('"hook":"UpdateMachine"'));
  for (const l of lines.map((line) => JSON.parse(line) as HookLine)) {
    const t = times.get(l.object?.split('/')[1] ?? '');
    if (!t) continue;
    // pino stamps the line when the answer is written; the call came durationMs earlier.
    const at = Date.parse(l.time);
    t.firstCall ??= at - (l.durationMs ?? 0);
    if (/ is at /.test(l.message ?? '')) t.doneAnswer ??= at;
  }
}

const mean = (xs: readonly number[]): number =>
  xs.length === 0 ? Number.NaN : xs.reduce((a, b) => a + b, 0) / xs.length;
const secs = (ms: number): string => (ms / 1000).toFixed(2);

/** Where each Machine's time went, averaged over the Machines, and the gap from a release to the next pick. */
function breakdown(watch: MachineWatch, agents: SimulatedAgents, k: number): string[] {
  const spans = new Map(agents.spans.map((s) => [s.node, s]));
  const rows = [...watch.times.entries()].flatMap(([machine, t]) => {
    const s = spans.get(watch.nodeOf.get(machine) ?? '');
    return s &&
      t.picked !== undefined &&
      t.released !== undefined &&
      t.firstCall !== undefined &&
      t.doneAnswer !== undefined
      ? [{ ...t, picked: t.picked, released: t.released, firstCall: t.firstCall, doneAnswer: t.doneAnswer, s }]
      : [];
  });
  const step = (f: (r: (typeof rows)[number]) => number): string => secs(mean(rows.map(f)));
  const picks = rows.map((r) => r.picked).sort((a, b) => a - b);
  const releases = rows.map((r) => r.released).sort((a, b) => a - b);
  // Each pick after the first k waits for a slot: the gap from the latest release before it.
  const gaps = picks.slice(k).flatMap((p) => {
    const freed = releases.filter((r) => r <= p).at(-1);
    return freed === undefined ? [] : [p - freed];
  });
  return [
    `per Machine (mean over ${rows.length}): picked → first UpdateMachine ${step((r) => r.firstCall - r.picked)} s; first call → agent takes it up ${step((r) => r.s.began - r.firstCall)} s;`,
    `  agent: drain ${step((r) => (r.s.drained ?? r.s.began) - r.s.began)} s, step ${step((r) => (r.s.stepped ?? r.s.began) - (r.s.drained ?? r.s.began))} s, uncordon + Done ${step((r) => r.s.done - (r.s.stepped ?? r.s.began))} s;`,
    `  agent Done → UpdateMachine answers done ${step((r) => r.doneAnswer - r.s.done)} s; answer → Cluster API clears update-in-progress ${step((r) => r.released - r.doneAnswer)} s;`,
    `  picked → released ${step((r) => r.released - r.picked)} s; a release → the next pick ${secs(mean(gaps))} s (mean over ${gaps.length}, max ${secs(Math.max(...gaps))} s)`,
  ];
}

/** Runs one rollout of N nodes at k on the ClusterAPI engine. */
export async function runClusterApiEngine(run: EngineRun, log: Logger): Promise<RolloutResult> {
  const { n, k, stepMs, retryAfter } = run;
  const mgmt = await startCluster({ name: 'mgmt', controllerManager: false });
  const guest = await startCluster({
    name: CLUSTER,
    kwok: true,
    controllerManager: false,
    management: { cluster: mgmt, namespace: NS },
  });
  const dir = await mkdtemp(join(tmpdir(), 'kindling-bench-capi-'));
  const parts: { stop(): Promise<void> | void }[] = [];
  try {
    await Promise.all([installCapiCrds(mgmt), installKindlingCrds(mgmt), installCrds(mgmt, LOCAL_CRD_DIR)]);
    // A tenant namespace: the ExtensionConfig has the manager call the extension for those only.
    await mgmt.kubeConfig
      .makeApiClient(k8s.CoreV1Api)
      .patchNamespace(
        { name: NS, body: { metadata: { labels: { [LABELS.tenant]: 'true' } } } },
        k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
      );
    const capi = await startCapiManager(mgmt);
    parts.push(capi);
    const ignition = await runIgnitionServer({
      kubeconfigPath: mgmt.kubeconfigPath,
      dir: join(dir, 'ignition-server'),
      namespace: NS,
      releases: [FROM, TO],
      args: ['--log-level', 'warn'],
    });
    parts.push(ignition);
    const ext = await runExtension({
      namespaces: NS,
      kubeconfigPath: mgmt.kubeconfigPath,
      dir: join(dir, 'extension'),
      ignition,
      retryAfter,
    });
    parts.push(ext);
    const apply = (o: object): Promise<unknown> => createApplier(mgmt.kubeConfig, 'kindling-bench').apply(o);
    // Right after start the new CRD can still answer 429 (storage initialising): apply until it is accepted.
    await eventually(
      'the ExtensionConfig to be accepted',
      () => apply(extensionConfig({ url: ext.url, caPem: ext.caPem })).then(() => true),
      30_000,
      250,
    );

    const controller = createNodePoolController({
      kubeConfig: mgmt.kubeConfig,
      namespaces: [NS],
      log,
      workers: 4,
      registry: new Registry(),
      config: {
        ignition: { endpoint: ignition.endpoint, caPem: ignition.caPem },
        tokenGraceMs: 7_200_000,
        maxSkewMinors: 3,
      },
    });
    parts.push(controller);
    await controller.start();
    const custom = mgmt.kubeConfig.makeApiClient(k8s.CustomObjectsApi);
    const readPool = async (): Promise<NodePool> =>
      (await custom.getNamespacedCustomObject({
        group: 'kindling.dev',
        version: 'v1beta1',
        namespace: NS,
        plural: 'nodepools',
        name: POOL,
      })) as NodePool;
    const infra = new SimulatedInfrastructure(mgmt.kubeConfig, guest.kubeConfig, log);
    const watch = new MachineWatch(mgmt.kubeConfig, log);
    parts.push(infra, watch);
    await Promise.all([infra.start(), watch.start()]);

    await apply({
      apiVersion: 'controlplane.kindling.dev/v1alpha1',
      kind: 'LocalControlPlane',
      metadata: { name: CLUSTER, namespace: NS },
      spec: { adminKubeconfigSecretRef: { name: `${CLUSTER}-kubeconfig` } },
    });
    await custom.patchNamespacedCustomObjectStatus(
      {
        group: 'controlplane.kindling.dev',
        version: 'v1alpha1',
        namespace: NS,
        plural: 'localcontrolplanes',
        name: CLUSTER,
        body: { status: { initialization: { controlPlaneInitialized: true }, externalManagedControlPlane: true } },
      },
      merge,
    );
    await apply({
      apiVersion: CAPI_API_VERSION,
      kind: 'Cluster',
      metadata: { name: CLUSTER, namespace: NS },
      spec: { controlPlaneRef: { apiGroup: 'controlplane.kindling.dev', kind: 'LocalControlPlane', name: CLUSTER } },
    });
    await apply({
      apiVersion: 'infrastructure.kindling.dev/v1alpha1',
      kind: 'LocalMachineTemplate',
      metadata: { name: 'small', namespace: NS },
      spec: { template: { spec: {} } },
    });
    await apply(pool(n, k, ignition.releases[FROM] ?? ''));
    const hash = await eventually(
      'the pool to have a config hash',
      async () => (await readPool()).status?.configHash,
      120_000,
      250,
    );

    const guestCore = guest.kubeConfig.makeApiClient(k8s.CoreV1Api);
    const upToDate = (m: MachineObject): boolean =>
      m.status?.conditions?.some((c) => c.type === 'UpToDate' && c.status === 'True') === true &&
      m.metadata.annotations?.[ANNOTATIONS.capiUpdateInProgress] === undefined;
    await eventually(
      `${n} Machines Running with a Ready Node`,
      async () => {
        const ms = watch.list().filter((m) => m.status?.phase === 'Running' && m.status.nodeRef?.name);
        const ready = (await guestCore.listNode()).items.filter((x) =>
          x.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True'),
        ).length;
        return ms.length === n && ready === n;
      },
      600_000,
      500,
    );
    // A pool at rest, as before any upgrade: a MachineDeployment whose status still counts 0 replicas makes
    // Cluster API's first pass scale the old MachineSet down by deleting Machines, not by moving them in place.
    await eventually(
      'the MachineDeployment to count every Machine available and up to date',
      async () => {
        const md = (await custom.getNamespacedCustomObject({
          group: CAPI_GROUP,
          version: 'v1beta2',
          namespace: NS,
          plural: 'machinedeployments',
          name: POOL,
        })) as { status?: { availableReplicas?: number; upToDateReplicas?: number; readyReplicas?: number } };
        return md.status?.availableReplicas === n && md.status.upToDateReplicas === n && md.status.readyReplicas === n;
      },
      600_000,
      500,
    );
    const names = watch.list().map((m) => m.status?.nodeRef?.name ?? '');

    const drainer = new Drainer({
      kubeConfig: mgmt.kubeConfig,
      namespaces: [NS],
      log,
      registry: new Registry(),
      defaultDrainTimeoutMs: 0,
    });
    const agents = new SimulatedAgents(guest.kubeConfig, stepMs, `v${TO}`);
    const watcher = new AvailabilityWatcher(guest.kubeConfig, names);
    parts.push(drainer, agents, watcher);
    await Promise.all([drainer.start(), agents.start(), watcher.start()]);

    watch.armed = true;
    const started = now();
    await custom.patchNamespacedCustomObject(
      {
        group: 'kindling.dev',
        version: 'v1beta1',
        namespace: NS,
        plural: 'nodepools',
        name: POOL,
        body: { spec: { release: { image: ignition.releases[TO] } } },
      },
      merge,
    );
    const target = await eventually(
      'the pool to move to a new hash',
      async () => {
        const h = (await readPool()).status?.configHash;
        return h !== undefined && h !== hash ? h : undefined;
      },
      120_000,
      100,
    );
    await eventually(
      'the rollout to complete',
      async () => {
        const ms = watch.list();
        const nodes = (await guestCore.listNode()).items;
        return (
          ms.length === n &&
          ms.every(upToDate) &&
          nodes.length === n &&
          nodes.every((x) => x.metadata?.annotations?.[ANNOTATIONS.currentConfig] === target)
        );
      },
      3_600_000,
      100,
    );
    const ended = now();
    const replaced = watch.list().filter((m) => !watch.times.get(m.metadata.name ?? '')?.picked).length;
    await hookTimes(ext.logFile, watch.times);
    const notes = [
      `hash ${hash} → ${target}; Machines never picked for an in-place update (replaced or untouched): ${replaced}`,
      ...breakdown(watch, agents, k),
    ];
    return {
      totalSeconds: (ended - started) / 1000,
      started,
      ended,
      durations: agents.durations,
      spans: agents.spans,
      maxUnavailable: watcher.max,
      events: watcher.events,
      notes,
    };
  } finally {
    for (const p of parts.reverse()) await p.stop();
    await Promise.all([guest.stop(), mgmt.stop()]);
    await rm(dir, { recursive: true, force: true });
  }
}
