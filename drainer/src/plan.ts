/**
 * The drainer's decisions, as pure functions of the objects it reads: what a Node asks for, which pods a
 * drain evicts, waits for or leaves alone, how long the drain may take, and the Node patches it writes.
 */
import type * as k8s from '#k8s';
import type { Machine, MachineSet } from '../../api/src/capi.js';
import { ANNOTATIONS, DRAIN_PREFIX, LABELS, UNCORDON_PREFIX } from '../../api/src/keys.js';

/** Annotation kubelet puts on a mirror pod (a static pod's API shadow): evicting it does nothing. */
const MIRROR_POD_ANNOTATION = 'kubernetes.io/config.mirror';

export type DrainRequest =
  | { kind: 'none' }
  | { kind: 'drain'; value: string }
  | { kind: 'uncordon'; value: string }
  | { kind: 'failed'; value: string; failure: string }
  | { kind: 'invalid'; value: string };

/** What a Node asks the drainer to do now. */
export function drainRequest(node: k8s.V1Node): DrainRequest {
  const ann = node.metadata?.annotations ?? {};
  const value = ann[ANNOTATIONS.desiredDrain];
  if (!value || value === ann[ANNOTATIONS.lastAppliedDrain]) return { kind: 'none' };
  if (value.startsWith(UNCORDON_PREFIX)) return { kind: 'uncordon', value };
  if (!value.startsWith(DRAIN_PREFIX)) return { kind: 'invalid', value };
  // A drain the drainer gave up on stays given up until an operator removes the failure annotation.
  const failure = ann[ANNOTATIONS.drainFailure];
  if (failure?.startsWith(`${value}:`)) return { kind: 'failed', value, failure };
  return { kind: 'drain', value };
}

export type PodVerdict = 'evict' | 'wait' | 'skip-mirror' | 'skip-daemonset' | 'skip-agent' | 'gone';

/** What a drain does with one pod on the node. */
export function podVerdict(pod: k8s.V1Pod): PodVerdict {
  const meta = pod.metadata ?? {};
  if (meta.annotations?.[MIRROR_POD_ANNOTATION] !== undefined) return 'skip-mirror';
  if (meta.ownerReferences?.some((o) => o.controller === true && o.kind === 'DaemonSet')) return 'skip-daemonset';
  if (meta.labels?.[LABELS.agentPod] === 'true') return 'skip-agent';
  // Evicted already (or deleted by someone): wait for it to go, never evict twice.
  if (meta.deletionTimestamp) return 'wait';
  return 'evict';
}

export interface EvictionPlan {
  evict: k8s.V1Pod[];
  waitFor: k8s.V1Pod[];
  skipped: { pod: k8s.V1Pod; verdict: PodVerdict }[];
}

export function planEvictions(pods: readonly k8s.V1Pod[]): EvictionPlan {
  const plan: EvictionPlan = { evict: [], waitFor: [], skipped: [] };
  for (const pod of pods) {
    const verdict = podVerdict(pod);
    if (verdict === 'evict') plan.evict.push(pod);
    else if (verdict === 'wait') plan.waitFor.push(pod);
    else plan.skipped.push({ pod, verdict });
  }
  return plan;
}

/**
 * The drain timeout of a node, in ms (0: none). The NodePool's nodeDrainTimeout reaches the node through its
 * MachineSet's template (`deletion.nodeDrainTimeoutSeconds`, CAPI semantics: 0 = unlimited). The MachineSet
 * wins over the Machine because Cluster API may not have propagated a change to existing Machines yet.
 */
export function drainTimeoutMs(opts: { machineSet?: MachineSet; machine?: Machine; defaultMs: number }): number {
  const fromSet = opts.machineSet?.spec.template.spec.deletion?.nodeDrainTimeoutSeconds;
  if (fromSet !== undefined) return fromSet * 1000;
  const fromMachine = opts.machine?.spec.deletion?.nodeDrainTimeoutSeconds;
  if (fromMachine !== undefined) return fromMachine * 1000;
  return opts.defaultMs;
}

type Patch = {
  metadata: { annotations: Record<string, string | null>; resourceVersion?: string };
  spec?: { unschedulable: boolean };
};

/**
 * Cordon, remembering in the same write whether the node was cordoned already (so uncordon leaves an
 * operator's cordon alone). A node drained before and not uncordoned since (a retarget: drain-A then
 * drain-B) keeps its first answer; it is the drainer's own cordon that makes it unschedulable now.
 * The resourceVersion makes the write conditional on what was read.
 */
export function cordonPatch(node: k8s.V1Node, now: Date): Patch | undefined {
  const ann = node.metadata?.annotations ?? {};
  const cordoned = node.spec?.unschedulable === true;
  const annotations: Record<string, string | null> = {};
  if (ann[ANNOTATIONS.cordonedBeforeDrain] === undefined)
    annotations[ANNOTATIONS.cordonedBeforeDrain] = String(cordoned);
  if (ann[ANNOTATIONS.drainStartedAt] === undefined) annotations[ANNOTATIONS.drainStartedAt] = now.toISOString();
  if (cordoned && Object.keys(annotations).length === 0) return undefined;
  return { metadata: { annotations, resourceVersion: node.metadata?.resourceVersion }, spec: { unschedulable: true } };
}

/** The drain is done: say so, keep the cordon (and what it remembers) until uncordon; nothing blocks any more. */
export function drainedPatch(value: string): Patch {
  return {
    metadata: {
      annotations: {
        [ANNOTATIONS.lastAppliedDrain]: value,
        [ANNOTATIONS.drainStartedAt]: null,
        [ANNOTATIONS.drainFailure]: null,
        [ANNOTATIONS.drainBlocked]: null,
      },
    },
  };
}

/**
 * Gave up: the failure names the request, so the same request is not retried; the timer restarts on retry.
 * The failure message carries the last refusal, so the block is no longer shown on its own.
 */
export function drainFailedPatch(value: string, message: string): Patch {
  return {
    metadata: {
      annotations: {
        [ANNOTATIONS.drainFailure]: `${value}: ${message}`,
        [ANNOTATIONS.drainStartedAt]: null,
        [ANNOTATIONS.drainBlocked]: null,
      },
    },
  };
}

/**
 * Uncordon only a cordon the drainer made ("false": it was schedulable before the drain); an operator's
 * cordon, or a node the drainer never cordoned, is left as it is. Then forget the drain, and any block of
 * it: an uncordon is also how a drain is cancelled.
 */
export function uncordonPatch(node: k8s.V1Node, value: string): Patch {
  const ann = node.metadata?.annotations ?? {};
  const keepCordon = ann[ANNOTATIONS.cordonedBeforeDrain] !== 'false';
  const patch: Patch = {
    metadata: {
      annotations: {
        [ANNOTATIONS.lastAppliedDrain]: value,
        [ANNOTATIONS.cordonedBeforeDrain]: null,
        [ANNOTATIONS.drainStartedAt]: null,
        [ANNOTATIONS.drainFailure]: null,
        [ANNOTATIONS.drainBlocked]: null,
      },
      resourceVersion: node.metadata?.resourceVersion,
    },
  };
  if (!keepCordon) patch.spec = { unschedulable: false };
  return patch;
}

/** `ns/name` of pods, for messages (at most `max`, then a count). */
export function podList(pods: readonly k8s.V1Pod[], max = 5): string {
  const names = pods.map((p) => `${p.metadata?.namespace}/${p.metadata?.name}`).sort();
  const more = names.length > max ? ` and ${names.length - max} more` : '';
  return names.slice(0, max).join(', ') + more;
}
