/**
 * The size of V8's young generation each long-running component starts with (`--max-semi-space-size`, MiB).
 *
 * Why: Node 24 lets a semi-space grow to 64 MiB in a burst of allocation (the start-up reconciles of every
 * tenant) and keeps it while the process is idle, which was most of a component's resident memory per guest
 * (`node dist/test/bench/tenants.js`, docs/benchmarks.md). V8 reads the flag only when the process starts
 * (`v8.setFlagsFromString` later changes nothing), so `bin/kindling.js` restarts itself in place
 * (`process.execve`, same pid) with the flag before it runs the component: every launch, the image's, the
 * local environment's, the benchmarks' and the tests', gets it without a `NODE_OPTIONS` of its own.
 *
 * An operator overrides it with `--max-semi-space-size` or `KINDLING_MAX_SEMI_SPACE_SIZE` (0: Node's own
 * sizing), or by giving Node the flag itself (`node --max-semi-space-size=…` or `NODE_OPTIONS`), which wins.
 */
import { ConfigError, envName, flagName, type FlagSpec } from './config.js';

const KEY = 'maxSemiSpaceSize';
const FLAG = `--${flagName(KEY)}`;

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

/** The `--max-semi-space-size` flag of `command`, with its default: spread into the command's flags. */
export function youngGenerationFlag(command: string): { maxSemiSpaceSize: FlagSpec<'int'> } {
  const mib = DEFAULT_MIB[command];
  if (mib === undefined) throw new Error(`kindling ${command}: no young-generation default`);
  return {
    [KEY]: {
      type: 'int',
      default: mib,
      help: "V8's largest semi-space in MiB, set when the process starts (0: Node's own, which grows to 64 and keeps it)",
    },
  };
}

/** How the process runs: as it is (and why), or restarted with these Node flags first. */
export type Launch =
  | { restart: true; nodeFlags: string[] }
  | { restart: false; reason: 'not-a-component' | 'set-for-node' | 'node-default' };

/** Node was given the flag itself: on its command line (this includes a restart's) or in NODE_OPTIONS, in
 * either of V8's spellings (`--max_semi_space_size` too). */
const setForNode = (execArgv: readonly string[], env: NodeJS.ProcessEnv): boolean =>
  [...execArgv, ...(env.NODE_OPTIONS ?? '').split(/\s+/)]
    .map((a) => a.split('=')[0]!.replaceAll('_', '-'))
    .some((name) => name === FLAG);

/** The raw value given on the command line (the last one wins, as in the config), else the environment's. */
function given(args: readonly string[], env: NodeJS.ProcessEnv): string | undefined {
  let raw = env[envName(KEY)];
  args.forEach((arg, i) => {
    if (arg === FLAG) raw = args[i + 1] ?? '';
    else if (arg.startsWith(`${FLAG}=`)) raw = arg.slice(FLAG.length + 1);
  });
  return raw;
}

/**
 * How `kindling <command> <args>` starts: a long-running command is restarted with its young-generation cap,
 * unless Node was given one or the cap is 0. An invalid value is refused here, before anything runs.
 */
export function youngGenerationLaunch(
  command: string,
  args: readonly string[],
  env: NodeJS.ProcessEnv,
  execArgv: readonly string[],
): Launch {
  const fallback = DEFAULT_MIB[command];
  if (fallback === undefined) return { restart: false, reason: 'not-a-component' };
  const raw = given(args, env);
  if (raw !== undefined && !/^\d{1,4}$/.test(raw))
    throw new ConfigError(`${FLAG}: "${raw}" is not a size in MiB (a whole number; 0 for Node's own)`);
  if (setForNode(execArgv, env)) return { restart: false, reason: 'set-for-node' };
  const mib = raw === undefined ? fallback : Number(raw);
  return mib === 0 ? { restart: false, reason: 'node-default' } : { restart: true, nodeFlags: [`${FLAG}=${mib}`] };
}
