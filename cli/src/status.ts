/**
 * `kindling status`: per pool desired/current/ready, version, config hash, every condition that is not fine,
 * and during a rollout a progress bar with what each node is doing (the upgrader's own classifyNode over the
 * Node annotations of the machine-config-daemon protocol). Informers feed it, so `--watch` redraws on every
 * watch event: in place on a terminal, as plain blocks otherwise.
 */
import * as k8s from '@kubernetes/client-node';
import { ANNOTATIONS, DRAIN_PREFIX, LABELS } from '../../api/src/keys.js';
import { hasMachineDeployment, NODEPOOL_API_VERSION, NODEPOOL_PLURAL, type NodePool } from '../../api/src/nodepool.js';
import { CAPI_API_VERSION, type Machine, type MachineDeployment, type MachineSet } from '../../api/src/capi.js';
import type { Condition } from '../../api/src/conditions.js';
import { COMPONENT_FLAGS, loadKubeConfig } from '../../support/src/component.js';
import { ConfigError, type FlagSpecs } from '../../support/src/config.js';
import { clusterKey, GuestClusters } from '../../support/src/guest-clusters.js';
import { ResilientInformer } from '../../support/src/informer.js';
import { createLogger, type Logger } from '../../support/src/logger.js';
import { classifyNode } from '../../inplace-upgrader/src/preview.js';
import { defineCommand, type Command, type CommandIO } from '../../support/src/command.js';
import { parsePoolRef } from './cluster.js';
import { table } from './plan-text.js';

export type NodeState = 'waiting' | 'draining' | 'updating' | 'done' | 'degraded';

export interface NodeProgress {
  name: string;
  state: NodeState;
  reason?: string;
}

export interface Rollout {
  from?: string;
  to: string;
  done: number;
  total: number;
  failure?: string;
  nodes: NodeProgress[];
}

