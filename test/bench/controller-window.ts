/**
 * What the NodePool controller benchmark watches during its window besides the time: where each pool is along
 * its five writes and the ignition server's two answers (a timeline, to tell the controller's pace from the
 * server's), and, when asked, a CPU profile of the benchmark's process (the controller runs in it) over the
 * window alone.
 */
import { writeFile } from 'node:fs/promises';
import { Session } from 'node:inspector/promises';
import type * as k8s from '#k8s';
import { ANNOTATIONS, LABELS, NODEPOOL_FINALIZER, SECRET_KEYS } from '../../api/src/keys.js';
import type { NodePool } from '../../api/src/nodepool.js';

/** Counts of pools at each step, at `t` seconds into the window. */
interface Sample {
  t: number;
  finalized: number;
  tokens: number;
  minted: number;
  verdicts: number;
  userData: number;
  children: number;
  converged: number;
}

export interface WindowViews {
  pools: () => NodePool[];
  secrets: () => k8s.V1Secret[];
  children: () => number;
  converged: (p: NodePool) => boolean;
}

/** Samples the views every `everyMs` until stopped; `stop` returns the timeline as lines. */
export function sampleProgress(views: WindowViews, everyMs = 2_000): { stop: () => string[] } {
  const started = performance.now();
  const samples: Sample[] = [];
  const sample = (): void => {
    const pools = views.pools();
    const secrets = views.secrets();
    const tokens = secrets.filter((s) => s.metadata?.labels?.[LABELS.tokenSecret] !== undefined);
    samples.push({
      t: (performance.now() - started) / 1000,
      finalized: pools.filter((p) => p.metadata.finalizers?.includes(NODEPOOL_FINALIZER)).length,
      tokens: tokens.length,
      minted: tokens.filter((s) => s.data?.[SECRET_KEYS.token] !== undefined).length,
      verdicts: tokens.filter((s) => s.metadata?.annotations?.[ANNOTATIONS.payloadReason] !== undefined).length,
      userData: secrets.length - tokens.length,
      children: views.children(),
      converged: pools.filter(views.converged).length,
    });
  };
  const timer = setInterval(sample, everyMs);
  return {
    stop: () => {
      clearInterval(timer);
      sample();
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

/** A CPU profile of this process from now until `stop`, written to `path` (Chrome DevTools' .cpuprofile). */
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
