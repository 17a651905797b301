/**
 * How V8 sizes the heap of each long-running component: the young generation's cap (`--max-semi-space-size`,
 * MiB) and V8's memory saver (`--memory-saver-mode`), both set when the process starts, and for the ignition
 * server V8's memory reducer off and its heaps' growing factor fixed (WITH_SAVER).
 *
 * Why the cap: Node 24 lets a semi-space grow to 64 MiB in a burst of allocation (the start-up reconciles of
 * every tenant) and keeps it while the process is idle, which was most of a component's resident memory per
 * guest (`node dist/test/bench/tenants.js`, docs/benchmarks.md).
 *
 * Why the memory saver: after that burst V8 kept the old generation it had grown to, mostly empty (the
 * controller at 8 guests, idle: 64 MiB committed for 27 MiB in use); with the memory saver it keeps its heap
 * close to what is in use (33 MiB for 30), at 1 guest too. Measured at 1 and 8 guests on the test bed: 14.1
 * against 5.3 MiB per guest over the four components (docs/benchmarks.md, cost per tenant).
 * `--optimize-for-size` measured the same but also changes what V8's compilers do: the ignition server ran with
 * it until its serving threads were seen spending about 15 % more CPU per 4 KiB request than with the memory
 * saver, whose resident memory with 1,000 tokens over 100 payloads of 1 MiB is the same (docs/benchmarks.md,
 * the serving and memory rows). In a burst the saver costs CPU, so memory-saver.ts turns it off while the process
 * is busy and on again once it is quiet.
 *
 * V8 reads the cap only when the process starts (`v8.setFlagsFromString` later changes nothing; measured), and
 * Node refuses the memory saver in `NODE_OPTIONS`, so `bin/kindling.js` restarts itself in place (`process.execve`,
 * same pid) with them before it runs the component: every launch, the image's, the local environment's, the
 * benchmarks' and the tests', gets them.
 *
 * An operator overrides the cap with `--max-semi-space-size` or `KINDLING_MAX_SEMI_SPACE_SIZE` (0: Node's own
 * sizing), and turns the memory saver off with `--memory-saver=false` or `KINDLING_MEMORY_SAVER=false`: both work
 * wherever the command is started (the image's entrypoint takes the component's flags and environment, not Node's).
 * A flag given to Node itself wins (`node --max-semi-space-size=…`, `NODE_OPTIONS`, `node --no-memory-saver-mode`).
 */
import { ConfigError, envName, flagName, parseBool, type FlagSpec } from './config.js';

const KEY = 'maxSemiSpaceSize';
const FLAG = `--${flagName(KEY)}`;
const SAVER_KEY = 'memorySaver';
const SAVER_FLAG = `--${flagName(SAVER_KEY)}`;
export const MEMORY_SAVER = '--memory-saver-mode';

/**
 * Each long-running command's cap, MiB, chosen by measurement (docs/benchmarks.md, cost per tenant). 8 against
 * 16: 12.5 against 17.0 MiB per guest. The ignition server keeps Node's own (0): capped, its serving threads
 * spent 47 (16) and 53 (8) µs per 4 KiB request against 42, and its RSS per guest did not move.
 */
const DEFAULT_MIB: Readonly<Record<string, number>> = Object.freeze({
  'nodepool-controller': 8,
  'inplace-upgrader': 8,
  drainer: 8,
  'ignition-server': 0,
});

const NO_MEMORY_REDUCER = '--no-memory-reducer';
const HEAP_GROWING_PERCENT = '--heap-growing-percent';
const OPTIMIZE_FOR_SIZE = '--optimize-for-size';

/**
 * Whether Node was started with `--optimize-for-size` (Node refuses it in NODE_OPTIONS): V8 then saves memory
 * whatever the saver's flag, and no governor starts (memory-saver.ts, startedWithSaver).
 */
export const optimizedForSize = (execArgv: readonly string[]): boolean =>
  execArgv.map(v8FlagName).includes(OPTIMIZE_FOR_SIZE);

/**
 * How far past what survived its last full collection each of the ignition server's heaps may grow before the
 * next one, %. V8's growing factor is then this, fixed in every mode (`--heap-growing-percent`): under the saver
 * V8's own is about 10 %; with the saver off it may reach 300 %, which this caps.
 *
 * Why: each booting host's connection leaves about 5 KB in its serving thread's old generation for a few seconds
 * (Node's TLS socket and what hangs from it: plain `node:https` in a thread does the same), which only a full
 * collection frees. A serving thread of the storm benchmark holds about 25 MB alive (6,000 tokens), so under the saver
 * one collected in a quiet spell had room for about 500 hosts, and a storm met a full collection in each thread (pauses
 * of 2.7 to 8.8 ms, marking steps of up to 8.6 ms before them), its hosts waiting behind them. At 100 % the room is
 * what is alive less the young generation (V8 starts marking that far before the limit): there, 25 MB less 8 to 16 MB,
 * 1,800 hosts a thread or more. At 50 % the storm still met one (docs/benchmarks.md, the storm row). The cost: an idle
 * heap may hold that much garbage until its next full collection; once the governor has collected it after a burst
 * (compacting), it holds what is alive, as before.
 */
const STORM_HEAP_GROWING_PERCENT = 100;

