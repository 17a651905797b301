/**
 * The shared start-up of a long-running component: one root logger, one metrics registry, the ops port
 * (/healthz, /readyz, /metrics), the kubeconfig, optional Lease leader election, and graceful shutdown.
 * A component supplies start() (informers, queues, servers: what every replica runs) and, when it elects a
 * leader, lead() for what only the leader does; lead() returns a function that stops leading.
 */
import { hostname } from 'node:os';
import type * as k8s from '#k8s';
import type { Registry } from 'prom-client';
import { createLogger, type Logger } from './logger.js';
import { createQueueMetrics, createRegistry, type QueueMetrics } from './metrics.js';
import { startOpsServer, type ReadinessCheck } from './ops-server.js';
import { createShutdown, type Shutdown } from './shutdown.js';
import { checkLeaderTimings, LeaderElector, LEADER_DEFAULTS, type LeaderTimings } from './leader.js';
import { ConfigError, type FlagSpec } from './config.js';
import { loadKubeConfig, setRequestGate } from './kubeconfig.js';
import { runtimeWarning } from './runtime.js';
import { awaitFirstContact } from './first-contact.js';
import { startMemorySaverGovernor, type MemorySaverGovernor } from './memory-saver.js';

export { loadKubeConfig } from './kubeconfig.js';

/** Flags every long-running component has; spread into a command's flags. */
export const COMPONENT_FLAGS = {
  kubeconfig: {
    type: 'string',
    default: '',
    help: 'Kubeconfig of the management cluster; empty: $KUBECONFIG, ~/.kube/config, or in-cluster',
  },
  namespaces: {
    type: 'list',
    default: [] as string[],
    help: 'Tenant namespaces (of the NodePools) this component watches and acts in, comma-separated; "*": every namespace. Required',
  },
  logLevel: { type: 'string', default: 'info', help: 'Log level: trace, debug, info, warn, error' },
  opsAddress: {
    type: 'string',
    default: '127.0.0.1:0',
    help: 'Plain-HTTP address of /healthz, /readyz and /metrics (port 0: any free port)',
  },
  leaderElect: { type: 'bool', default: true, help: 'Elect a leader through a Lease so only one replica acts' },
  leaderElectionNamespace: {
    type: 'string',
    default: 'kindling-system',
    help: 'Namespace of the leader-election Lease',
  },
  leaderElectLeaseDuration: {
    type: 'duration',
    default: LEADER_DEFAULTS.leaseDurationMs,
    help: 'How long followers wait, after they last saw the Lease renewed, before taking it',
  },
  leaderElectRenewDeadline: {
    type: 'duration',
    default: LEADER_DEFAULTS.renewDeadlineMs,
    help: 'The leader stops acting (and exits) when it has not renewed the Lease for this long; shorter than the lease duration',
  },
  leaderElectRetryPeriod: {
    type: 'duration',
    default: LEADER_DEFAULTS.retryPeriodMs,
    help: 'How often the leader renews and followers try to take the Lease',
  },
} satisfies Record<string, FlagSpec>;

interface ComponentConfig {
  kubeconfig: string;
  namespaces: readonly string[];
  logLevel: string;
  opsAddress: string;
  leaderElect: boolean;
  leaderElectionNamespace: string;
  leaderElectLeaseDuration: number;
  leaderElectRenewDeadline: number;
  leaderElectRetryPeriod: number;
}

export interface ComponentContext {
  log: Logger;
  registry: Registry;
  queueMetrics: QueueMetrics;
  kubeConfig: k8s.KubeConfig;
  shutdown: Shutdown;
  /** Turns V8's memory saver off in a burst (memory-saver.ts); none when the process was started without it. */
  memorySaver?: MemorySaverGovernor;
}

export interface ComponentSpec {
  name: string;
  config: ComponentConfig;
  /** What every replica runs; returns its readiness checks. Register closers on ctx.shutdown. */
  start(ctx: ComponentContext): Promise<ReadinessCheck[]>;
  /** What only the leader runs; returns how to stop it. */
  lead?(ctx: ComponentContext): Promise<() => Promise<void>>;
}

