/**
 * Flags and environment, parsed once into a frozen, typed config. Each flag has one default, one
 * environment variable (KINDLING_<FLAG>), and help text; the command line wins over the environment.
 */
type FlagType = 'string' | 'int' | 'duration' | 'bool' | 'list';

interface FlagValue {
  string: string;
  int: number;
  duration: number;
  bool: boolean;
  list: string[];
}

export interface FlagSpec<T extends FlagType = FlagType> {
  type: T;
  default: FlagValue[T];
  help: string;
}

export type FlagSpecs = Record<string, FlagSpec>;
export type ConfigOf<S extends FlagSpecs> = Readonly<{ [K in keyof S]: FlagValue[S[K]['type']] }>;

export class ConfigError extends Error {
  override readonly name = 'ConfigError';
}

/** The tenant namespaces a component acts in, or 'all' (only when "*" was said). */
export type Namespaces = readonly string[] | 'all';

const NAMESPACE = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;

/**
 * The `--namespaces` of a component: whoever can write in a watched namespace can drive it (a labelled Secret
 * gets a token minted, a NodePool gets Machines), so the list is required, and every namespace is an explicit
 * "*", never a default.
 */
export function tenantNamespaces(names: readonly string[]): Namespaces {
  const unique = [...new Set(names.map((n) => n.trim()).filter((n) => n !== ''))];
  if (unique.includes('*')) {
    if (unique.length > 1)
      throw new ConfigError('--namespaces: "*" watches every namespace and cannot be combined with names');
    return 'all';
  }
  if (unique.length === 0)
    throw new ConfigError(
      '--namespaces is required: the tenant namespaces (of the NodePools) this component serves, comma-separated, or "*" for every namespace',
    );
  const bad = unique.find((n) => !NAMESPACE.test(n));
  if (bad !== undefined) throw new ConfigError(`--namespaces: "${bad}" is not a namespace name`);
  return Object.freeze(unique);
}

/** `--log-level` ↔ `logLevel` ↔ `KINDLING_LOG_LEVEL`. */
export const flagName = (key: string): string => key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
export const envName = (key: string): string => `KINDLING_${flagName(key).replace(/-/g, '_').toUpperCase()}`;

const DURATION_UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** Go-style durations ("30s", "1h30m", "250ms") to milliseconds. */
export function parseDuration(text: string): number {
  const parts = [...text.matchAll(/(\d+(?:\.\d+)?)(ms|s|m|h)/g)];
  if (parts.length === 0 || parts.map((p) => p[0]).join('') !== text) {
    throw new ConfigError(`"${text}" is not a duration such as 30s, 10m or 1h30m`);
  }
  return parts.reduce((ms, p) => ms + Number(p[1]) * (DURATION_UNITS[p[2] ?? ''] ?? 0), 0);
}

export function formatDuration(ms: number): string {
  if (ms % 3_600_000 === 0 && ms > 0) return `${ms / 3_600_000}h`;
  if (ms % 60_000 === 0 && ms > 0) return `${ms / 60_000}m`;
  if (ms % 1000 === 0) return `${ms / 1000}s`;
  return `${ms}ms`;
}

/** A bool flag's value as every reader takes it: true, false, 1 or 0. */
export function parseBool(where: string, raw: string): boolean {
  if (!['true', 'false', '1', '0'].includes(raw)) throw new ConfigError(`${where}: "${raw}" is not true or false`);
  return raw === 'true' || raw === '1';
}

function convert(key: string, spec: FlagSpec, raw: string): FlagValue[FlagType] {
  const where = `--${flagName(key)}`;
  switch (spec.type) {
    case 'int': {
      if (!/^-?\d+$/.test(raw)) throw new ConfigError(`${where}: "${raw}" is not an integer`);
      return Number(raw);
    }
    case 'duration':
      try {
        return parseDuration(raw);
      } catch (err) {
        throw new ConfigError(`${where}: ${(err as Error).message}`);
      }
    case 'bool':
      return parseBool(where, raw);
    case 'list':
      return raw === '' ? [] : raw.split(',').map((s) => s.trim());
    default:
      return raw;
  }
}

/** What a command line is read against: the flags, and their one-letter aliases (`{ f: 'file' }`: `-f` is `--file`). */
export interface CommandLine<S extends FlagSpecs> {
  flags: S;
  short?: Readonly<Record<string, string>>;
}

