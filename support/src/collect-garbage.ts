/**
 * A full collection of the calling thread's heap, apart from memory-saver.ts so that a thread which only collects
 * (the ignition server's serving threads) does not load what the governor needs (prom-client; with tar-stream,
 * 0.7 to 1.0 MiB of a serving thread's heap, docs/benchmarks.md, the storm row).
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

type Collect = (options: { type: 'major'; execution: 'sync'; flavor: 'last-resort' }) => void;
let collector: Collect | undefined;

/**
 * A full collection of this thread's heap that gives back what it can (V8's last-resort flavour: compacting,
 * pages released). Unless Node was given `--expose-gc`, the gc function is taken from a context of its own, the
 * flag that exposes it set only for that moment, so no other code sees a `gc` (that context stays, a few hundred
 * KiB). The flag is the process's: two threads must not take theirs at once (ServingPool.collect goes one by one).
 */
export function collectGarbage(): void {
  collector ??= exposedGc() ?? takeGc();
  collector({ type: 'major', execution: 'sync', flavor: 'last-resort' });
}

const exposedGc = (): Collect | undefined => {
  const gc = (globalThis as { gc?: unknown }).gc;
  return typeof gc === 'function' ? (gc as Collect) : undefined;
};

function takeGc(): Collect {
  setFlagsFromString('--expose-gc');
  try {
    return runInNewContext('gc') as Collect;
  } finally {
    setFlagsFromString('--no-expose-gc');
  }
}