/** Runs a component until SIGTERM/SIGINT; resolves when it has shut down. */
export async function runComponent(spec: ComponentSpec): Promise<void> {
  const timings = leaderTimings(spec.config);
  // Synchronous: crash() exits right after its fatal line, which must follow, not precede, the line saying why.
  const log = createLogger({ name: spec.name, level: spec.config.logLevel, sync: true });
  const runtime = runtimeWarning(process.version, new Date());
  if (runtime !== undefined) log.warn({ node: process.version }, runtime);
  const registry = createRegistry(spec.name);
  const shutdown = createShutdown(log);
  const ctx: ComponentContext = {
    log,
    registry,
    queueMetrics: createQueueMetrics(registry),
    kubeConfig: loadKubeConfig(spec.config.kubeconfig),
    shutdown,
    memorySaver: startMemorySaverGovernor({ log, registry }),
  };
  // Stopped as shutdown begins: a drain's quiet must not start a collection of every heap.
  void shutdown.begun.then(() => ctx.memorySaver?.stop());
  // Says where it is going and why it cannot get there, instead of retrying silently inside the informers.
  if (!(await awaitFirstContact({ kubeConfig: ctx.kubeConfig, log, stopped: shutdown.begun }))) return;
  const readiness = await spec.start(ctx);
  const ops = await startOpsServer({ address: spec.config.opsAddress, registry, readiness });
  shutdown.add('ops server', () => ops.close());
  log.info({ opsPort: ops.port }, 'Started');
  if (spec.lead) await startLeading(spec, ctx, timings);
  await shutdown.begun;
}

function leaderTimings(config: ComponentConfig): LeaderTimings {
  const timings = {
    leaseDurationMs: config.leaderElectLeaseDuration,
    renewDeadlineMs: config.leaderElectRenewDeadline,
    retryPeriodMs: config.leaderElectRetryPeriod,
  };
  const invalid = checkLeaderTimings(timings);
  if (invalid) throw new ConfigError(`--leader-elect-*: ${invalid}`);
  return timings;
}

/** Exits non-zero at once: the leader's work can no longer be trusted to be alone, or never started. */
function crash(log: Logger, message: string, fields: object): never {
  log.fatal(fields, message);
  process.exit(1);
}

async function startLeading(spec: ComponentSpec, ctx: ComponentContext, timings: LeaderTimings): Promise<void> {
  const lead = spec.lead?.bind(spec);
  if (!lead) return;
  if (!spec.config.leaderElect) {
    ctx.shutdown.add('leader work', await lead(ctx));
    return;
  }
  let stopLeading: (() => Promise<void>) | undefined;
  const elector: LeaderElector = new LeaderElector({
    ...timings,
    kubeConfig: ctx.kubeConfig,
    namespace: spec.config.leaderElectionNamespace,
    name: spec.name,
    identity: `${hostname()}-${process.pid}`,
    log: ctx.log,
    onStartedLeading: () => {
      lead(ctx).then(
        (stop) => void (stopLeading = stop),
        // Half-started leader work is worse than none: a peer takes over once the Lease expires.
        (err: unknown) => crash(ctx.log, "The leader's work failed to start: exiting", { err }),
      );
    },
    // Another replica may be leading by now: exit at once rather than finish anything (client-go does the same).
    onStoppedLeading: (reason) => crash(ctx.log, 'Lost leadership: exiting', { reason }),
  });
  // From the instant the renew deadline passes, nothing of this process reaches any apiserver, whatever runs first.
  setRequestGate(() =>
    elector.lapsed ? new Error("refused: this replica's leadership lapsed (renew deadline passed)") : undefined,
  );
  ctx.shutdown.add('leader election', async () => {
    await stopLeading?.();
    await elector.stop();
  });
  elector.start();
}