/**
 * The one reader of a command line: `--flag=value`, `--flag value`, `--bool-flag`, a `-x` alias, a repeated
 * list flag (its values joined), and the environment under them; any other argument is positional. An unknown
 * `--flag` is refused.
 */
export function parseCommandLine<S extends FlagSpecs>(
  line: CommandLine<S>,
  argv: readonly string[],
  env: NodeJS.ProcessEnv,
): { config: ConfigOf<S>; args: string[] } {
  const specs = line.flags;
  const values: Record<string, unknown> = {};
  for (const [key, spec] of Object.entries(specs)) {
    const fromEnv = env[envName(key)];
    values[key] = fromEnv === undefined ? spec.default : convert(key, spec, fromEnv);
  }
  const { given, args } = readArgs(line, argv);
  for (const [key, raw] of given) values[key] = convert(key, specs[key] as FlagSpec, raw);
  return { config: Object.freeze(values) as ConfigOf<S>, args };
}

/** A component's flags, which take no positional argument. */
export function parseConfig<S extends FlagSpecs>(
  specs: S,
  argv: readonly string[],
  env: NodeJS.ProcessEnv,
): ConfigOf<S> {
  const { config, args } = parseCommandLine({ flags: specs }, argv, env);
  if (args[0] !== undefined) throw new ConfigError(`unknown flag "${args[0]}" (see --help)`);
  return config;
}

/** The raw value of every flag given (a list flag's values joined), and the positional arguments. */
function readArgs(
  line: CommandLine<FlagSpecs>,
  argv: readonly string[],
): { given: Map<string, string>; args: string[] } {
  const byFlag = new Map(Object.keys(line.flags).map((k) => [flagName(k), k]));
  const given = new Map<string, string>();
  const args: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = longForm(line, argv[i] ?? '');
    if (!arg.startsWith('--')) {
      args.push(arg);
      continue;
    }
    const { key, raw, consumed } = readFlag(line.flags, byFlag, arg, argv[i + 1]);
    const earlier = line.flags[key]?.type === 'list' ? given.get(key) : undefined;
    given.set(key, earlier === undefined ? raw : `${earlier},${raw}`);
    i += consumed;
  }
  return { given, args };
}

/** `-f` as the flag it aliases (`--file`); any other argument as it is. */
function longForm(line: CommandLine<FlagSpecs>, arg: string): string {
  const letter = /^-([A-Za-z])$/.exec(arg)?.[1];
  const key = letter === undefined ? undefined : line.short?.[letter];
  return key === undefined ? arg : `--${flagName(key)}`;
}

/** Reads the flag `arg` (`next` is the argument after it): its key, raw value, and whether its value took `next`. */
function readFlag(
  specs: FlagSpecs,
  byFlag: Map<string, string>,
  arg: string,
  next: string | undefined,
): { key: string; raw: string; consumed: number } {
  const match = /^--([a-z0-9-]+)(?:=(.*))?$/.exec(arg);
  const key = match ? byFlag.get(match[1] ?? '') : undefined;
  if (!match || key === undefined) throw new ConfigError(`unknown flag "${arg}" (see --help)`);
  if (match[2] !== undefined) return { key, raw: match[2], consumed: 0 };
  if (specs[key]?.type === 'bool') return { key, raw: 'true', consumed: 0 };
  if (next === undefined) throw new ConfigError(`--${match[1]} needs a value`);
  return { key, raw: next, consumed: 1 };
}

function showDefault(spec: FlagSpec): string {
  if (spec.type === 'duration') return formatDuration(spec.default as number);
  if (spec.type === 'list') return (spec.default as string[]).join(',');
  return String(spec.default);
}

/** Help text: every flag with its type, default and environment variable. */
export function formatHelp(usage: string, summary: string, specs: FlagSpecs): string {
  const rows = Object.entries(specs).map(([key, spec]) => {
    const flag = `  --${flagName(key)}${spec.type === 'bool' ? '' : ` <${spec.type}>`}`;
    return `${flag}\n      ${spec.help} (default: "${showDefault(spec)}", env: ${envName(key)})`;
  });
  return `Usage: ${usage}\n\n${summary}\n\nFlags:\n${rows.join('\n')}\n`;
}
