/**
 * V8's memory saver (young-generation.ts starts every long-running component with it) off while the process is
 * busy, and on again, its heap collected, once it has been quiet for a while.
 *
 * Why: the saver keeps each heap's old-generation limit close to what is alive (the ignition server's less close:
 * young-generation.ts, STORM_HEAP_GROWING_PERCENT), which is what holds an idle component's memory down (the cost per
 * tenant), but in a burst it makes V8 collect the old generation over and over: about a third of the NodePool
 * controller's CPU while 1,000 pools converge, and the full collections (8 to 34 ms each) behind the ignition server's
 * p99 in a storm of boots (docs/benchmarks.md). V8 reads the flag each time it sizes a heap, so it can change while the
 * process runs; it is one flag for the whole process, every isolate (the serving threads') at once, so busy means the
 * whole process's CPU, every thread's.
 *
 * Back on, the saver acts only at the next full collection, which an idle heap, its limit raised in the burst,
 * may not reach for hours: so the heaps are collected then (each isolate its own: `onCollect`).
 */
import { setFlagsFromString } from 'node:v8';
import { Counter, Gauge, type Registry } from 'prom-client';
import type { Logger } from './logger.js';
import { MEMORY_SAVER, optimizedForSize, v8FlagName } from './young-generation.js';
import { collectGarbage } from './collect-garbage.js';

/** The whole process's CPU, in cores, over BUSY_WINDOW_MS, from which it counts as busy. */
export const BUSY_CORES = 0.5;
/** The whole process's CPU, in cores, below which it counts as quiet. */
export const QUIET_CORES = 0.1;
/** How long the process stays quiet before the saver is back on: longer than a pause between two reconciles. */
export const QUIET_MS = 10_000;
/**
 * The longest quiet asked for: each burst that comes back within this long of the saver going on doubles the
 * quiet the next return asks for, so busy spells a few seconds apart (a tenant's hosts booting in waves) do not
 * cost a collection of every heap each time.
 */
export const MAX_QUIET_MS = 300_000;
/**
 * How often the CPU is sampled: a burst runs on the saver for BUSY_WINDOW_MS and up to one sample more. Its
 * first collections under the saver are the slow ones (compacting a heap sized to an idle process): sampled every
 * 500 ms, a boot storm's first half second had them in both serving threads (22 to 24 ms). A sample is one timer
 * and one getrusage call.
 */
const SAMPLE_MS = 100;
/**
 * How long the CPU is averaged over to call the process busy: two samples. One sample was enough until the
 * tenants benchmark counted the saver turned off in idle components, up to twice in two minutes, each time asking
 * for twice the quiet and a collection of every heap after it: a 50 ms spell of one thread fills half of a 100 ms
 * sample. Over 200 ms it takes 100 ms of work: a boot storm of about half a core reaches it within a few samples.
 */
const BUSY_WINDOW_MS = 200;
/**
 * How long the CPU is averaged over to judge the process quiet: a 10 ms spell in a sample (a scrape, a lease
 * renewal, a collection) is not the end of a quiet spell.
 */
export const QUIET_WINDOW_MS = 500;

export interface SaverState {
  /** Whether the saver is on. */
  on: boolean;
  /** How long the process must be quiet before the saver is back on. */
  quietNeededMs: number;
  /** Since when the process has been quiet (the governor's clock); undefined while it is not. */
  quietSinceMs?: number;
  /** When the saver last went back on. */
  onSinceMs?: number;
}

export const INITIAL_SAVER_STATE: SaverState = Object.freeze({ on: true, quietNeededMs: QUIET_MS });

/** What to do after a sample: turn the saver off, or on (and collect), or nothing. */
export type SaverChange = 'off' | 'on' | undefined;

/**
 * The next state from one sample: the process's CPU over the last interval, in cores, at `nowMs`. Off at once
 * when busy; on after `quietNeededMs` quiet in a row; between the two thresholds, neither (and not quiet).
 */
export function saverStep(state: SaverState, cores: number, nowMs: number): { state: SaverState; change: SaverChange } {
  const { on, quietNeededMs, onSinceMs } = state;
  if (cores >= BUSY_CORES) {
    if (!on) return { state: { on, quietNeededMs }, change: undefined };
    const soon = onSinceMs !== undefined && nowMs - onSinceMs < MAX_QUIET_MS;
    return {
      state: { on: false, quietNeededMs: soon ? Math.min(2 * quietNeededMs, MAX_QUIET_MS) : QUIET_MS },
      change: 'off',
    };
  }
  if (cores >= QUIET_CORES) return { state: notQuiet(state), change: undefined };
  const quietSinceMs = state.quietSinceMs ?? nowMs;
  if (!on && nowMs - quietSinceMs >= quietNeededMs)
    return { state: { on: true, quietNeededMs, onSinceMs: nowMs }, change: 'on' };
  return { state: { ...state, quietSinceMs }, change: undefined };
}

function notQuiet(state: SaverState): SaverState {
  const next = { ...state };
  delete next.quietSinceMs;
  return next;
}

export interface GovernorDeps {
  log: Logger;
  registry?: Registry;
  /** The process's CPU time so far, µs (user + system, every thread). */
  cpuMicros?: () => number;
  nowMs?: () => number;
  setSaver?: (on: boolean) => void;
  collect?: () => void;
}

/** Turns the saver off and on as saverStep decides, from a sample every SAMPLE_MS (see the file's comment). */
export class MemorySaverGovernor {
  #state: SaverState = INITIAL_SAVER_STATE;
  #deps: Required<Omit<GovernorDeps, 'registry'>>;
  #listeners: (() => Promise<void> | void)[] = [];
  /** The samples since the latest one about BUSY_WINDOW_MS old (#busyWindow), that one first. */
  #recent!: CpuAt[];
  /** Where the quiet window (QUIET_WINDOW_MS) under way started. */
  #window!: CpuAt;
  #collecting: Promise<void> | undefined;
  #timer: NodeJS.Timeout | undefined;
  #switches: Counter<'to'>;
  #collectionSeconds: Counter;
  #on: Gauge;

