/**
 * The local environment as the end-to-end tests drive it: `node dist/local/src/start.js` in a child process
 * (exactly what `npm start` runs after its set-up), read back through the kubeconfigs its summary prints,
 * plus the few moves a test makes on it: patch a pool, list a pool's Machines, Nodes and hosts, and boot an
 * extra host from a user-data stub of the test's choosing; the replicas of the components, their current pids
 * (from <state>/run) and which one leads; and the token values the run hands out, for the no-token-in-logs check.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { guardedPid, RestartingWatch, spawnGuarded } from '../bed/src/index.js';
import { mkdtemp, readFile, readdir, rm } from 'node:fs/promises';
import { hostname, tmpdir } from 'node:os';
import assert from 'node:assert/strict';
import { after, before } from 'node:test';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as k8s from '#k8s';
import { LABELS, SECRET_KEYS } from '../../api/src/keys.js';
import type { NodePool } from '../../api/src/nodepool.js';

const START = fileURLToPath(new URL('../../local/src/start.js', import.meta.url));
const KINDLING = fileURLToPath(new URL('../../../bin/kindling.js', import.meta.url));
export const NS = 'tenants';
const CAPI = { apiVersion: 'cluster.x-k8s.io/v1beta2', group: 'cluster.x-k8s.io', version: 'v1beta2' } as const;

export interface StartOptions {
  timeoutMs?: number;
  /** `--replicas`: processes of each elected component. */
  replicas?: number;
  /** Added to the environment's own (and so its components'): `KINDLING_<FLAG>` settings. */
  env?: NodeJS.ProcessEnv;
}

export interface Machine extends k8s.KubernetesObject {
  metadata: k8s.V1ObjectMeta & { name: string };
  status?: { phase?: string; nodeRef?: { name: string } };
}

export class LocalEnvironment {
  readonly stateDir: string;
  readonly mgmt = new k8s.KubeConfig();
  readonly guest = new k8s.KubeConfig();
  mgmtKubeconfig = '';
  output = '';
  #child: ChildProcess | undefined;

  constructor(stateDir: string) {
    this.stateDir = stateDir;
  }

