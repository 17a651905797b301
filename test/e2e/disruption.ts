/**
 * What the end-to-end tests that disrupt the local environment share: a seeded random generator (a failing
 * plan replays from its seed), SIGKILLs of a component's running process, independent watchers of the
 * guest's PodDisruptionBudgets and of its Nodes' cordons and drains, and the environment's supervisor lines and
 * processes, for the diagnostics.
 */
import { readdirSync, readFileSync } from 'node:fs';
import * as k8s from '#k8s';
import { ANNOTATIONS, DRAIN_PREFIX } from '../../api/src/keys.js';
import { eventually, RestartingWatch } from '../bed/src/index.js';
import type { LocalEnvironment } from './environment.js';

/** mulberry32: a small seeded generator, so a failing plan can be replayed. */
export function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The items in a random order (Fisher–Yates with the given generator). */
export function shuffled<T>(items: readonly T[], random: () => number): T[] {
  const out = [...items];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [out[i], out[j]] = [out[j] as T, out[i] as T];
  }
  return out;
}

export const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

/**
 * SIGKILLs the running process of a component replica (`drainer`, `drainer-1`), waiting first for one still
 * coming back from an earlier exit, so each kill hits a running process; resolves with the pid killed.
 */
export async function killRunning(env: LocalEnvironment, replica: string): Promise<number> {
  const pid = await eventually(
    `${replica} to run`,
    async () => {
      const p = await env.pidOf(replica);
      return p !== undefined && alive(p) ? p : undefined;
    },
    60_000,
    100,
  );
  process.kill(pid, 'SIGKILL');
  return pid;
}

/** The supervisor's lines in the environment's output: each exit with the last line its process logged, each restart. */
export function supervision(output: string): string {
  const lines = output.split('\n');
  return lines
    .flatMap((line, i) => {
      if (/ running again /.test(line)) return [line];
      if (!/ exited, /.test(line)) return [];
      const tail = lines.slice(i + 1).findIndex((l) => !l.startsWith('    '));
      const last = lines[i + (tail === -1 ? lines.length - i - 1 : tail)] ?? '';
      return [line, last.trim().slice(0, 300)];
    })
    .join('\n');
}

/** Processes whose command line names the state folder (every process the environment starts does). */
export function processesOf(stateDir: string): string[] {
  return readdirSync('/proc')
    .filter((p) => /^\d+$/.test(p))
    .flatMap((pid) => {
      try {
        const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ');
        return cmdline.includes(stateDir) ? [`${pid}: ${cmdline.slice(0, 200)}`] : [];
      } catch {
        return [];
      }
    });
}

const keyOf = (o: k8s.KubernetesObject): string => `${o.metadata?.namespace ?? ''}/${o.metadata?.name ?? ''}`;

/** Every PodDisruptionBudget of the guest: each time one is seen with fewer healthy Pods than it requires. */
export class PdbWatcher {
  readonly violations: string[] = [];
  events = 0;
  readonly #watch: RestartingWatch<k8s.V1PodDisruptionBudget>;

  constructor(kc: k8s.KubeConfig) {
    this.#watch = new RestartingWatch(kc, '/apis/policy/v1/poddisruptionbudgets', {}, (_type, pdb) =>
      this.#observe(pdb),
    );
  }

  start(): Promise<void> {
    return this.#watch.start();
  }

  stop(): void {
    this.#watch.stop();
  }

  #observe(pdb: k8s.V1PodDisruptionBudget): void {
    this.events++;
    const { currentHealthy = 0, desiredHealthy } = pdb.status ?? {};
    if (desiredHealthy !== undefined && currentHealthy < desiredHealthy) {
      this.violations.push(
        `${new Date().toISOString()} ${keyOf(pdb)}: ${currentHealthy} healthy < ${desiredHealthy} desired`,
      );
    }
  }
}

type DrainState = { cordoned: boolean; applied: string; draining: boolean };

function drainState(node: k8s.V1Node): DrainState {
  const ann = node.metadata?.annotations ?? {};
  return {
    cordoned: node.spec?.unschedulable === true,
    applied: ann[ANNOTATIONS.lastAppliedDrain] ?? '',
    draining: ann[ANNOTATIONS.drainStartedAt] !== undefined,
  };
}

/** What the given guest Nodes went through, per node: cordons, drains carried out, and drains at once. */
export class DrainWatcher {
  readonly cordons = new Map<string, number>();
  readonly drains = new Map<string, string[]>();
  maxDraining = 0;
  events = 0;
  #last = new Map<string, DrainState>();
  readonly #watch: RestartingWatch<k8s.V1Node>;
  #nodes: Set<string>;

  constructor(kc: k8s.KubeConfig, nodes: string[]) {
    // A watch started again restates each Node first, which counts no transition.
    this.#watch = new RestartingWatch(kc, '/api/v1/nodes', {}, (_type, node) => this.#observe(node));
    this.#nodes = new Set(nodes);
  }

  start(): Promise<void> {
    return this.#watch.start();
  }

  stop(): void {
    this.#watch.stop();
  }

  #transitions(name: string, prev: DrainState, now: DrainState): void {
    if (!prev.cordoned && now.cordoned) this.cordons.set(name, (this.cordons.get(name) ?? 0) + 1);
    if (now.applied !== prev.applied && now.applied.startsWith(DRAIN_PREFIX))
      this.drains.set(name, [...(this.drains.get(name) ?? []), now.applied]);
  }

  #observe(node: k8s.V1Node): void {
    const name = node.metadata?.name ?? '';
    if (!this.#nodes.has(name)) return;
    this.events++;
    const now = drainState(node);
    const prev = this.#last.get(name);
    this.#last.set(name, now);
    if (prev) this.#transitions(name, prev, now);
    this.maxDraining = Math.max(this.maxDraining, [...this.#last.values()].filter((s) => s.draining).length);
  }
}
