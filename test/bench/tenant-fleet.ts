/**
 * The fleet of the cost-per-tenant benchmark (tenants.ts): guest clusters as the test bed starts them (etcd,
 * apiserver, KWOK), each with its CAPI kubeconfig Secret in its own tenant namespace of the management cluster,
 * KWOK Nodes, and NodePools whose Machines name those Nodes (no Cluster API manager runs: the Machines are what
 * it would have made); and every Kindling component as its own process, as the image runs it.
 */
import { readFileSync } from 'node:fs';
import { constants } from 'node:os';
import { join } from 'node:path';
import * as k8s from '#k8s';
import type { NodePool } from '../../api/src/nodepool.js';
import { createTestMachine, createTestNode } from '../../drainer/testing/index.js';
import {
  ignitionServerArgs,
  KINDLING_BIN,
  opsMetrics,
  type IgnitionServerFiles,
} from '../../ignition-server/testing/index.js';
import { withJemalloc } from '../../support/src/malloc.js';
import { freePort, ManagedProcess, startCluster, treeRssBytes, type Cluster } from '../bed/src/index.js';
import { inFlight } from './in-flight.js';
import { processCpuSeconds } from './cpu-seconds.js';

export const COMPONENTS = ['nodepool-controller', 'ignition-server', 'inplace-upgrader', 'drainer'] as const;
export type Component = (typeof COMPONENTS)[number];

/** Requests of the fleet's set-up in flight at once. */
const SETUP_IN_FLIGHT = 16;

const tenantNamespace = (i: number): string => `tenant-${i}`;

export interface Guest {
  index: number;
  namespace: string;
  cluster: Cluster;
  /** KWOK Nodes created so far (each named by a pool's Machine). */
  nodes: number;
}

export interface FleetSpec {
  mgmt: Cluster;
  release: string;
  /** NodePools per guest; the guest's Nodes are shared out among them. */
  pools: number;
}

