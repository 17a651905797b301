/**
 * Where the CPU goes over a stretch of the NodePool controller benchmark (its window, each replay): the CPU
 * seconds of each of its processes (/proc/<pid>/stat) and of the whole machine (/proc/stat), read before and
 * after. Beside the apiservers' request counts, it tells which process pays for the window's extra over a
 * replay, and how much of the two cores went to work that is not the benchmark's (others share the machine).
 */
import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { processCpuSeconds } from './cpu-seconds.js';

/** The benchmark's processes by name: each gives its pid now, or undefined when it does not run. */
export type Processes = ReadonlyArray<readonly [string, () => number | undefined]>;

interface Reading {
  at: number;
  machine: number;
  byProcess: Map<string, number>;
}

/** CPU seconds over a stretch, by process, with the rest of the machine and what two cores offered. */
export type CpuUse = Map<string, number>;

const OTHERS = 'the rest of the machine';
const ALL = 'the machine, all';
const OFFERED = 'elapsed × cores';

function cpuOf(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined;
  try {
    return processCpuSeconds(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    // Gone between its pid and its stat: it used nothing more that a later reading could tell.
    return undefined;
  }
}

/** Busy seconds of every core together (/proc/stat's first line: all but idle and iowait, in ticks of 1/100 s). */
function machineSeconds(): number {
  const ticks = (readFileSync('/proc/stat', 'utf8').split('\n')[0] ?? '').trim().split(/\s+/).slice(1).map(Number);
  const [user = 0, nice = 0, system = 0, , , irq = 0, softirq = 0, steal = 0] = ticks;
  return (user + nice + system + irq + softirq + steal) / 100;
}

function read(processes: Processes): Reading {
  const byProcess = new Map<string, number>();
  for (const [name, pid] of processes) {
    const seconds = cpuOf(pid());
    if (seconds !== undefined) byProcess.set(name, seconds);
  }
  return { at: performance.now(), machine: machineSeconds(), byProcess };
}

/**
 * Starts a stretch now; `stop` gives its use. A process running at only one end of it counts nothing: the
 * processes are started before a stretch and stopped after.
 */
export function cpuStretch(processes: Processes): { stop: () => CpuUse } {
  const before = read(processes);
  return {
    stop: () => {
      const after = read(processes);
      const use: CpuUse = new Map();
      for (const [name, seconds] of after.byProcess) {
        const first = before.byProcess.get(name);
        if (first !== undefined) use.set(name, seconds - first);
      }
      const ours = [...use.values()].reduce((a, b) => a + b, 0);
      const machine = after.machine - before.machine;
      use.set(OTHERS, Math.max(0, machine - ours));
      use.set(ALL, machine);
      use.set(OFFERED, ((after.at - before.at) / 1000) * availableParallelism());
      return use;
    },
  };
}

/**
 * A floor for a stretch's seconds had the named processes used no CPU and the benchmark's other processes the
 * same: the others' CPU ÷ the cores (no stretch is shorter; what else ran on the machine is left out). While the
 * stretch keeps the cores busy, as the window with 1,000 pools does, it is that long, and each CPU second the
 * named processes save shortens it by 1/cores.
 */
export function secondsWithout(
  use: CpuUse,
  processes: Processes,
  names: readonly string[],
  cores = availableParallelism(),
): number {
  const others = processes.map(([name]) => name).filter((name) => !names.includes(name));
  return others.reduce((sum, name) => sum + (use.get(name) ?? 0), 0) / cores;
}

/** Runs `fn` as one stretch. */
export async function withCpu<T>(processes: Processes, fn: () => Promise<T>): Promise<{ value: T; cpu: CpuUse }> {
  const stretch = cpuStretch(processes);
  const value = await fn();
  return { value, cpu: stretch.stop() };
}

/** Lines comparing stretches (by column, named): each process's CPU seconds, then the machine's. */
export function cpuTable(processes: Processes, columns: Array<{ name: string; cpu: CpuUse }>): string[] {
  const rows = [...processes.map(([name]) => name), OTHERS, ALL, OFFERED];
  const width = Math.max(...rows.map((r) => r.length));
  const header = `  ${'CPU seconds'.padEnd(width)}  ${columns.map((c) => c.name.padStart(14)).join('  ')}`;
  const cell = (value: number | undefined): string => (value === undefined ? '-' : value.toFixed(1)).padStart(14);
  return [header, ...rows.map((r) => `  ${r.padEnd(width)}  ${columns.map((c) => cell(c.cpu.get(r))).join('  ')}`)];
}