  constructor(deps: GovernorDeps) {
    this.#deps = {
      log: deps.log,
      cpuMicros: deps.cpuMicros ?? processCpuMicros,
      nowMs: deps.nowMs ?? (() => performance.now()),
      setSaver: deps.setSaver ?? ((on) => setFlagsFromString(on ? '--memory-saver-mode' : '--no-memory-saver-mode')),
      collect: deps.collect ?? collectGarbage,
    };
    const registers = deps.registry ? [deps.registry] : [];
    this.#switches = new Counter({
      name: 'kindling_memory_saver_switches_total',
      help: "V8's memory saver turned off (the process busy) or on again (quiet), its heaps collected.",
      labelNames: ['to'],
      registers,
    });
    this.#collectionSeconds = new Counter({
      name: 'kindling_memory_saver_collection_seconds_total',
      help: 'Seconds spent collecting every heap of the process when the memory saver went back on.',
      registers,
    });
    this.#on = new Gauge({ name: 'kindling_memory_saver_on', help: "1 while V8's memory saver is on.", registers });
    this.#on.set(1);
    this.#restart();
  }

  /** Also run on every turn back on, one after the other: a thread's own heap (each isolate collects its own). */
  onCollect(fn: () => Promise<void> | void): void {
    this.#listeners.push(fn);
  }

  start(): void {
    this.#timer ??= setInterval(() => this.sample(), SAMPLE_MS).unref();
  }

  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
  }

  /** One sample (the timer's; tests call it). None while the heaps are being collected. */
  sample(): void {
    if (this.#collecting) return;
    const now = this.#now();
    const recent = this.#busyWindow(now);
    const busy = recent !== undefined && coresOver(recent, now) >= BUSY_CORES;
    if (!busy && now.at - this.#window.at < QUIET_WINDOW_MS) return;
    const cores = coresOver(busy ? recent : this.#window, now);
    this.#window = now;
    const { state, change } = saverStep(this.#state, cores, now.at);
    this.#state = state;
    if (change === undefined) return;
    this.#deps.setSaver(change === 'on');
    this.#switches.inc({ to: change });
    this.#on.set(change === 'on' ? 1 : 0);
    this.#deps.log.debug({ cores: Math.round(cores * 100) / 100 }, `Memory saver ${change}`);
    if (change === 'on') this.#collecting = this.#collectAll().finally(() => (this.#collecting = undefined));
  }

  /** Resolves once a collection under way (if any) is over. */
  async settled(): Promise<void> {
    await this.#collecting;
  }

  /**
   * Every heap, one at a time. The CPU they take is not the process's work: the next sample starts after them,
   * else a collection of a large heap would read as a burst and turn the saver off again.
   */
  async #collectAll(): Promise<void> {
    const started = this.#deps.nowMs();
    const collections: (() => Promise<void> | void)[] = [this.#deps.collect, ...this.#listeners];
    for (const fn of collections) {
      try {
        await fn();
      } catch (err) {
        this.#deps.log.warn({ err }, 'A heap collection after the burst failed');
      }
    }
    this.#restart();
    this.#collectionSeconds.inc((this.#window.at - started) / 1000);
  }

  /**
   * Where the busy window ending `now` starts: the latest sample about BUSY_WINDOW_MS old or older, if any yet.
   * About: the timer often fires a fraction of a millisecond early by this clock, and two samples 199 ms apart are
   * the window all the same.
   */
  #busyWindow(now: CpuAt): CpuAt | undefined {
    const oldEnough = now.at - (BUSY_WINDOW_MS - SAMPLE_MS / 4);
    this.#recent.push(now);
    while ((this.#recent[1]?.at ?? now.at) <= oldEnough) this.#recent.shift();
    const from = this.#recent[0];
    return from !== undefined && from.at <= oldEnough ? from : undefined;
  }

  /** Every window starts again now: at construction, and after a collection (whose CPU is not the process's work). */
  #restart(): void {
    this.#window = this.#now();
    this.#recent = [this.#window];
  }

  #now(): CpuAt {
    return { cpu: this.#deps.cpuMicros(), at: this.#deps.nowMs() };
  }
}

/** The process's CPU time (µs) at a moment (the governor's clock, ms). */
interface CpuAt {
  cpu: number;
  at: number;
}

/** The process's CPU between two moments, in cores. */
const coresOver = (from: CpuAt, to: CpuAt): number => (to.cpu - from.cpu) / 1000 / (to.at - from.at);

function processCpuMicros(): number {
  const { user, system } = process.cpuUsage();
  return user + system;
}

/**
 * Whether this process was started with the saver (young-generation.ts's restart, or Node's own flag), the last
 * of its two spellings winning. Not under `--optimize-for-size`, which keeps V8 saving memory whatever the flag.
 */
export function startedWithSaver(execArgv: readonly string[] = process.execArgv): boolean {
  return (
    !optimizedForSize(execArgv) &&
    execArgv.map(v8FlagName).findLast((a) => a === MEMORY_SAVER || a === '--no-memory-saver-mode') === MEMORY_SAVER
  );
}

/** A started governor when the process was started with the saver (startedWithSaver), else none. */
export function startMemorySaverGovernor(deps: GovernorDeps): MemorySaverGovernor | undefined {
  if (!startedWithSaver()) return undefined;
  const governor = new MemorySaverGovernor(deps);
  governor.start();
  return governor;
}