  /** Starts the environment and resolves once its summary is printed (both sample pools Ready). */
  async start(opts: StartOptions = {}): Promise<void> {
    const { timeoutMs = 600_000, replicas = 1 } = opts;
    // Guarded: a test file the runner cancels or kills leaves no environment running into the next file.
    const child = spawnGuarded(process.execPath, [START, `--state-dir=${this.stateDir}`, `--replicas=${replicas}`], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, ...opts.env },
    });
    this.#child = child;
    child.stderr?.on('data', (d: Buffer) => (this.output += d.toString()));
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`the environment was not up after ${timeoutMs / 1000} s:\n${this.output}`)),
        timeoutMs,
      );
      child.stdout?.on('data', (d: Buffer) => {
        this.output += d.toString();
        if (!this.output.includes('Ctrl-C stops everything.')) return;
        clearTimeout(timer);
        resolve();
      });
      child.once(
        'exit',
        (code) => (clearTimeout(timer), reject(new Error(`the environment exited (${code}):\n${this.output}`))),
      );
    });
    const path = (label: string): string => new RegExp(`${label} kubeconfig: +(\\S+)`).exec(this.output)?.[1] ?? '';
    this.mgmtKubeconfig = path('management');
    this.mgmt.loadFromFile(this.mgmtKubeconfig);
    this.guest.loadFromFile(path('guest'));
  }

  /** The pid of `npm start`'s own process (not its guard's). */
  get pid(): number | undefined {
    return this.#child && guardedPid(this.#child, process.execPath);
  }

  /**
   * SIGTERM to the environment itself, as Ctrl-C would (the guard's own TERM handling would answer 143 after
   * 10 s); resolves with its exit code, which the guard passes on.
   */
  async stop(): Promise<number | null> {
    const child = this.#child;
    if (!child || child.exitCode !== null) return child?.exitCode ?? null;
    const exited = new Promise<number | null>((r) => child.once('exit', r));
    const pid = this.pid;
    if (pid === undefined) child.kill('SIGTERM');
    else process.kill(pid, 'SIGTERM');
    return exited;
  }

  /** The pid of a component replica's current process (`drainer-1`), from its pid file; undefined while it is down. */
  async pidOf(replica: string): Promise<number | undefined> {
    const text = await readFile(join(this.stateDir, 'run', `${replica}.pid`), 'utf8').catch(() => '');
    return text.trim() === '' ? undefined : Number(text.trim());
  }

  /**
   * The replica (`drainer-0`) whose process holds the component's Lease now: the holder identity is
   * `<hostname>-<pid>` (support/src/component.ts). Undefined when nobody holds it or the holder is not running.
   */
  async leaderOf(component: string, replicas: number): Promise<{ replica: string; pid: number } | undefined> {
    const lease = await this.mgmt
      .makeApiClient(k8s.CoordinationV1Api)
      .readNamespacedLease({ name: `kindling-${component}`, namespace: 'kindling-system' });
    const holder = lease.spec?.holderIdentity ?? '';
    for (let i = 0; i < replicas; i++) {
      const replica = replicas === 1 ? component : `${component}-${i}`;
      const pid = await this.pidOf(replica);
      if (pid !== undefined && holder === `${hostname()}-${pid}`) return { replica, pid };
    }
    return undefined;
  }

  get custom(): k8s.CustomObjectsApi {
    return this.mgmt.makeApiClient(k8s.CustomObjectsApi);
  }

  async pool(name: string): Promise<NodePool> {
    return (await this.custom.getNamespacedCustomObject({
      group: 'kindling.dev',
      version: 'v1beta1',
      namespace: NS,
      plural: 'nodepools',
      name,
    })) as NodePool;
  }

  async patchPool(name: string, body: object): Promise<void> {
    await this.custom.patchNamespacedCustomObject(
      { group: 'kindling.dev', version: 'v1beta1', namespace: NS, plural: 'nodepools', name, body },
      k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
    );
  }

  async machines(pool: string): Promise<Machine[]> {
    const list = (await this.custom.listNamespacedCustomObject({
      ...CAPI,
      namespace: NS,
      plural: 'machines',
      labelSelector: `${LABELS.nodePool}=${pool}`,
    })) as { items: Machine[] };
    return list.items;
  }

  async nodes(pool: string): Promise<k8s.V1Node[]> {
    return (await this.guest.makeApiClient(k8s.CoreV1Api).listNode({ labelSelector: `kindling.dev/pool=${pool}` }))
      .items;
  }

  hostRoot(name: string): string {
    return join(this.stateDir, 'hosts', NS, name);
  }

  async hosts(prefix: string): Promise<string[]> {
    return (await readdir(join(this.stateDir, 'hosts', NS)).catch(() => []))
      .filter((h) => h.startsWith(`${prefix}-`))
      .sort();
  }

  async hostFile(host: string, path: string): Promise<string | undefined> {
    return readFile(join(this.hostRoot(host), path), 'utf8').catch(() => undefined);
  }

  /**
   * Whether a pool's Machines, Nodes and hosts agree on `count` members: every Machine Running with a Node,
   * the same names as the pool's Nodes, and a booted host folder each.
   */
  async agrees(pool: string, count: number): Promise<boolean> {
    const machines = (await this.machines(pool)).filter((m) => !m.metadata.deletionTimestamp);
    const running = machines.filter((m) => m.status?.phase === 'Running' && m.status.nodeRef);
    const nodes = (await this.nodes(pool)).map((n) => n.metadata?.name ?? '').sort();
    const hosts = await this.hosts(pool);
    const refs = running.map((m) => m.status?.nodeRef?.name ?? '').sort();
    return (
      machines.length === count &&
      running.length === count &&
      refs.join() === nodes.join() &&
      refs.join() === hosts.join()
    );
  }

  /**
   * A host of the test's own: a Secret holding `userData`, a LocalMachine and a standalone Machine pointing at
   * both, so Cluster API and the local provider treat it like any other (it is no pool's member).
   */
  async bootExtraHost(name: string, userData: string): Promise<void> {
    const objects = k8s.KubernetesObjectApi.makeApiClient(this.mgmt);
    await objects.create({
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name, namespace: NS },
      stringData: { value: userData, format: 'ignition' },
    } as k8s.KubernetesObject);
    await objects.create({
      apiVersion: 'infrastructure.kindling.dev/v1alpha1',
      kind: 'LocalMachine',
      metadata: { name, namespace: NS },
      spec: {},
    } as k8s.KubernetesObject);
    await objects.create({
      apiVersion: CAPI.apiVersion,
      kind: 'Machine',
      metadata: { name, namespace: NS },
      spec: {
        clusterName: 'guest',
        bootstrap: { dataSecretName: name },
        infrastructureRef: { apiGroup: 'infrastructure.kindling.dev', kind: 'LocalMachine', name },
      },
    } as k8s.KubernetesObject);
  }

  /** The LocalMachine's Booted condition, once it has one. */
  async booted(name: string): Promise<{ status: string; message: string } | undefined> {
    const lm = (await this.custom.getNamespacedCustomObject({
      group: 'infrastructure.kindling.dev',
      version: 'v1alpha1',
      namespace: NS,
      plural: 'localmachines',
      name,
    })) as {
      status?: { conditions?: { type: string; status: string; message: string }[] };
    };
    return lm.status?.conditions?.find((c) => c.type === 'Booted');
  }

  /**
   * The sample workload when it is whole: every replica Ready on an inplace node and its budget counting them
   * all healthy, with one disruption allowed; undefined until then.
   */
  async workloadWhole(): Promise<{ nodes: string[] } | undefined> {
    const pods = (
      await this.guest
        .makeApiClient(k8s.CoreV1Api)
        .listNamespacedPod({ namespace: WORKLOAD.namespace, labelSelector: WORKLOAD.labelSelector })
    ).items;
    const pdb = await this.guest
      .makeApiClient(k8s.PolicyV1Api)
      .readNamespacedPodDisruptionBudget({ name: WORKLOAD.name, namespace: WORKLOAD.namespace });
    const inplace = new Set((await this.nodes('inplace')).map((n) => n.metadata?.name));
    const ready = pods.filter((p) => available(p) && inplace.has(p.spec?.nodeName));
    const whole =
      ready.length === WORKLOAD.replicas &&
      pods.length === WORKLOAD.replicas &&
      pdb.status?.currentHealthy === WORKLOAD.replicas &&
      pdb.status.disruptionsAllowed === WORKLOAD.maxUnavailable;
    return whole ? { nodes: [...new Set(ready.map((p) => p.spec?.nodeName ?? ''))].sort() } : undefined;
  }

  /** `kindling status <namespace/pool> --watch` as an operator runs it; stop() ends it and gives all it printed. */
  watchStatus(pool: string): { stop(): Promise<string> } {
    const child = spawn(
      process.execPath,
      [KINDLING, 'status', `${NS}/${pool}`, '--watch', `--kubeconfig=${this.mgmtKubeconfig}`],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let printed = '';
    child.stdout.on('data', (d: Buffer) => (printed += d.toString()));
    child.stderr.on('data', (d: Buffer) => (printed += d.toString()));
    const exited = new Promise<void>((r) => child.once('exit', () => r()));
    return {
      stop: async (): Promise<string> => {
        if (child.exitCode === null) child.kill('SIGTERM');
        await exited;
        return printed;
      },
    };
  }

  async deleteMachine(name: string): Promise<void> {
    await this.custom.deleteNamespacedCustomObject({ ...CAPI, namespace: NS, plural: 'machines', name });
  }
}

