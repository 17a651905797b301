/** A `kindling` subcommand: its flags (parsed once into a frozen config) and what it runs. */
import type { ConfigOf, FlagSpecs } from './config.js';

export interface CommandIO {
  out: (text: string) => void;
  err: (text: string) => void;
  env: NodeJS.ProcessEnv;
  /** stdout is a terminal: commands that redraw in place may (`status --watch`). */
  tty?: boolean;
  /**
   * The Node process this runs in, when it may restart itself in place with Node flags (bin/kindling.js):
   * its own Node flags, and the restart, which returns only in tests.
   */
  node?: { execArgv: readonly string[]; restart: (nodeFlags: string[]) => number };
}

export interface Command<S extends FlagSpecs = FlagSpecs> {
  name: string;
  summary: string;
  /** Positional arguments, for the usage line (e.g. "<pool>"). */
  args?: string;
  flags: S;
  /** One-letter aliases of flags, e.g. { f: 'file' } for `-f` as `--file`. */
  short?: Record<string, string>;
  /** Returns the exit code. */
  run(config: ConfigOf<S>, io: CommandIO, args: string[]): Promise<number>;
  /**
   * The command in full, imported when it runs (see lazyCommand): this one has its name and summary only, so
   * a process imports only the deployable it runs.
   */
  load?: () => Promise<Command>;
}

/** A deployable's command as its module defines it: its summary is written once, where it is listed (lazyCommand). */
export function defineCommand<S extends FlagSpecs>(
  command: Omit<Command<S>, 'summary'> & { summary?: string },
): Command {
  return { summary: '', ...command };
}

/**
 * A command known by name and summary until it runs, when `load` imports its module: starting a component
 * imports its own deployable only, not every other one (under load, importing them all took seconds of a
 * restart). Its flags and help come from the loaded command.
 */
export function lazyCommand(name: string, summary: string, load: () => Promise<Command>): Command {
  return {
    name,
    summary,
    flags: {},
    load,
    run: () => Promise.reject(new Error(`kindling ${name}: run the loaded command`)),
  };
}

/** The command in full: loaded when it is lazy, checked to be the one it was listed as, with the listing's summary. */
export async function loadCommand(command: Command): Promise<Command> {
  if (!command.load) return command;
  const loaded = await command.load();
  if (loaded.name !== command.name) throw new Error(`kindling ${command.name}: its module defines ${loaded.name}`);
  return { ...loaded, summary: command.summary };
}
