/**
 * The test bed of the in-place rollout tests (rollout.cluster.test.ts, rollout-halt.cluster.test.ts): a management cluster with
 * the Cluster API CRDs (no Cluster API controller runs), a KWOK guest whose Nodes are the pool's, the real
 * ignition server, one MachineSet at config h0 with a Machine per Node, a real agent per node (AgentFleet) and
 * an independent AvailabilityWatcher. The upgrader and the drainer are the tests' own: `inProcess()` builds
 * them the way both files run them.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as k8s from '#k8s';
import { Registry } from 'prom-client';
import { ANNOTATIONS, LABELS } from '../../api/src/keys.js';
import { CAPI_GROUP } from '../../api/src/capi.js';
import type { Logger } from '../../support/src/logger.js';
import { Drainer } from '../../drainer/src/drainer.js';
import { createTestMachine, createTestNode, eventually, testMachineSet } from '../../drainer/testing/index.js';
import { runIgnitionServer, type IgnitionServer } from '../../ignition-server/testing/index.js';
import { installCapiCrds, installKindlingCrds, startCluster, type Cluster } from '../../test/bed/src/index.js';
import { CachedPayloadSource, IgnitionServerPayloadSource } from '../src/payload.js';
import { isReady } from '../src/rollout-decision.js';
import { InPlaceUpgrader } from '../src/upgrader.js';
import { AgentFleet, AvailabilityWatcher, tokenSecret } from './index.js';

export const NS = 'default';
export const POOL = 'pool';
const merge = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch);

export interface MachineSetLike {
  metadata: { annotations?: Record<string, string> };
}

export interface RolloutBedOptions {
  nodes: readonly string[];
  /** Nodes are spread over this many zones (LABELS.zone), by their index. */
  zones: number;
  /** Annotations of the MachineSet beside its target and current hash h0. */
  setAnnotations?: Record<string, string>;
}

interface Parts {
  mgmt: Cluster;
  guest: Cluster;
  ignition: IgnitionServer;
  fleet: AgentFleet;
  watcher: AvailabilityWatcher;
  rootsDir: string;
}

export class RolloutBed {
  readonly mgmt: Cluster;
  readonly guest: Cluster;
  readonly ignition: IgnitionServer;
  readonly fleet: AgentFleet;
  readonly watcher: AvailabilityWatcher;
  readonly rootsDir: string;
  readonly #hashes = new Map<string, string>();

  private constructor(p: Parts) {
    ({
      mgmt: this.mgmt,
      guest: this.guest,
      ignition: this.ignition,
      fleet: this.fleet,
      watcher: this.watcher,
      rootsDir: this.rootsDir,
    } = p);
  }

  readonly core = (): k8s.CoreV1Api => this.guest.kubeConfig.makeApiClient(k8s.CoreV1Api);
  readonly custom = (): k8s.CustomObjectsApi => this.mgmt.kubeConfig.makeApiClient(k8s.CustomObjectsApi);

  /** Every Node at h0 and Done, with its Machine, every agent running and every Node Ready. */
  static async start(opts: RolloutBedOptions): Promise<RolloutBed> {
    const mgmt = await startCluster({ name: 'mgmt', controllerManager: false });
    const [guest] = await Promise.all([
      startCluster({
        name: 'tenant',
        kwok: true,
        controllerManager: false,
        management: { cluster: mgmt, namespace: NS },
      }),
      installCapiCrds(mgmt),
      installKindlingCrds(mgmt),
    ]);
    const core = guest.kubeConfig.makeApiClient(k8s.CoreV1Api);
    const rootsDir = await mkdtemp(join(tmpdir(), 'kindling-roots-'));
    const ignition = await runIgnitionServer({
      kubeconfigPath: mgmt.kubeconfigPath,
      dir: join(rootsDir, 'ignition-server'),
      namespace: NS,
    });
    const objects = k8s.KubernetesObjectApi.makeApiClient(mgmt.kubeConfig);
    const annotations = {
      [ANNOTATIONS.targetConfigHash]: 'h0',
      [ANNOTATIONS.currentConfigHash]: 'h0',
      ...opts.setAnnotations,
    };
    await objects.create(
      testMachineSet({ name: POOL, namespace: NS, cluster: 'tenant', replicas: opts.nodes.length, annotations }),
    );
    await Promise.all(
      opts.nodes.map(async (name, i) => {
        await createTestNode(guest.kubeConfig, name, { [LABELS.zone]: `zone-${i % opts.zones}` });
        await core.patchNode(
          {
            name,
            body: { metadata: { annotations: { [ANNOTATIONS.currentConfig]: 'h0', [ANNOTATIONS.state]: 'Done' } } },
          },
          merge,
        );
        await createTestMachine(mgmt.kubeConfig, {
          name: `${POOL}-${name}`,
          namespace: NS,
          cluster: 'tenant',
          machineSet: POOL,
          node: name,
        });
      }),
    );
    const fleet = new AgentFleet({ guest: guest.kubeConfig, rootsDir });
    await fleet.start();
    const watcher = new AvailabilityWatcher(guest.kubeConfig, opts.nodes);
    await watcher.start();
    await eventually(
      'every node to be Ready',
      async () => (await core.listNode()).items.filter(isReady).length === opts.nodes.length,
    );
    return new RolloutBed({ mgmt, guest, ignition, fleet, watcher, rootsDir });
  }

