/**
 * What the NodePool controller benchmark watches during its window besides the time: where each pool is along
 * its five writes and the ignition server's two answers (a timeline, to tell the controller's pace from the
 * server's), the controller process's garbage collections, and, when asked, a CPU profile of the controller's
 * process (controller-process.ts) over the window alone.
 */
import { writeFile } from 'node:fs/promises';
import { Session } from 'node:inspector/promises';
import { constants, PerformanceObserver } from 'node:perf_hooks';
import { NODEPOOL_FINALIZER } from '../../api/src/keys.js';
import type { NodePool } from '../../api/src/nodepool.js';

/** Where the pools of `namespace` are along the controller's writes and the ignition server's answers. */
export interface ControllerCounts {
  tokens: number;
  minted: number;
  verdicts: number;
  userData: number;
  children: number;
}

/** Counts of pools at each step, at `t` seconds into the window. */
interface Sample extends ControllerCounts {
  t: number;
  finalized: number;
  converged: number;
}

export interface WindowViews {
  pools: () => NodePool[];
  /** Asked of the controller's process. */
  controller: () => Promise<ControllerCounts>;
  converged: (p: NodePool) => boolean;
}

/** Samples the views every `everyMs` until stopped; `stop` returns the timeline as lines. */
export function sampleProgress(views: WindowViews, everyMs = 2_000): { stop: () => Promise<string[]> } {
  const started = performance.now();
  const samples: Sample[] = [];
  let asking: Promise<void> = Promise.resolve();
  const sample = (): Promise<void> => {
    const t = (performance.now() - started) / 1000;
    const pools = views.pools();
    const finalized = pools.filter((p) => p.metadata.finalizers?.includes(NODEPOOL_FINALIZER)).length;
    const converged = pools.filter(views.converged).length;
    return views.controller().then((counts) => void samples.push({ t, finalized, converged, ...counts }));
  };
  // One question in flight at a time: a slow answer skips a sample rather than piling them up.
  let busy = false;
  const timer = setInterval(() => {
    if (busy) return;
    busy = true;
    asking = sample().finally(() => (busy = false));
  }, everyMs);
  return {
    stop: async () => {
      clearInterval(timer);
      await asking;
      await sample();
      return [
        't (s) | finalizer | token Secret | minted | verdict | user-data | child | converged',
        ...samples.map((s) =>
          [s.t.toFixed(1), s.finalized, s.tokens, s.minted, s.verdicts, s.userData, s.children, s.converged].join(
            ' | ',
          ),
        ),
      ];
    },
  };
}

/** A CPU profile of the calling process from now until `stop`, written to `path` (Chrome DevTools' .cpuprofile). */
export async function profileCpu(path: string | undefined): Promise<{ stop: () => Promise<void> }> {
  if (path === undefined) return { stop: () => Promise.resolve() };
  const session = new Session();
  session.connect();
  await session.post('Profiler.enable');
  await session.post('Profiler.start');
  return {
    stop: async () => {
      const { profile } = await session.post('Profiler.stop');
      session.disconnect();
      await writeFile(path, JSON.stringify(profile));
    },
  };
}

const GC_KINDS: Readonly<Record<number, string>> = {
  [constants.NODE_PERFORMANCE_GC_MINOR]: 'scavenges',
  [constants.NODE_PERFORMANCE_GC_MINOR_MARK_SWEEP]: 'minor mark-sweeps',
  [constants.NODE_PERFORMANCE_GC_MAJOR]: 'mark-compacts',
  [constants.NODE_PERFORMANCE_GC_INCREMENTAL]: 'incremental marking steps',
  [constants.NODE_PERFORMANCE_GC_WEAKCB]: 'weak callbacks',
};

/** The calling process's garbage collections from now until `stop`: how many of each kind and their pauses. */
export function tallyGc(): { stop: () => string } {
  const kinds = new Map<string, { count: number; ms: number }>();
  const observer = new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      const kind = GC_KINDS[(entry as { detail?: { kind: number } }).detail?.kind ?? -1] ?? 'other';
      const tally = kinds.get(kind) ?? { count: 0, ms: 0 };
      kinds.set(kind, { count: tally.count + 1, ms: tally.ms + entry.duration });
    }
  });
  observer.observe({ entryTypes: ['gc'] });
  return {
    stop: () => {
      observer.disconnect();
      const tallies = [...kinds].map(([kind, t]) => `${t.count} ${kind} ${(t.ms / 1000).toFixed(2)} s`);
      return tallies.length === 0 ? 'none' : tallies.join(', ');
    },
  };
}
