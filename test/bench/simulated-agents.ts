/**
 * The node agent of the rollout benchmarks, simulated: one in-process state machine per node that follows the
 * same annotation protocol as the real agent (Working, drain-<hash>, a t-second step, uncordon-<hash>, Done;
 * or, for a change the disruption policy says needs nothing, Working then Done) without touching a filesystem; 100 agent processes would measure process start-up on a 2-core machine, not
 * the rollout. Both in-place engines hand nodes out through the same annotations, so both use it.
 */
import * as k8s from '#k8s';
import { ANNOTATIONS, DRAIN_PREFIX, NODE_STATES, UNCORDON_PREFIX } from '../../api/src/keys.js';

const merge = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch);

/** One node's update as its agent saw it (epoch ms, fractional). */
export interface AgentSpan {
  node: string;
  /** Took up the update (wrote Working and asked for the drain). */
  began: number;
  /** Saw the drain applied, so started its step. */
  drained?: number;
  /** Asked for the uncordon, its step over. */
  stepped?: number;
  /** Wrote Done. */
  done: number;
}

/** Epoch ms with the monotonic clock's resolution. */
export const now = (): number => performance.timeOrigin + performance.now();

export class SimulatedAgents {
  #core: k8s.CoreV1Api;
  #informer: k8s.Informer<k8s.V1Node> & k8s.ObjectCache<k8s.V1Node>;
  #busy = new Set<string>();
  #stepping = new Set<string>();
  #stepMs: number;
  /** The update each node's agent has under way. */
  readonly #open = new Map<string, Omit<AgentSpan, 'done'>>();
  /** Every finished update, in the order they finished. */
  readonly spans: AgentSpan[] = [];

  #kubeletVersion: string | undefined;
  /**
   * Whether the change being rolled out needs a drain (and so the step, its reboot), as the real agent decides
   * it from the pool's disruption policy: without, an agent writes Working, applies (no step) and writes Done.
   */
  drain = true;

  /** kubeletVersion: what the node's kubelet reports once updated (its reboot), as Cluster API checks it; unset: left alone. */
  constructor(kc: k8s.KubeConfig, stepMs: number, kubeletVersion?: string) {
    this.#core = kc.makeApiClient(k8s.CoreV1Api);
    this.#stepMs = stepMs;
    this.#kubeletVersion = kubeletVersion;
    this.#informer = k8s.makeInformer(kc, '/api/v1/nodes', () => this.#core.listNode());
    this.#informer.on(k8s.UPDATE, (n) => void this.#react(n));
    // The watch ends when the clusters stop; during the run a lost watch would show as a stalled rollout.
    this.#informer.on(k8s.ERROR, () => undefined);
  }

  /** Each node's agent time, ms: from taking up the update to writing Done (drain and uncordon round trips included). */
  get durations(): number[] {
    return this.spans.map((s) => s.done - s.began);
  }

  start(): Promise<void> {
    return this.#informer.start();
  }

  stop(): Promise<void> {
    return this.#informer.stop();
  }

  async #react(node: k8s.V1Node): Promise<void> {
    const name = node.metadata?.name ?? '';
    const ann = node.metadata?.annotations ?? {};
    const hash = ann[ANNOTATIONS.desiredConfig];
    if (!hash || hash === ann[ANNOTATIONS.currentConfig] || this.#busy.has(name)) return;
    this.#busy.add(name);
    try {
      await this.#advance(name, ann, hash);
    } finally {
      this.#busy.delete(name);
    }
  }

  async #advance(name: string, ann: Record<string, string>, hash: string): Promise<void> {
    if (!this.drain) return this.#applyQuietly(name, hash);
    const [drain, uncordon] = [`${DRAIN_PREFIX}${hash}`, `${UNCORDON_PREFIX}${hash}`];
    const [asked, applied] = [ann[ANNOTATIONS.desiredDrain], ann[ANNOTATIONS.lastAppliedDrain]];
    if (asked !== drain && asked !== uncordon) {
      if (!this.#open.has(name)) this.#open.set(name, { node: name, began: now() });
      return this.#annotate(name, { [ANNOTATIONS.state]: NODE_STATES.working, [ANNOTATIONS.desiredDrain]: drain });
    }
    // Once: after the step the node still shows the drain applied until the uncordon is.
    if (asked === drain && applied === drain) return this.#step(name, uncordon);
    if (applied === uncordon) await this.#finish(name, hash);
  }