const decode = (b64: string | undefined): string => Buffer.from(b64 ?? '', 'base64').toString();

/**
 * Every token value the run hands out: the management cluster's token Secrets (current and rotated Ignition
 * token, current and rotated bootstrap token), watched for the whole suite since a rotation or a retired hash
 * removes a value for good, and the guest's bootstrap-token Secrets. A bootstrap token's secret half counts
 * on its own too: its id is public.
 */
export class TokenRecorder {
  readonly values = new Set<string>();
  #env: LocalEnvironment;
  readonly #watch: RestartingWatch<k8s.V1Secret>;

  constructor(env: LocalEnvironment) {
    this.#env = env;
    this.#watch = new RestartingWatch(env.mgmt, '/api/v1/secrets', { labelSelector: LABELS.tokenSecret }, (_type, s) =>
      this.#record(s),
    );
  }

  start(): Promise<void> {
    return this.#watch.start();
  }

  /** One last look at both clusters (while they still run), then stops watching. */
  async stop(): Promise<void> {
    this.#watch.stop();
    const tokenSecrets = await this.#env.mgmt
      .makeApiClient(k8s.CoreV1Api)
      .listSecretForAllNamespaces({ labelSelector: LABELS.tokenSecret });
    for (const s of tokenSecrets.items) this.#record(s);
    const bootstrap = await this.#env.guest
      .makeApiClient(k8s.CoreV1Api)
      .listNamespacedSecret({ namespace: 'kube-system', fieldSelector: 'type=bootstrap.kubernetes.io/token' });
    for (const s of bootstrap.items) {
      const [id, secret] = [decode(s.data?.['token-id']), decode(s.data?.['token-secret'])];
      if (id && secret) this.values.add(`${id}.${secret}`).add(secret);
    }
  }

  #record(secret: k8s.V1Secret): void {
    for (const key of [SECRET_KEYS.token, SECRET_KEYS.rotatedToken]) {
      const value = decode(secret.data?.[key]);
      if (value) this.values.add(value);
    }
    for (const key of [SECRET_KEYS.bootstrapToken, SECRET_KEYS.rotatedBootstrapToken]) {
      const [id, secretHalf] = decode(secret.data?.[key]).split('.');
      if (id && secretHalf) this.values.add(`${id}.${secretHalf}`).add(secretHalf);
    }
  }
}

