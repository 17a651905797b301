/** A `kindling` subcommand: its flags (parsed once into a frozen config) and what it runs. */
import type { ConfigOf, FlagSpecs } from './config.js';

export interface CommandIO {
  out: (text: string) => void;
  err: (text: string) => void;
  env: NodeJS.ProcessEnv;
  /** stdout is a terminal: commands that redraw in place may (`status --watch`). */
  tty?: boolean;
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
}

export function defineCommand<S extends FlagSpecs>(command: Command<S>): Command {
  return command;
}
