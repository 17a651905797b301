/**
 * `kindling status`: per pool desired/current/ready, version, config hash, every condition that is not fine,
 * and during a rollout a progress bar with what each node is doing (status-view.ts), once or, with --watch,
 * redrawn on every change (status-watch.ts).
 */
import { COMPONENT_FLAGS, loadKubeConfig } from '../../support/src/component.js';
import { ConfigError, type ConfigOf, type FlagSpecs } from '../../support/src/config.js';
import { defineCommand, type Command } from '../../support/src/command.js';
import { parsePoolRef } from './cluster.js';
import { runStatus, type StatusScope } from './status-watch.js';
import { statusPreflight, StatusPreflightError } from './status-preflight.js';

export const STATUS_FLAGS = {
  kubeconfig: COMPONENT_FLAGS.kubeconfig,
  watch: { type: 'bool', default: false, help: 'Keep watching and redraw on every change (-w)' },
  namespace: { type: 'string', default: 'default', help: 'Namespace of the pools (-n)' },
  allNamespaces: { type: 'bool', default: false, help: 'Pools of every namespace (-A)' },
} satisfies FlagSpecs;

/** The pools the command shows: the one named, else every pool of -n's namespace, or of all with -A. */
export function statusScope(
  cfg: Pick<ConfigOf<typeof STATUS_FLAGS>, 'namespace' | 'allNamespaces'>,
  args: readonly string[],
): StatusScope {
  if (args.length > 1) throw new ConfigError('status takes at most one pool');
  const ref = args[0] === undefined ? undefined : parsePoolRef(args[0], cfg.namespace);
  return ref ? { namespace: ref.namespace, pool: ref.name } : cfg.allNamespaces ? {} : { namespace: cfg.namespace };
}

export const statusCommand: Command = defineCommand({
  name: 'status',
  args: '[namespace/pool]',
  short: { w: 'watch', n: 'namespace', A: 'allNamespaces' },
  flags: STATUS_FLAGS,
  async run(cfg, io, args) {
    const scope = statusScope(cfg, args);
    const kubeConfig = loadKubeConfig(cfg.kubeconfig);
    try {
      await statusPreflight(kubeConfig);
    } catch (err) {
      if (!(err instanceof StatusPreflightError)) throw err;
      io.err(`kindling status: ${err.message}\n`);
      return 1;
    }
    const stop = new AbortController();
    const abort = (): void => stop.abort();
    process.once('SIGINT', abort).once('SIGTERM', abort);
    try {
      await runStatus({
        kubeConfig,
        scope,
        watch: cfg.watch,
        io: { ...io, tty: io.tty ?? process.stdout.isTTY === true },
        signal: stop.signal,
      });
    } finally {
      process.off('SIGINT', abort).off('SIGTERM', abort);
    }
    return 0;
  },
});
