/** `kindling <subcommand> [flags]`: one executable for every deployable. */
import { ConfigError, flagName, formatHelp, parseCommandLine } from '../../support/src/config.js';
import { loadCommand, type Command, type CommandIO } from '../../support/src/command.js';
import { COMMANDS } from './commands.js';

function usage(commands: readonly Command[]): string {
  const width = Math.max(...commands.map((c) => c.name.length));
  const rows = commands.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`);
  return `Usage: kindling <command> [flags]\n\nCommands:\n${rows.join('\n')}\n\nRun "kindling <command> --help" for a command's flags.\n`;
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
  try {
    const { config, args } = parseCommandLine(command, argv.slice(1), io.env);
    return await command.run(config, io, args);
  } catch (err) {
    if (err instanceof ConfigError) {
      io.err(`kindling ${command.name}: ${err.message}\n`);
      return 2;
    }
    throw err;
  }
}
