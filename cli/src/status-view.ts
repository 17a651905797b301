/**
 * `kindling status`, the view model and its text form (pure): per pool desired/current/ready, version, config
 * hash, every condition that is not fine, the hosts that have not joined, and during a rollout its progress with
 * what each node is doing (the upgrader's own classifyNode over the Node annotations of the
 * machine-config-daemon protocol).
 */
import type * as k8s from '#k8s';
import { ANNOTATIONS, DRAIN_PREFIX } from '../../api/src/keys.js';
import type { NodePool } from '../../api/src/nodepool.js';
import type { Machine, MachineDeployment, MachineSet } from '../../api/src/capi.js';
import { isFine, type Condition } from '../../api/src/conditions.js';
import { classifyNode, setMembers, type NodeView } from '../../inplace-upgrader/src/preview.js';
import { clusterApiFailure, clusterApiWaiting, hashOfBootstrap } from '../../nodepool-controller/src/preview.js';
import { table } from './plan-text.js';

type NodeState = 'waiting' | 'draining' | 'updating' | 'done' | 'degraded';

export interface NodeProgress {
  name: string;
  state: NodeState;
  reason?: string;
}

interface Rollout {
  from?: string;
  to: string;
  done: number;
  total: number;
  failure?: string;
  /** Where a node waits for the maintenance window (ANNOTATIONS.inPlaceWaiting): not a failure. */
  waiting?: string;
  nodes: NodeProgress[];
}

/** A host of the pool on its way to a Node: booted (Ignition ran, infrastructure provisioned), then joined. */
interface HostJoin {
  machine: string;
  booted: boolean;
  joined: boolean;
  /** Why its last client CSR was denied (the approver's annotation). */
  reason?: string;
}

export interface PoolStatusView {
  namespace: string;
  name: string;
  upgradeType: string;
  desired: number;
  current: number;
  ready: number;
  version: string;
  configHash: string;
  problems: Condition[];
  rollout?: Rollout;
  hosts: HostJoin[];
}

/** What one pool's status is computed from. `nodes` is undefined while its guest cluster is not reachable. */
export interface PoolObjects {
  pool: NodePool;
  child?: MachineSet | MachineDeployment;
  machines: Machine[];
  nodes?: (name: string) => k8s.V1Node | undefined;
}

export { isFine };

/** A node halting the rollout: degraded, or waiting for the maintenance window (its update held by the ceiling). */
const degradedProgress = (view: NodeView): NodeProgress => ({
  name: view.name,
  state: view.waiting ? 'waiting' : 'degraded',
  ...(view.reason === undefined ? {} : { reason: view.reason }),
});

/** What a node is doing towards `target`, by the upgrader's classification; updating splits into draining. */
export function nodeProgress(node: k8s.V1Node, target: string): NodeProgress {
  const view = classifyNode(node, target);
  if (view.phase === 'done') return { name: view.name, state: 'done' };
  if (view.phase === 'idle') return { name: view.name, state: 'waiting' };
  if (view.phase === 'degraded') return degradedProgress(view);
  const ann = node.metadata?.annotations ?? {};
  const drain = ann[ANNOTATIONS.desiredDrain];
  const draining = drain?.startsWith(DRAIN_PREFIX) === true && drain !== ann[ANNOTATIONS.lastAppliedDrain];
  if (!draining) return { name: view.name, state: 'updating' };
  return { name: view.name, state: 'draining', ...(view.blockedBy ? { reason: `blocked by ${view.blockedBy}` } : {}) };
}

/** "N of M updated", as the upgrader writes it (what follows, blocked drains, is for people). */
function parseProgress(text: string | undefined): { done: number; total: number } | undefined {
  const m = /^(\d+) of (\d+)/.exec(text ?? '');
  return m ? { done: Number(m[1]), total: Number(m[2]) } : undefined;
}

/** The MachineSet's Nodes, by the upgrader's own rule (setMembers), and what each is doing. */
function setNodes(o: PoolObjects, ms: MachineSet, target: string): NodeProgress[] {
  if (!o.nodes) return [];
  return setMembers(ms, o.machines, o.nodes)
    .members.map(({ node }) => nodeProgress(node, target))
    .sort((a, b) => a.name.localeCompare(b.name));
}

function inPlaceRollout(o: PoolObjects, ms: MachineSet): Rollout | undefined {
  const ann = ms.metadata.annotations ?? {};
  const to = ann[ANNOTATIONS.targetConfigHash];
  const from = ann[ANNOTATIONS.currentConfigHash];
  if (to === undefined || from === to) return undefined;
  const nodes = setNodes(o, ms, to);
  // The Nodes are the fresher source; the MachineSet's annotation stands in while the guest is not reachable.
  const counted =
    nodes.length > 0
      ? { done: nodes.filter((n) => n.state === 'done').length, total: nodes.length }
      : parseProgress(ann[ANNOTATIONS.inPlaceProgress]);
  return {
    ...(from === undefined ? {} : { from }),
    to,
    ...(counted ?? { done: 0, total: ms.spec.replicas ?? 0 }),
    ...halt(ann[ANNOTATIONS.inPlaceFailure], ann[ANNOTATIONS.inPlaceWaiting]),
    nodes,
  };
}

/** Where the rollout halted or waits for the window, as far as the engine says. */
const halt = (failure: string | undefined, waiting: string | undefined): Pick<Rollout, 'failure' | 'waiting'> => ({
  ...(failure ? { failure } : {}),
  ...(waiting ? { waiting } : {}),
});