  /** The upgrader and the drainer as both files run them in process (not started). */
  inProcess(log: Logger): { upgrader: InPlaceUpgrader; drainer: Drainer } {
    const registry = new Registry();
    const payloads = new CachedPayloadSource(
      new IgnitionServerPayloadSource({
        kubeConfig: this.mgmt.kubeConfig,
        url: this.ignition.url,
        caPem: this.ignition.caPem,
      }),
    );
    return {
      upgrader: new InPlaceUpgrader({
        kubeConfig: this.mgmt.kubeConfig,
        namespaces: [NS],
        log,
        payloads,
        agentImage: 'kindling:test',
        registry,
        resyncMs: 2_000,
      }),
      drainer: new Drainer({
        kubeConfig: this.mgmt.kubeConfig,
        namespaces: [NS],
        log,
        registry,
        defaultDrainTimeoutMs: 0,
      }),
    };
  }

  async machineSet(): Promise<MachineSetLike> {
    return (await this.custom().getNamespacedCustomObject({
      group: CAPI_GROUP,
      version: 'v1beta2',
      namespace: NS,
      plural: 'machinesets',
      name: POOL,
    })) as MachineSetLike;
  }

  patchSet(body: object): Promise<unknown> {
    return this.custom().patchNamespacedCustomObject(
      { group: CAPI_GROUP, version: 'v1beta2', namespace: NS, plural: 'machinesets', name: POOL, body },
      merge,
    );
  }

  annotateSet(annotations: Record<string, string | null>): Promise<unknown> {
    return this.patchSet({ metadata: { annotations } });
  }

  /** Every node of the guest cluster: all of them are the pool's. */
  async nodes(): Promise<k8s.V1Node[]> {
    return (await this.core().listNode()).items;
  }

  fileOn(node: string, path: string): Promise<string> {
    return readFile(join(this.fleet.rootOf(node), path), 'utf8');
  }

  /** The config hash of a target by the name the test gave it (h0, the nodes' first, is never targeted). */
  hash(name: string): string {
    return this.#hashes.get(name) ?? name;
  }

  /**
   * What the nodepool-controller does for a new config: the token Secret (the server mints and renders), the
   * target; `name` stands for its config hash in the test (hash()).
   */
  async target(name: string, docs: object[], annotations: Record<string, string> = {}): Promise<void> {
    const { hash, secret } = await tokenSecret(this.mgmt.kubeConfig, {
      namespace: NS,
      pool: POOL,
      cluster: 'tenant',
      release: this.ignition.release,
      config: docs,
    });
    this.#hashes.set(name, hash);
    await this.mgmt.kubeConfig.makeApiClient(k8s.CoreV1Api).createNamespacedSecret({ namespace: NS, body: secret });
    await this.annotateSet({ [ANNOTATIONS.targetConfigHash]: hash, ...annotations });
  }

  completed(hash: string, timeoutMs: number): Promise<MachineSetLike> {
    return eventually(
      `the rollout to ${hash} to complete`,
      async () => {
        const ms = await this.machineSet();
        return ms.metadata.annotations?.[ANNOTATIONS.currentConfigHash] === hash ? ms : undefined;
      },
      timeoutMs,
      250,
    );
  }

  /** The fleet, the ignition server and both clusters; the tests stop their own upgrader and drainer first. */
  async stop(): Promise<void> {
    this.watcher.stop();
    await Promise.all([this.fleet.stop(), this.ignition.stop()]);
    await Promise.all([this.guest.stop(), this.mgmt.stop()]);
    await rm(this.rootsDir, { recursive: true, force: true });
  }
}