/** A host of the pool on its way to a Node: booted (Ignition ran, infrastructure provisioned), then joined. */
export interface HostJoin {
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

/** Fine: the condition says all is as expected (or a feature is simply off). Anything else is shown. */
export function isFine(c: Condition): boolean {
  return c.status !== 'Unknown' && (c.reason === 'AsExpected' || c.reason === 'Disabled');
}

/** What a node is doing towards `target`, by the upgrader's classification; updating splits into draining. */
export function nodeProgress(node: k8s.V1Node, target: string): NodeProgress {
  const view = classifyNode(node, target);
  if (view.phase === 'done') return { name: view.name, state: 'done' };
  if (view.phase === 'idle') return { name: view.name, state: 'waiting' };
  if (view.phase === 'degraded') return { name: view.name, state: 'degraded', reason: view.reason };
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

/** The MachineSet's Nodes (its Machines' nodeRefs, as the upgrader reads them) and what each is doing. */
function setNodes(o: PoolObjects, ms: MachineSet, target: string): NodeProgress[] {
  const lookup = o.nodes;
  if (!lookup) return [];
  return o.machines
    .filter((m) => m.metadata.labels?.[LABELS.capiSetName] === ms.metadata.name && !m.metadata.deletionTimestamp)
    .flatMap((m) => {
      const node = lookup(m.status?.nodeRef?.name ?? '');
      return node ? [nodeProgress(node, target)] : [];
    })
    .sort((a, b) => a.name.localeCompare(b.name));
}

function inPlaceRollout(o: PoolObjects, ms: MachineSet): Rollout | undefined {
  const ann = ms.metadata.annotations ?? {};
  const to = ann[ANNOTATIONS.targetConfigHash];
  const from = ann[ANNOTATIONS.currentConfigHash];
  if (to === undefined || from === to) return undefined;
  const nodes = setNodes(o, ms, to);
  // The Nodes are the fresher source; the MachineSet's annotation stands in while the guest is not reachable.
  const counted = nodes.length > 0 ? { done: nodes.filter((n) => n.state === 'done').length, total: nodes.length } : parseProgress(ann[ANNOTATIONS.inPlaceProgress]);
  const failure = ann[ANNOTATIONS.inPlaceFailure];
  return { ...(from === undefined ? {} : { from }), to, ...(counted ?? { done: 0, total: ms.spec.replicas ?? 0 }), ...(failure ? { failure } : {}), nodes };
}

function replaceRollout(md: MachineDeployment): Rollout | undefined {
  const upToDate = md.status?.upToDateReplicas;
  const total = md.spec.replicas ?? 0;
  if (upToDate === undefined || upToDate >= total) return undefined;
  return { to: md.spec.template.spec.bootstrap.dataSecretName ?? '', done: upToDate, total, nodes: [] };
}

function rolloutOf(o: PoolObjects): Rollout | undefined {
  if (!o.child) return undefined;
  return o.child.kind === 'MachineSet' ? inPlaceRollout(o, o.child) : replaceRollout(o.child);
}

/** Replica counts: the child's spec and status (Cluster API's), or the pool's spec before there is a child. */
function counts(o: PoolObjects): Pick<PoolStatusView, 'desired' | 'current' | 'ready'> {
  const status = o.child?.status ?? {};
  return { desired: o.child?.spec.replicas ?? o.pool.spec.replicas ?? 0, current: status.replicas ?? 0, ready: status.readyReplicas ?? 0 };
}

export function hostJoins(machines: readonly Machine[]): HostJoin[] {
  return machines
    .filter((m) => !m.metadata.deletionTimestamp)
    .map((m) => {
      const joined = Boolean(m.status?.nodeRef?.name);
      const booted = joined || m.status?.conditions?.some((c) => c.type === 'InfrastructureReady' && c.status === 'True') === true;
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
  const rows = waiting.map((h) => [h.machine, h.booted ? `booted, not joined${h.reason ? `: ${h.reason}` : ''}` : 'provisioning']);
  return [`    hosts  ${booted} of ${hosts.length} booted, ${joined} joined`, ...table(rows, '      ')];
}

function details(v: PoolStatusView): string[] {
  const lines = [...v.problems.map((c) => `    ! ${c.type} ${c.status} ${c.reason}: ${c.message}`), ...joinDetails(v.hosts)];
  const r = v.rollout;
  if (!r) return lines;
  const what = v.upgradeType === 'InPlace' ? `${r.from ?? '(new)'} → ${r.to}` : 'machines';
  lines.push(`    rollout ${what}  ${progressBar(r.done, r.total)}  ${r.done} of ${r.total} ${v.upgradeType === 'InPlace' ? 'updated' : 'up to date'}`);
  if (r.failure) lines.push(`    halted: ${r.failure}`);
  lines.push(...table(r.nodes.map((n) => [n.name, n.reason ? `${n.state}: ${n.reason}` : n.state]), '      '));
  return lines;
}

export function formatStatus(views: readonly PoolStatusView[]): string {
  if (views.length === 0) return 'No NodePools found.\n';
  const rows = [
    ['NAMESPACE', 'NAME', 'TYPE', 'DESIRED', 'CURRENT', 'READY', 'VERSION', 'CONFIG HASH'],
    ...views.map((v) => [v.namespace, v.name, v.upgradeType, String(v.desired), String(v.current), String(v.ready), v.version, v.configHash]),
  ];
  const [head = '', ...lines] = table(rows, '');
  return `${[head, ...lines.flatMap((line, i) => [line, ...details(views[i] as PoolStatusView)])].join('\n')}\n`;
}

// ---- informers ----

export interface StatusScope {
  /** Undefined: every namespace. */
  namespace?: string;
  pool?: string;
}

type Informer<T extends k8s.KubernetesObject> = ResilientInformer<T>;

/** The management objects of the pools in scope and the Nodes of their guest clusters, kept by informers. */
export class StatusWatch {
  readonly #pools: Informer<NodePool>;
  readonly #machineSets: Informer<MachineSet>;
  readonly #machineDeployments: Informer<MachineDeployment>;
  readonly #machines: Informer<Machine>;
  readonly #guests: GuestClusters<Informer<k8s.V1Node>>;
  readonly #scope: StatusScope;

  constructor(kc: k8s.KubeConfig, scope: StatusScope, onChange: () => void) {
    this.#scope = scope;
    const log = createLogger({ name: 'kindling-status', level: 'silent' });
    const custom = kc.makeApiClient(k8s.CustomObjectsApi);
    const ns = scope.namespace;
    const make = <T extends k8s.KubernetesObject>(apiVersion: string, plural: string, labelSelector?: string): Informer<T> => {
      const [group = '', version = ''] = apiVersion.split('/');
      const path = `/apis/${apiVersion}${ns === undefined ? '' : `/namespaces/${ns}`}/${plural}`;
      const list = async (): Promise<k8s.KubernetesListObject<T>> =>
        (await (ns === undefined ? custom.listClusterCustomObject({ group, version, plural, labelSelector }) : custom.listNamespacedCustomObject({ group, version, namespace: ns, plural, labelSelector }))) as k8s.KubernetesListObject<T>;
      return new ResilientInformer<T>({ kubeConfig: kc, path, list, labelSelector, log, onEvent: onChange });
    };
    this.#pools = make<NodePool>(NODEPOOL_API_VERSION, NODEPOOL_PLURAL);
    this.#machineSets = make<MachineSet>(CAPI_API_VERSION, 'machinesets', LABELS.nodePool);
    this.#machineDeployments = make<MachineDeployment>(CAPI_API_VERSION, 'machinedeployments', LABELS.nodePool);
    this.#machines = make<Machine>(CAPI_API_VERSION, 'machines', LABELS.nodePool);
    this.#guests = guestNodeInformers(kc, log, onChange);
  }

  async start(): Promise<void> {
    await Promise.all([this.#pools, this.#machineSets, this.#machineDeployments, this.#machines, this.#guests].map((i) => i.start()));
  }

  async stop(): Promise<void> {
    await Promise.all([this.#pools, this.#machineSets, this.#machineDeployments, this.#machines, this.#guests].map((i) => i.stop()));
  }

  pools(): NodePool[] {
    return this.#pools
      .list(this.#scope.namespace)
      .filter((p) => this.#scope.pool === undefined || p.metadata.name === this.#scope.pool)
      .sort((a, b) => `${a.metadata.namespace ?? ''}/${a.metadata.name}`.localeCompare(`${b.metadata.namespace ?? ''}/${b.metadata.name}`));
  }

  /** Whether every pool's guest cluster has its Node informer synced. */
  guestsOpen(): boolean {
    return this.pools().every((p) => this.#guests.get(clusterKey(p.metadata.namespace ?? '', p.spec.clusterName)) !== undefined);
  }

  views(): PoolStatusView[] {
    return this.pools().map((pool) => {
      const ns = pool.metadata.namespace ?? '';
      const name = pool.metadata.name;
      const child = hasMachineDeployment(pool) ? this.#machineDeployments.get(name, ns) : this.#machineSets.get(name, ns);
      const nodes = this.#guests.get(clusterKey(ns, pool.spec.clusterName));
      const machines = this.#machines.list(ns).filter((m) => m.metadata.labels?.[LABELS.nodePool] === name);
      return poolStatusView({ pool, child, machines, ...(nodes ? { nodes: (n: string) => nodes.get(n) } : {}) });
    });
  }
}

function guestNodeInformers(kc: k8s.KubeConfig, log: Logger, onChange: () => void): GuestClusters<Informer<k8s.V1Node>> {
  return new GuestClusters<Informer<k8s.V1Node>>({
    kubeConfig: kc,
    log,
    create: (cluster) => {
      const core = cluster.kubeConfig.makeApiClient(k8s.CoreV1Api);
      return new ResilientInformer<k8s.V1Node>({ kubeConfig: cluster.kubeConfig, path: '/api/v1/nodes', list: () => core.listNode(), log, onEvent: onChange });
    },
    start: (informer) => informer.start(),
    close: (informer) => informer.stop(),
    onOpened: onChange,
  });
}

// ---- rendering ----

/** Draws frames: on a terminal each one replaces the last; otherwise a changed frame is printed as a block. */
export class Screen {
  #last = '';
  readonly #io: CommandIO;

  constructor(io: CommandIO) {
    this.#io = io;
  }

  draw(frame: string): void {
    if (frame === this.#last) return;
    const lines = this.#last === '' ? 0 : this.#last.split('\n').length - 1;
    if (this.#io.tty === true) this.#io.out(`${lines > 0 ? `\x1b[${lines}A\r\x1b[J` : ''}${frame}`);
    else this.#io.out(`${this.#last === '' ? '' : '\n'}${frame}`);
    this.#last = frame;
  }
}

export interface RunStatusOptions {
  kubeConfig: k8s.KubeConfig;
  scope: StatusScope;
  watch: boolean;
  io: CommandIO;
  /** Ends a watch. */
  signal?: AbortSignal;
  /** How long a one-shot status waits for the guest clusters' Nodes. */
  guestWaitMs?: number;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Prints the status once, or redraws it on every event until `signal` aborts. */
export async function runStatus(opts: RunStatusOptions): Promise<void> {
  const screen = new Screen(opts.io);
  let timer: NodeJS.Timeout | undefined;
  let drawn = false;
  // Events come in bursts (a relist, a node's several annotations): draw once per burst, and only after the
  // first frame, which waits for every cache (a frame drawn from half-synced caches would show no nodes).
  const onChange = (): void => {
    if (!opts.watch || !drawn || timer) return;
    timer = setTimeout(() => {
      timer = undefined;
      screen.draw(formatStatus(watch.views()));
    }, 100);
  };
  const watch = new StatusWatch(opts.kubeConfig, opts.scope, onChange);
  try {
    await watch.start();
    for (const deadline = Date.now() + (opts.guestWaitMs ?? 5_000); !watch.guestsOpen() && Date.now() < deadline; ) await sleep(50);
    screen.draw(formatStatus(watch.views()));
    drawn = true;
    if (opts.watch && opts.signal && !opts.signal.aborted) await new Promise((r) => opts.signal?.addEventListener('abort', r, { once: true }));
  } finally {
    clearTimeout(timer);
    await watch.stop();
  }
}

export const STATUS_FLAGS = {
  kubeconfig: COMPONENT_FLAGS.kubeconfig,
  watch: { type: 'bool', default: false, help: 'Keep watching and redraw on every change (-w)' },
  namespace: { type: 'string', default: 'default', help: 'Namespace of the pools (-n)' },
  allNamespaces: { type: 'bool', default: false, help: 'Pools of every namespace (-A)' },
} satisfies FlagSpecs;

export const statusCommand: Command = defineCommand({
  name: 'status',
  summary: 'Show NodePools: desired/current/ready, version, config hash, conditions that are not fine, rollout progress per node.',
  args: '[namespace/pool]',
  short: { w: 'watch', n: 'namespace', A: 'allNamespaces' },
  flags: STATUS_FLAGS,
  async run(cfg, io, args) {
    if (args.length > 1) throw new ConfigError('status takes at most one pool');
    const ref = args[0] === undefined ? undefined : parsePoolRef(args[0], cfg.namespace);
    const scope: StatusScope = ref ? { namespace: ref.namespace, pool: ref.name } : cfg.allNamespaces ? {} : { namespace: cfg.namespace };
    const stop = new AbortController();
    const abort = (): void => stop.abort();
    process.once('SIGINT', abort).once('SIGTERM', abort);
    try {
      await runStatus({ kubeConfig: loadKubeConfig(cfg.kubeconfig), scope, watch: cfg.watch, io: { ...io, tty: io.tty ?? process.stdout.isTTY === true }, signal: stop.signal });
    } finally {
      process.off('SIGINT', abort).off('SIGTERM', abort);
    }
    return 0;
  },
});
