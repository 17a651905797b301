/**
 * `kindling status`, live: informers feed the view model, so `--watch` redraws on every watch event, in place
 * on a terminal, as plain blocks otherwise.
 */
import * as k8s from '#k8s';
import { LABELS } from '../../api/src/keys.js';
import { hasMachineDeployment, NODEPOOL_API_VERSION, NODEPOOL_PLURAL, type NodePool } from '../../api/src/nodepool.js';
import { CAPI_API_VERSION, type Machine, type MachineDeployment, type MachineSet } from '../../api/src/capi.js';
import { clusterKey, GuestClusters } from '../../support/src/guest-clusters.js';
import { ResilientInformer } from '../../support/src/informer.js';
import { customResource, NamespacedInformer, type Informer } from '../../support/src/namespaced-informer.js';
import type { Namespaces } from '../../support/src/config.js';
import { createLogger, type Logger } from '../../support/src/logger.js';
import type { CommandIO } from '../../support/src/command.js';
import { formatStatus, poolStatusView, type PoolStatusView } from './status-view.js';
import { clusterScoped } from '../../support/src/object-key.js';

export interface StatusScope {
  /** Undefined: every namespace. */
  namespace?: string;
  pool?: string;
}

/** The management objects of the pools in scope and the Nodes of their guest clusters, kept by informers. */
class StatusWatch {
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
    const namespaces: Namespaces = scope.namespace === undefined ? 'all' : [scope.namespace];
    const make = <T extends k8s.KubernetesObject>(
      apiVersion: string,
      plural: string,
      labelSelector?: string,
    ): Informer<T> => {
      const [group = '', version = ''] = apiVersion.split('/');
      const resource = customResource<T>(custom, { group, version, plural, labelSelector });
      return new NamespacedInformer<T>({ kubeConfig: kc, namespaces, ...resource, log, onEvent: onChange });
    };
    this.#pools = make<NodePool>(NODEPOOL_API_VERSION, NODEPOOL_PLURAL);
    this.#machineSets = make<MachineSet>(CAPI_API_VERSION, 'machinesets', LABELS.nodePool);
    this.#machineDeployments = make<MachineDeployment>(CAPI_API_VERSION, 'machinedeployments', LABELS.nodePool);
    this.#machines = make<Machine>(CAPI_API_VERSION, 'machines', LABELS.nodePool);
    this.#guests = guestNodeInformers(kc, namespaces, log, onChange);
  }

  async start(): Promise<void> {
    await Promise.all(
      [this.#pools, this.#machineSets, this.#machineDeployments, this.#machines, this.#guests].map((i) => i.start()),
    );
  }

  async stop(): Promise<void> {
    await Promise.all(
      [this.#pools, this.#machineSets, this.#machineDeployments, this.#machines, this.#guests].map((i) => i.stop()),
    );
  }

  pools(): NodePool[] {
    return this.#pools
      .list(this.#scope.namespace)
      .filter((p) => this.#scope.pool === undefined || p.metadata.name === this.#scope.pool)
      .sort((a, b) =>
        `${a.metadata.namespace ?? ''}/${a.metadata.name}`.localeCompare(
          `${b.metadata.namespace ?? ''}/${b.metadata.name}`,
        ),
      );
  }

  /** Whether every pool's guest cluster has its Node informer synced. */
  guestsOpen(): boolean {
    return this.pools().every(
      (p) => this.#guests.get(clusterKey(p.metadata.namespace ?? '', p.spec.clusterName)) !== undefined,
    );
  }

  views(): PoolStatusView[] {
    return this.pools().map((pool) => {
      const ns = pool.metadata.namespace ?? '';
      const name = pool.metadata.name;
      const child = hasMachineDeployment(pool)
        ? this.#machineDeployments.get({ namespace: ns, name })
        : this.#machineSets.get({ namespace: ns, name });
      const nodes = this.#guests.get(clusterKey(ns, pool.spec.clusterName));
      const machines = this.#machines.list(ns).filter((m) => m.metadata.labels?.[LABELS.nodePool] === name);
      return poolStatusView({
        pool,
        child,
        machines,
        ...(nodes ? { nodes: (n: string) => nodes.get(clusterScoped(n)) } : {}),
      });
    });
  }
}

function guestNodeInformers(
  kc: k8s.KubeConfig,
  namespaces: Namespaces,
  log: Logger,
  onChange: () => void,
): GuestClusters<Informer<k8s.V1Node>> {
  return new GuestClusters<Informer<k8s.V1Node>>({
    kubeConfig: kc,
    namespaces,
    log,
    create: (cluster) => {
      const core = cluster.kubeConfig.makeApiClient(k8s.CoreV1Api);
      return new ResilientInformer<k8s.V1Node>({
        kubeConfig: cluster.kubeConfig,
        path: '/api/v1/nodes',
        list: () => core.listNode(),
        log,
        onEvent: onChange,
      });
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
    for (const deadline = Date.now() + (opts.guestWaitMs ?? 5_000); !watch.guestsOpen() && Date.now() < deadline;)
      await sleep(50);
    screen.draw(formatStatus(watch.views()));
    drawn = true;
    if (opts.watch && opts.signal && !opts.signal.aborted)
      await new Promise((r) => opts.signal?.addEventListener('abort', r, { once: true }));
  } finally {
    clearTimeout(timer);
    await watch.stop();
  }
}
