/** `kindling <subcommand> [flags]`: one executable for every deployable. */
import { ConfigError, flagName, formatHelp, parseCommandLine } from '../../support/src/config.js';
import { loadCommand, type Command, type CommandIO } from '../../support/src/command.js';
import { youngGenerationLaunch } from '../../support/src/young-generation.js';
import { COMMANDS } from './commands.js';

function usage(commands: readonly Command[]): string {
  const width = Math.max(...commands.map((c) => c.name.length));
  const rows = commands.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`);
  return `Usage: kindling <command> [flags]\n\nCommands:\n${rows.join('\n')}\n\nRun "kindling <command> --help" for a command's flags.\n`;
}

const isHelp = (arg: string | undefined): boolean => arg === '--help' || arg === '-h' || arg === 'help';

/** The listed command (its module not imported yet), or prints usage/help and gives the exit code. */
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
  if (!rest.some((a) => a === '--help' || a === '-h')) return listed;
  const command = await loadCommand(listed);
  const aliases = Object.entries(command.short ?? {}).map(([k, v]) => `-${k} = --${flagName(v)}`);
  const summary = aliases.length > 0 ? `${command.summary}\n\nShort flags: ${aliases.join(', ')}` : command.summary;
  io.out(
    formatHelp(`kindling ${command.name}${command.args ? ` ${command.args}` : ''} [flags]`, summary, command.flags),
  );
  return 0;
}

/** The young-generation cap applies from the process's start: restart with it before the deployable is imported. */
function restarted(name: string, argv: string[], io: CommandIO): number | undefined {
  if (!io.node) return undefined;
  const launch = youngGenerationLaunch(name, argv.slice(1), io.env, io.node.execArgv);
  return launch.restart ? io.node.restart(launch.nodeFlags) : undefined;
}

export async function main(argv: string[], io: CommandIO, commands: readonly Command[] = COMMANDS): Promise<number> {
  const listed = await resolve(argv, io, commands);
  if (typeof listed === 'number') return listed;
  try {
    const code = restarted(listed.name, argv, io);
    if (code !== undefined) return code;
    const command = await loadCommand(listed);
    const { config, args } = parseCommandLine(command, argv.slice(1), io.env);
    return await command.run(config, io, args);
  } catch (err) {
    if (err instanceof ConfigError) {
      io.err(`kindling ${listed.name}: ${err.message}\n`);
      return 2;
    }
    throw err;
  }
}
