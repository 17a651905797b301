/** `kindling <subcommand> [flags]`: one executable for every deployable. */
import { ConfigError, formatHelp, parseConfig } from '../../support/src/config.js';
import type { Command, CommandIO } from './command.js';
import { COMMANDS } from './commands.js';

function usage(commands: readonly Command[]): string {
  const width = Math.max(...commands.map((c) => c.name.length));
  const rows = commands.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`);
  return `Usage: kindling <command> [flags]\n\nCommands:\n${rows.join('\n')}\n\nRun "kindling <command> --help" for a command's flags.\n`;
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
function resolve(argv: string[], io: CommandIO, commands: readonly Command[]): Command | number {
  const [name, ...rest] = argv;
  if (name === undefined || isHelp(name)) {
    io.out(usage(commands));
    return name === undefined ? 2 : 0;
  }
  const command = commands.find((c) => c.name === name);
  if (!command) {
    io.err(`kindling: unknown command "${name}"\n\n${usage(commands)}`);
    return 2;
  }
  if (rest.some((a) => a === '--help' || a === '-h')) {
    io.out(formatHelp(`kindling ${command.name}${command.args ? ` ${command.args}` : ''} [flags]`, command.summary, command.flags));
    return 0;
  }
  return command;
}

export async function main(argv: string[], io: CommandIO, commands: readonly Command[] = COMMANDS): Promise<number> {
  const command = resolve(argv, io, commands);
  if (typeof command === 'number') return command;
  const { flags, args } = splitArgs(command, argv.slice(1));
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