  /** A change that needs no action: no cordon, no drain, no reboot; the files written at once. */
  async #applyQuietly(name: string, hash: string): Promise<void> {
    if (!this.#open.has(name)) this.#open.set(name, { node: name, began: now() });
    await this.#annotate(name, { [ANNOTATIONS.state]: NODE_STATES.working });
    await this.#finish(name, hash);
  }

  #step(name: string, uncordon: string): void {
    if (this.#stepping.has(name)) return;
    this.#stepping.add(name);
    const span = this.#open.get(name);
    if (span) span.drained ??= now();
    setTimeout(() => {
      this.#stepping.delete(name);
      if (span) span.stepped ??= now();
      void this.#annotate(name, { [ANNOTATIONS.desiredDrain]: uncordon });
    }, this.#stepMs);
  }

  async #finish(name: string, hash: string): Promise<void> {
    if (this.#kubeletVersion !== undefined)
      await this.#core
        .patchNodeStatus({ name, body: { status: { nodeInfo: { kubeletVersion: this.#kubeletVersion } } } }, merge)
        .catch(() => undefined);
    await this.#annotate(name, { [ANNOTATIONS.currentConfig]: hash, [ANNOTATIONS.state]: NODE_STATES.done });
    const span = this.#open.get(name);
    if (span) this.spans.push({ ...span, done: now() });
    this.#open.delete(name);
  }

  async #annotate(name: string, annotations: Record<string, string>): Promise<void> {
    // A failed write is retried by the next event (level-based, like the real agent).
    await this.#core.patchNode({ name, body: { metadata: { annotations } } }, merge).catch(() => undefined);
  }
}

/** One rollout to run: N nodes, at most k at once, the agents' step (ms), the extension's retry-after (ClusterAPI engine), the pods per node. */
export interface EngineRun {
  n: number;
  k: number;
  stepMs: number;
  retryAfter: string;
  /** Bare pods placed on each node before a rollout, for the drains to evict (MachineSet engine). */
  podsPerNode: number;
}

export interface RolloutResult {
  totalSeconds: number;
  /** When the rollout was asked for and when it was seen complete (epoch ms). */
  started: number;
  ended: number;
  /** Each node's agent time, ms. */
  durations: number[];
  spans: AgentSpan[];
  /** The most nodes the independent watcher saw unavailable at once, over `events` Node events. */
  maxUnavailable: number;
  events: number;
  /** The engine's own lines on where the time went. */
  notes: string[];
}

const mean = (xs: readonly number[]): number =>
  xs.length === 0 ? Number.NaN : xs.reduce((a, b) => a + b, 0) / xs.length;
const secs = (ms: number): string => (ms / 1000).toFixed(2);

/**
 * Where the agents' time went (means over the nodes), and the hand-out gap: how long each node after the
 * first k waited from the Done that freed its slot (the latest Done before it was taken up) to being taken up.
 * With a perfect engine the total is ⌈N/k⌉·t and the gap is 0.
 */
export function agentBreakdown(r: RolloutResult, k: number): string[] {
  const spans = r.spans;
  const step = (f: (s: AgentSpan) => number): string => secs(mean(spans.map(f)));
  const dones = spans.map((s) => s.done).sort((a, b) => a - b);
  const gaps = [...spans]
    .sort((a, b) => a.began - b.began)
    .slice(k)
    .flatMap((s) => {
      const freed = dones.filter((d) => d <= s.began).at(-1);
      return freed === undefined ? [] : [s.began - freed];
    });
  return [
    `agent time per node (mean): drain asked → applied ${step((s) => (s.drained ?? s.began) - s.began)} s, step ${step((s) => (s.stepped ?? s.began) - (s.drained ?? s.began))} s, uncordon asked → Done written ${step((s) => s.done - (s.stepped ?? s.began))} s`,
    `hand-out gap (a Done → the next node taken up): mean ${secs(mean(gaps))} s, max ${secs(gaps.length > 0 ? Math.max(...gaps) : Number.NaN)} s over ${gaps.length} nodes`,
    `rollout asked → first node taken up ${secs(Math.min(...spans.map((s) => s.began)) - r.started)} s; last Done → rollout seen complete ${secs(r.ended - Math.max(...dones))} s`,
  ];
}