/** Cluster API's own rollout of a MachineDeployment: by replacement, or in place on the ClusterAPI engine, where
 * a node Degraded towards its target halts it (the extension's annotation on its Machine). */
function deploymentRollout(o: PoolObjects, md: MachineDeployment): Rollout | undefined {
  const upToDate = md.status?.upToDateReplicas;
  const total = md.spec.replicas ?? 0;
  if (upToDate === undefined || upToDate >= total) return undefined;
  const bootstrap = md.spec.template.spec.bootstrap;
  return {
    to: hashOfBootstrap(o.pool.metadata.name, bootstrap) ?? bootstrap.dataSecretName ?? '',
    done: upToDate,
    total,
    ...halt(clusterApiFailure(o.machines), clusterApiWaiting(o.machines)),
    nodes: [],
  };
}

function rolloutOf(o: PoolObjects): Rollout | undefined {
  if (!o.child) return undefined;
  return o.child.kind === 'MachineSet' ? inPlaceRollout(o, o.child) : deploymentRollout(o, o.child);
}

/** Replica counts: the child's spec and status (Cluster API's), or the pool's spec before there is a child. */
function counts(o: PoolObjects): Pick<PoolStatusView, 'desired' | 'current' | 'ready'> {
  const status = o.child?.status ?? {};
  return {
    desired: o.child?.spec.replicas ?? o.pool.spec.replicas ?? 0,
    current: status.replicas ?? 0,
    ready: status.readyReplicas ?? 0,
  };
}

function hostJoins(machines: readonly Machine[]): HostJoin[] {
  return machines
    .filter((m) => !m.metadata.deletionTimestamp)
    .map((m) => {
      const joined = Boolean(m.status?.nodeRef?.name);
      const booted =
        joined || m.status?.conditions?.some((c) => c.type === 'InfrastructureReady' && c.status === 'True') === true;
      const reason = m.metadata.annotations?.[ANNOTATIONS.joinFailure];
      return { machine: m.metadata.name, booted, joined, ...(reason && !joined ? { reason } : {}) };
    })
    .sort((a, b) => a.machine.localeCompare(b.machine));
}

export function poolStatusView(o: PoolObjects): PoolStatusView {
  const { pool } = o;
  const status = pool.status ?? {};
  const rollout = rolloutOf(o);
  return {
    namespace: pool.metadata.namespace ?? '',
    name: pool.metadata.name,
    upgradeType: pool.spec.management.upgradeType,
    ...counts(o),
    version: status.version ?? '-',
    configHash: status.configHash ?? '-',
    problems: (status.conditions ?? []).filter((c) => !isFine(c)),
    ...(rollout ? { rollout } : {}),
    hosts: hostJoins(o.machines),
  };
}

export function progressBar(done: number, total: number, width = 20): string {
  const filled = total <= 0 ? 0 : Math.round((Math.min(done, total) / total) * width);
  return `[${'#'.repeat(filled)}${'-'.repeat(width - filled)}]`;
}

/** Hosts that have not joined yet, each booted or not: shown only while some have not. */
function joinDetails(hosts: readonly HostJoin[]): string[] {
  const waiting = hosts.filter((h) => !h.joined);
  if (waiting.length === 0) return [];
  const booted = hosts.filter((h) => h.booted).length;
  const joined = hosts.length - waiting.length;
  const rows = waiting.map((h) => [
    h.machine,
    h.booted ? `booted, not joined${h.reason ? `: ${h.reason}` : ''}` : 'provisioning',
  ]);
  return [`    hosts  ${booted} of ${hosts.length} booted, ${joined} joined`, ...table(rows, '      ')];
}

function details(v: PoolStatusView): string[] {
  const lines = [
    ...v.problems.map((c) => `    ! ${c.type} ${c.status} ${c.reason}: ${c.message}`),
    ...joinDetails(v.hosts),
  ];
  const r = v.rollout;
  if (!r) return lines;
  const what = v.upgradeType === 'InPlace' ? `${r.from ?? '(new)'} → ${r.to}` : 'machines';
  lines.push(
    `    rollout ${what}  ${progressBar(r.done, r.total)}  ${r.done} of ${r.total} ${v.upgradeType === 'InPlace' ? 'updated' : 'up to date'}`,
  );
  if (r.failure) lines.push(`    halted: ${r.failure}`);
  if (r.waiting) lines.push(`    waiting: ${r.waiting}`);
  lines.push(
    ...table(
      r.nodes.map((n) => [n.name, n.reason ? `${n.state}: ${n.reason}` : n.state]),
      '      ',
    ),
  );
  return lines;
}

export function formatStatus(views: readonly PoolStatusView[]): string {
  if (views.length === 0) return 'No NodePools found.\n';
  const rows = [
    ['NAMESPACE', 'NAME', 'TYPE', 'DESIRED', 'CURRENT', 'READY', 'VERSION', 'CONFIG HASH'],
    ...views.map((v) => [
      v.namespace,
      v.name,
      v.upgradeType,
      String(v.desired),
      String(v.current),
      String(v.ready),
      v.version,
      v.configHash,
    ]),
  ];
  const [head = '', ...lines] = table(rows, '');
  return `${[head, ...lines.flatMap((line, i) => [line, ...details(views[i] as PoolStatusView)])].join('\n')}\n`;
}