/** A Deployment's pods under a PodDisruptionBudget of the same name, as a watcher selects them. */
export interface Workload {
  namespace: string;
  name: string;
  labelSelector: string;
  replicas: number;
  maxUnavailable: number;
}

/** The sample workload the environment runs in the guest (local/workload.yaml). */
export const WORKLOAD = {
  namespace: 'shop',
  name: 'web',
  labelSelector: 'app=web',
  replicas: 4,
  maxUnavailable: 1,
} as const satisfies Workload;

const available = (pod: k8s.V1Pod): boolean =>
  !pod.metadata?.deletionTimestamp &&
  pod.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') === true;
/** The condition the apiserver sets on a pod it evicts through the Eviction API, before it deletes it. */
const evictedByApi = (pod: k8s.V1Pod): boolean =>
  pod.status?.conditions?.some(
    (c) => c.type === 'DisruptionTarget' && c.reason === 'EvictionByEvictionAPI' && c.status === 'True',
  ) === true;

/**
 * Every event of a workload's pods (the sample workload's unless told), independent of Kindling: the fewest
 * available (Ready, not terminating) at any moment once the full set had been seen, and the pods evicted
 * through the Eviction API.
 */
export class WorkloadWatcher {
  /** The fewest available pods seen (Infinity until the full set of replicas had been seen). */
  min = Infinity;
  events = 0;
  readonly evicted = new Set<string>();
  readonly #available = new Map<string, boolean>();
  readonly #workload: Workload;
  #seenAll = false;
  readonly #watch: RestartingWatch<k8s.V1Pod>;

  constructor(kc: k8s.KubeConfig, workload: Workload = WORKLOAD) {
    this.#workload = workload;
    this.#watch = new RestartingWatch(
      kc,
      `/api/v1/namespaces/${workload.namespace}/pods`,
      { labelSelector: workload.labelSelector },
      (type, pod) => this.#observe(type, pod),
    );
  }

  start(): Promise<void> {
    return this.#watch.start();
  }

  stop(): void {
    this.#watch.stop();
  }

  #observe(type: string, pod: k8s.V1Pod): void {
    const name = pod.metadata?.name ?? '';
    this.events++;
    if (evictedByApi(pod)) this.evicted.add(name);
    if (type === 'DELETED') this.#available.delete(name);
    else this.#available.set(name, available(pod));
    const now = [...this.#available.values()].filter(Boolean).length;
    this.#seenAll ||= now >= this.#workload.replicas;
    if (this.#seenAll) this.min = Math.min(this.min, now);
  }
}

/**
 * A suite's own environment: started in a fresh state folder before its tests (`ready` then sees it), stopped
 * after them, which must exit 0, and its folder removed.
 */
export function useLocalEnvironment(name: string, ready: (env: LocalEnvironment) => void, opts?: StartOptions): void {
  let env: LocalEnvironment | undefined;
  let stateDir: string | undefined;
  before(async () => {
    stateDir = await mkdtemp(join(tmpdir(), `kindling-e2e-${name}-`));
    env = new LocalEnvironment(stateDir);
    ready(env);
    await env.start(opts);
  });
  after(async () => {
    const code = await env?.stop();
    assert.equal(code, 0, env?.output.slice(-3000));
    if (stateDir) await rm(stateDir, { recursive: true, force: true });
  });
}
