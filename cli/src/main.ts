/** `kindling <subcommand> [flags]`: one executable for every deployable. */
import { ConfigError, flagName, formatHelp, parseConfig } from '../../support/src/config.js';
import { loadCommand, type Command, type CommandIO } from '../../support/src/command.js';
import { COMMANDS } from './commands.js';

function usage(commands: readonly Command[]): string {
  const width = Math.max(...commands.map((c) => c.name.length));
  const rows = commands.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`);
  return `Usage: kindling <command> [flags]\n\nCommands:\n${rows.join('\n')}\n\nRun "kindling <command> --help" for a command's flags.\n`;
}

function longFlag(command: Command, arg: string): string {
  const key = /^-([A-Za-z])$/.exec(arg)?.[1];
  const alias = key === undefined ? undefined : command.short?.[key];
  return alias === undefined ? arg : `--${flagName(alias)}`;
}

/** `-f x` → `--file x` (the command's one-letter aliases), and a repeated list flag's values joined:
 * `--config a --config b` → `--config=a,b`. */
export function expandArgs(command: Command, argv: readonly string[]): string[] {
  const long = argv.map((a) => longFlag(command, a));
  const lists = new Map<string, string[]>();
  const rest: string[] = [];
  for (let i = 0; i < long.length; i++) {
    const arg = long[i] ?? '';
    const list = listFlag(command, arg);
    if (!list) {
      rest.push(arg);
      continue;
    }
    const value = list.value ?? long[++i] ?? '';
    lists.set(list.key, [...(lists.get(list.key) ?? []), value]);
  }
  return [...rest, ...[...lists].map(([key, values]) => `--${flagName(key)}=${values.join(',')}`)];
}

/** The key and inline value of a `--flag[=value]` argument naming a list flag. */
function listFlag(command: Command, arg: string): { key: string; value?: string } | undefined {
  const m = /^--([a-z0-9-]+)(?:=(.*))?$/.exec(arg);
  const key = m ? Object.keys(command.flags).find((k) => flagName(k) === m[1]) : undefined;
  if (!m || key === undefined || command.flags[key]?.type !== 'list') return undefined;
  return m[2] === undefined ? { key } : { key, value: m[2] };
}

/** Splits flags from positional arguments (a flag's separate value stays with it). */
function splitArgs(command: Command, argv: string[]): { flags: string[]; args: string[] } {
  const flags: string[] = [];
  const args: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i] ?? '';
    if (!a.startsWith('--')) {
      args.push(a);
      continue;
    }
    flags.push(a);
    const key = a.slice(2).replace(/-([a-z])/g, (_m, c: string) => c.toUpperCase());
    const takesValue = !a.includes('=') && command.flags[key] !== undefined && command.flags[key].type !== 'bool';
    if (takesValue && i + 1 < argv.length) flags.push(argv[++i] ?? '');
  }
  return { flags, args };
}

const isHelp = (arg: string | undefined): boolean => arg === '--help' || arg === '-h' || arg === 'help';

/** Resolves the command, or prints usage/help and gives the exit code. */
async function resolve(argv: string[], io: CommandIO, commands: readonly Command[]): Promise<Command | number> {
  const [name, ...rest] = argv;
  if (name === undefined || isHelp(name)) {
    io.out(usage(commands));
    return name === undefined ? 2 : 0;
  }
  const listed = commands.find((c) => c.name === name);
  if (!listed) {
    io.err(`kindling: unknown command "${name}"\n\n${usage(commands)}`);
    return 2;
  }
  const command = await loadCommand(listed);
  if (rest.some((a) => a === '--help' || a === '-h')) {
    const aliases = Object.entries(command.short ?? {}).map(([k, v]) => `-${k} = --${flagName(v)}`);
    const summary = aliases.length > 0 ? `${command.summary}\n\nShort flags: ${aliases.join(', ')}` : command.summary;
    io.out(
      formatHelp(`kindling ${command.name}${command.args ? ` ${command.args}` : ''} [flags]`, summary, command.flags),
    );
    return 0;
  }
  return command;
}

export async function main(argv: string[], io: CommandIO, commands: readonly Command[] = COMMANDS): Promise<number> {
  const command = await resolve(argv, io, commands);
  if (typeof command === 'number') return command;
  const { flags, args } = splitArgs(command, expandArgs(command, argv.slice(1)));
  try {
    return await command.run(parseConfig(command.flags, flags, io.env), io, args);
  } catch (err) {
    if (err instanceof ConfigError) {
      io.err(`kindling ${command.name}: ${err.message}\n`);
      return 2;
    }
    throw err;
  }
}