function nodePool(namespace: string, name: string, spec: { release: string; replicas: number }): NodePool {
  return {
    apiVersion: 'kindling.dev/v1beta1',
    kind: 'NodePool',
    metadata: { name, namespace },
    spec: {
      clusterName: 'guest',
      release: { image: spec.release },
      replicas: spec.replicas,
      // Half the pools of a guest in place, half replaced: both children (MachineSet, MachineDeployment).
      management: { upgradeType: name.endsWith('0') ? 'InPlace' : 'Replace' },
      nodeLabels: { 'example.com/pool': name },
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

/** A guest cluster named `guest` in tenant namespace `index`, with its pools (no Nodes yet). */
export async function addGuest(fleet: FleetSpec, index: number, nodesPerGuest: number): Promise<Guest> {
  const namespace = tenantNamespace(index);
  const core = fleet.mgmt.kubeConfig.makeApiClient(k8s.CoreV1Api);
  await core.createNamespace({ body: { metadata: { name: namespace } } });
  const cluster = await startCluster({
    name: 'guest',
    kwok: true,
    controllerManager: false,
    management: { cluster: fleet.mgmt, namespace },
  });
  const objects = k8s.KubernetesObjectApi.makeApiClient(fleet.mgmt.kubeConfig);
  const replicas = Math.ceil(nodesPerGuest / fleet.pools);
  for (let p = 0; p < fleet.pools; p++)
    await objects.create(nodePool(namespace, `pool-${p}`, { release: fleet.release, replicas }));
  return { index, namespace, cluster, nodes: 0 };
}

/** Grows a guest to `nodes` KWOK Nodes, each with the Machine of one of its pools naming it. */
export async function growGuest(fleet: FleetSpec, guest: Guest, nodes: number): Promise<void> {
  const added = Array.from({ length: Math.max(0, nodes - guest.nodes) }, (_, i) => guest.nodes + i);
  await inFlight(added, SETUP_IN_FLIGHT, async (n) => {
    const pool = `pool-${n % fleet.pools}`;
    const node = `node-${String(n).padStart(3, '0')}`;
    await createTestNode(guest.cluster.kubeConfig, node);
    await createTestMachine(fleet.mgmt.kubeConfig, {
      name: `${pool}-${node}`,
      namespace: guest.namespace,
      cluster: 'guest',
      machineSet: pool,
      node,
    });
  });
  guest.nodes = Math.max(guest.nodes, nodes);
}

/** `count` more pools in a namespace (no Machines): the controller's and the ignition server's cost per pool. */
export async function addPools(fleet: FleetSpec, namespace: string, count: number): Promise<void> {
  const objects = k8s.KubernetesObjectApi.makeApiClient(fleet.mgmt.kubeConfig);
  await inFlight([...Array(count).keys()], SETUP_IN_FLIGHT, (i) =>
    objects.create(nodePool(namespace, `many-${i}`, { release: fleet.release, replicas: 1 })),
  );
}

export interface RunningComponent {
  name: Component;
  proc: ManagedProcess;
  /** Resident memory of the component's process, in bytes. */
  rssBytes(): number;
  /** CPU time the component's process has used so far, in seconds (user + system). */
  cpuSeconds(): number;
  /** The text of its ops port's /metrics (read with metric-text.ts). */
  metrics(): Promise<string>;
}

interface LaunchEnv {
  mgmt: Cluster;
  files: IgnitionServerFiles;
  namespaces: string;
  dir: string;
}

interface Ports {
  ignition: number;
  ops: number;
}

function componentArgs(name: Component, env: LaunchEnv, ports: Ports): string[] {
  const common = [
    `--kubeconfig=${env.mgmt.kubeconfigPath}`,
    `--namespaces=${env.namespaces}`,
    '--log-level=warn',
    `--ops-address=127.0.0.1:${ports.ops}`,
  ];
  const endpoint = `127.0.0.1:${ports.ignition}`;
  switch (name) {
    case 'ignition-server': {
      const opts = { kubeconfigPath: env.mgmt.kubeconfigPath, namespace: env.namespaces, port: ports.ignition };
      const cacheDir = join(env.dir, 'ignition-cache');
      return [...ignitionServerArgs(env.files, { ...opts, opsPort: ports.ops, cacheDir }), '--log-level=warn'];
    }
    case 'nodepool-controller':
      return [
        KINDLING_BIN,
        name,
        ...common,
        `--ignition-endpoint=${endpoint}`,
        `--ignition-ca-file=${env.files.caFile}`,
      ];
    case 'inplace-upgrader':
      return [
        KINDLING_BIN,
        name,
        ...common,
        `--ignition-url=https://${endpoint}`,
        `--ignition-ca-file=${env.files.caFile}`,
        '--agent-image=kindling:bench',
      ];
    case 'drainer':
      return [KINDLING_BIN, name, ...common];
  }
}

/** The guard exits with its command's status, 128 + the signal's number for a death by signal (as a shell says). */
function exitStatus(code: number | null): string {
  if (code === null || code <= 128) return `code ${code}`;
  const signal = Object.entries(constants.signals).find(([, n]) => n === code - 128)?.[0];
  return `killed by ${signal ?? `signal ${code - 128}`}`;
}

/** Every component as its own process on the admin kubeconfig, electing its leader as deployed. */
export async function startComponents(env: LaunchEnv): Promise<RunningComponent[]> {
  const ignition = await freePort();
  const running: RunningComponent[] = [];
  for (const name of COMPONENTS) {
    const ops = await freePort();
    const proc = new ManagedProcess({
      name,
      command: process.execPath,
      args: componentArgs(name, env, { ignition, ops }),
      logFile: join(env.dir, `${name}.log`),
      env: withJemalloc(process.env),
    });
    // A component that exited is named with its exit status and the end of its log (the run's folder is gone once
    // the benchmark ends): a death by signal (a crash, the OOM killer) leaves no line of its own.
    let status = '';
    void proc.exited.then((code) => void (status = exitStatus(code)));
    const pid = (): number => {
      const found = proc.commandPid();
      if (found === undefined) {
        const state = proc.alive ? 'has no process under its guard' : `exited (${status})`;
        throw new Error(`${name} ${state}; the end of its log:\n${proc.tail(40)}`);
      }
      return found;
    };
    running.push({
      name,
      proc,
      rssBytes: () => treeRssBytes(pid()),
      cpuSeconds: () => processCpuSeconds(readFileSync(`/proc/${pid()}/stat`, 'utf8')),
      metrics: () => opsMetrics(ops),
    });
  }
  return running;
}
