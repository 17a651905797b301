/**
 * Test fixtures for the operator commands: a pool's world (token Secret, child, Machines, guest Nodes) as the
 * controller and the upgrader leave it, built with the controller's own desired-object functions. Never
 * imported by production code.
 */
import type * as k8s from '#k8s';
import { ANNOTATIONS, FIELD_MANAGERS, LABELS } from '../../api/src/keys.js';
import { hasMachineDeployment, type NodePool } from '../../api/src/nodepool.js';
import { CAPI_API_VERSION, type Machine, type MachineSet } from '../../api/src/capi.js';
import { nodePoolFixture } from '../../api/testing/nodepool.js';
import { goldenIn } from '../../support/testing/golden.js';
import {
  configHash,
  desiredMachineDeployment,
  desiredMachineSet,
  desiredTokenSecret,
  normaliseConfig,
  parseVersion,
  type ControlPlaneVersions,
  type Version,
} from '../../nodepool-controller/src/preview.js';
import type { PoolState } from '../src/plan.js';

const NS = 'tenant-a';
export const IMAGE = (v: string): string => `registry.local:5000/kindling/release:${v}`;

export const KUBELET = (maxPods: number): string => `kind: KubeletConfig
metadata:
  name: max-pods
spec:
  kubeletConfig:
    maxPods: ${maxPods}
`;
export const MOTD = `kind: MachineConfig
metadata:
  name: 50-motd
spec:
  config:
    storage:
      files:
        - path: /etc/motd
          contents:
            source: data:,hello
`;

export function configMap(name: string, text: string): k8s.V1ConfigMap {
  return { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name, namespace: NS }, data: { config: text } };
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** The fieldsV1 tree an apply of `obj` leaves (lists as atomic), so diff.ts sees what the controller owns. */
function fieldsV1Of(obj: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(obj).map(([k, v]) => [`f:${k}`, isObject(v) ? fieldsV1Of(v) : {}]));
}

function applied<T extends k8s.KubernetesObject>(obj: T): T {
  const { apiVersion: _a, kind: _k, ...fields } = obj;
  const managedFields = [
    {
      manager: FIELD_MANAGERS.nodepoolController,
      operation: 'Apply',
      apiVersion: obj.apiVersion,
      fieldsV1: fieldsV1Of(fields),
    },
  ];
  return { ...obj, metadata: { ...obj.metadata, managedFields } };
}

export interface NodeSpec {
  zone: string;
  ready?: boolean;
  /** Node annotations of the upgrader protocol (currentConfig is the deployed hash unless given). */
  annotations?: Record<string, string>;
}

export interface World {
  pool: NodePool;
  hash: string;
  state: PoolState;
}

export interface WorldOptions {
  name: string;
  upgradeType: 'InPlace' | 'Replace';
  version: string;
  configMaps: k8s.V1ConfigMap[];
  nodes: NodeSpec[];
  patch?: (p: NodePool) => void;
}

/** A pool converged at `version` with the given ConfigMaps: its child, token Secret, Machines and Nodes. */
export function world(opts: WorldOptions): World {
  const pool = nodePoolFixture(opts.name, NS, (p) => {
    p.metadata.uid = `uid-${opts.name}`;
    p.spec.release.image = IMAGE(opts.version);
    p.spec.replicas = opts.nodes.length;
    p.spec.config = opts.configMaps.map((c) => ({ name: c.metadata?.name ?? '' }));
    p.spec.management =
      opts.upgradeType === 'InPlace'
        ? { upgradeType: 'InPlace', inPlace: { maxUnavailable: '50%' } }
        : { upgradeType: 'Replace' };
    opts.patch?.(p);
  });
  const inputs = {
    release: pool.spec.release.image,
    config: normaliseConfig(opts.configMaps.map((c) => ({ name: c.metadata?.name ?? '', data: c.data ?? {} }))),
  };
  const hash = configHash(inputs);
  const childOpts = { hash, version: `v${opts.version}` };
  const ms = hasMachineDeployment(pool) ? undefined : applied(desiredMachineSet(pool, childOpts));
  if (ms) ms.metadata.annotations = { ...ms.metadata.annotations, [ANNOTATIONS.currentConfigHash]: hash };
  const md = hasMachineDeployment(pool) ? applied(desiredMachineDeployment(pool, childOpts)) : undefined;
  const template = (ms ?? md)?.spec.template as MachineSet['spec']['template'];
  const setName = ms ? ms.metadata.name : `${opts.name}-abcde`;
  const machines: Machine[] = opts.nodes.map((_n, i) => ({
    apiVersion: CAPI_API_VERSION,
    kind: 'Machine',
    metadata: {
      name: `${opts.name}-m${i}`,
      namespace: NS,
      labels: { ...template.metadata?.labels, [LABELS.capiSetName]: setName },
    },
    spec: { ...template.spec },
    status: { nodeRef: { name: `${opts.name}-node-${i}` }, phase: 'Running' },
  }));
  const nodes = opts.nodes.map((n, i) => guestNode(`${opts.name}-node-${i}`, n, hash));
  const state: PoolState = {
    configMaps: opts.configMaps,
    secrets: [desiredTokenSecret(pool, { hash, inputs })],
    machineSets: ms ? [ms] : [],
    machineDeployments: md ? [md] : [],
    machines,
    nodes,
  };
  return { pool, hash, state };
}

export function guestNode(name: string, n: NodeSpec, hash: string): k8s.V1Node {
  return {
    apiVersion: 'v1',
    kind: 'Node',
    metadata: {
      name,
      labels: { [LABELS.zone]: n.zone },
      annotations: { [ANNOTATIONS.currentConfig]: hash, [ANNOTATIONS.state]: 'Done', ...n.annotations },
    },
    status: { conditions: [{ type: 'Ready', status: n.ready === false ? 'False' : 'True' }] },
  };
}

/** A guest control plane at a fixed version, or unreachable. */
export function controlPlaneAt(version: string | Error): ControlPlaneVersions {
  return {
    versionOf: () =>
      version instanceof Error ? Promise.reject(version) : Promise.resolve(parseVersion(version) as Version),
  };
}

/** Compares with cli/testdata/<name>; `UPDATE_GOLDEN=1` rewrites it from the output (review the diff). */
export const assertGoldenText: (name: string, actual: string) => void = goldenIn('cli/testdata');
