/** Helpers for the unit tests of support/ and of the components (not used by any command). */
import type { Clock } from '../src/timers.js';
import { ApiKubeConfig } from '../src/kubeconfig.js';

export interface ManualClock extends Clock {
  /** Moves time forward, running each timer that comes due, in order, at its own time. */
  advance(ms: number): void;
  /** Moves time forward without running any timer: a process that was paused (SIGSTOP) and resumes. */
  jump(ms: number): void;
  /** Delays of the pending timers from now, shortest first. */
  pending(): number[];
}

/** A clock whose timers fire only when the test advances it. */
export function manualClock(start = 0): ManualClock {
  let now = start;
  let timers: { at: number; fn: () => void; id: number }[] = [];
  let next = 0;
  return {
    now: () => now,
    setTimeout(fn, ms) {
      const id = next++;
      timers.push({ at: now + Math.max(0, ms), fn, id });
      return id;
    },
    clearTimeout(id) {
      timers = timers.filter((t) => t.id !== id);
    },
    advance(ms) {
      const until = now + ms;
      for (;;) {
        const due = timers.filter((t) => t.at <= until).sort((a, b) => a.at - b.at || a.id - b.id)[0];
        if (!due) break;
        timers = timers.filter((t) => t !== due);
        now = Math.max(now, due.at);
        due.fn();
      }
      now = until;
    },
    jump(ms) {
      now += ms;
    },
    pending: () => timers.map((t) => t.at - now).sort((a, b) => a - b),
  };
}

/** Lets every promise callback and I/O callback queued so far run. */
export const flush = (): Promise<void> => new Promise((r) => setImmediate(r));

/** A kubeconfig of a plain-HTTP test server on this machine (skipTLSVerify, as plain HTTP needs), with a token. */
export function plainHttpKubeConfig(port: number, timeoutMs = 5_000): ApiKubeConfig {
  const kc = new ApiKubeConfig(timeoutMs);
  kc.loadFromOptions({
    clusters: [{ name: 'c', server: `http://127.0.0.1:${port}`, skipTLSVerify: true }],
    users: [{ name: 'u', token: 't' }],
    contexts: [{ name: 'c', cluster: 'c', user: 'u' }],
    currentContext: 'c',
  });
  return kc;
}