/**
 * The commands started with more Node flags whenever Kindling starts them with the memory saver. The ignition server
 * runs without V8's memory reducer, whose part the governor plays: after a burst, once the whole process has been
 * quiet, it collects every heap (memory-saver.ts). V8's reducer judges each thread idle by that thread's own
 * allocation: in a boot storm the ignition server's main thread, which serves nothing, read as idle, and the reducer
 * ran compacting collections of its heap (35 to 40 ms each, two 0.7 s apart) in the middle of the storm, the serving
 * threads' hosts waiting behind them (docs/benchmarks.md, the storm row). Its heaps also grow further before a full
 * collection (STORM_HEAP_GROWING_PERCENT). The controllers keep V8's own: no one waits on their pauses, and their
 * cost per guest was measured with it.
 */
const WITH_SAVER: Readonly<Record<string, readonly string[]>> = Object.freeze({
  'ignition-server': [NO_MEMORY_REDUCER, `${HEAP_GROWING_PERCENT}=${STORM_HEAP_GROWING_PERCENT}`],
});

/**
 * The `--max-semi-space-size` and `--memory-saver` flags of `command`, with their defaults: spread into the
 * command's flags, so its help lists them and its config accepts them (they act before it is read).
 */
export function heapFlags(command: string): { maxSemiSpaceSize: FlagSpec<'int'>; memorySaver: FlagSpec<'bool'> } {
  const mib = DEFAULT_MIB[command];
  if (mib === undefined) throw new Error(`kindling ${command}: no young-generation default`);
  return {
    [KEY]: {
      type: 'int',
      default: mib,
      help: "V8's largest semi-space in MiB, set when the process starts (0: Node's own, which grows to 64 and keeps it)",
    },
    [SAVER_KEY]: {
      type: 'bool',
      default: true,
      help: "Start V8's memory saver (--memory-saver-mode): the heap kept close to what is in use, after a burst too",
    },
  };
}

/** How the process runs: as it is, or restarted with these Node flags first. */
export type Launch = { restart: true; nodeFlags: string[] } | { restart: false };

/**
 * The V8 flag names Node was given itself, on its command line (this includes a restart's) or in NODE_OPTIONS,
 * in V8's `-` spelling (`--max_semi_space_size` too). The memory saver's `--no-` form counts as given: an
 * operator's way to turn it off.
 */
const givenToNode = (execArgv: readonly string[], env: NodeJS.ProcessEnv): Set<string> =>
  new Set([...execArgv, ...(env.NODE_OPTIONS ?? '').split(/\s+/)].map(positiveName));

/** A V8 flag's name with its `--no-` dropped: either spelling of a flag counts as given. */
const positiveName = (arg: string): string => v8FlagName(arg).replace(/^--no-/, '--');

/** A V8 flag's name as given to Node, in V8's `-` spelling (`--max_semi_space_size=8` is `--max-semi-space-size`). */
export const v8FlagName = (arg: string): string => arg.split('=')[0]!.replaceAll('_', '-');

/**
 * The raw value of `key` given on the command line (the last one wins, as in the config), else the environment's.
 * A bool flag alone is `true` and takes no value after it, as in the config.
 */
function given(key: string, bool: boolean, args: readonly string[], env: NodeJS.ProcessEnv): string | undefined {
  const flag = `--${flagName(key)}`;
  let raw = env[envName(key)];
  args.forEach((arg, i) => {
    if (arg === flag) raw = bool ? 'true' : (args[i + 1] ?? '');
    else if (arg.startsWith(`${flag}=`)) raw = arg.slice(flag.length + 1);
  });
  return raw;
}

/** Whether the memory saver is wanted: `--memory-saver` / `KINDLING_MEMORY_SAVER`, read as the config reads it. */
function memorySaverWanted(args: readonly string[], env: NodeJS.ProcessEnv): boolean {
  const raw = given(SAVER_KEY, true, args, env);
  return raw === undefined || parseBool(SAVER_FLAG, raw);
}

/**
 * How `kindling <command> <args>` starts: a long-running command is restarted with its young-generation cap
 * (none when it is 0) and the memory saver (unless turned off); each unless Node was given it itself.
 * An invalid value of either is refused here, before the restart; the config reads every value again after it.
 */
export function youngGenerationLaunch(
  command: string,
  args: readonly string[],
  env: NodeJS.ProcessEnv,
  execArgv: readonly string[],
): Launch {
  const fallback = DEFAULT_MIB[command];
  if (fallback === undefined) return { restart: false };
  const raw = given(KEY, false, args, env);
  if (raw !== undefined && !/^\d{1,4}$/.test(raw))
    throw new ConfigError(`${FLAG}: "${raw}" is not a size in MiB (a whole number; 0 for Node's own)`);
  const forNode = givenToNode(execArgv, env);
  const flags: string[] = [];
  const mib = raw === undefined ? fallback : Number(raw);
  if (mib !== 0 && !forNode.has(FLAG)) flags.push(`${FLAG}=${mib}`);
  flags.push(...saverFlags(command, memorySaverWanted(args, env), forNode, optimizedForSize(execArgv)));
  return flags.length > 0 ? { restart: true, nodeFlags: flags } : { restart: false };
}

/**
 * The memory saver, unless turned off or given to Node; and with it the command's other flags (WITH_SAVER), each unless
 * Node was given it (`--no-` too), and none under `--optimize-for-size` (optimizedForSize): no governor starts then to
 * stand in for the reducer, and the operator asked for the smallest heap.
 */
function saverFlags(command: string, wanted: boolean, forNode: Set<string>, forSize: boolean): string[] {
  if (!wanted || forNode.has(MEMORY_SAVER)) return [];
  if (forSize) return [MEMORY_SAVER];
  const more = (WITH_SAVER[command] ?? []).filter((flag) => !forNode.has(positiveName(flag)));
  return [MEMORY_SAVER, ...more];
}
