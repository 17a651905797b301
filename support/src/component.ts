/**
 * The shared start-up of a long-running component: one root logger, one metrics registry, the ops port
 * (/healthz, /readyz, /metrics), the kubeconfig, optional Lease leader election, and graceful shutdown.
 * A component supplies start() (informers, queues, servers: what every replica runs) and, when it elects a
 * leader, lead() for what only the leader does; lead() returns a function that stops leading.
 */
import { hostname } from 'node:os';
import * as k8s from '@kubernetes/client-node';
import type { Registry } from 'prom-client';
import { createLogger, type Logger } from './logger.js';
import { createQueueMetrics, createRegistry, type QueueMetrics } from './metrics.js';
import { startOpsServer, type ReadinessCheck } from './ops-server.js';
import { createShutdown, type Shutdown } from './shutdown.js';
import { LeaderElector } from './leader.js';
import type { FlagSpec } from './config.js';

/** Flags every long-running component has; spread into a command's flags. */
export const COMPONENT_FLAGS = {
  kubeconfig: { type: 'string', default: '', help: 'Kubeconfig of the management cluster; empty: $KUBECONFIG, ~/.kube/config, or in-cluster' },
  logLevel: { type: 'string', default: 'info', help: 'Log level: trace, debug, info, warn, error' },
  opsAddress: { type: 'string', default: '127.0.0.1:0', help: 'Plain-HTTP address of /healthz, /readyz and /metrics (port 0: any free port)' },
  leaderElect: { type: 'bool', default: true, help: 'Elect a leader through a Lease so only one replica acts' },
  leaderElectionNamespace: { type: 'string', default: 'kindling-system', help: 'Namespace of the leader-election Lease' },
} satisfies Record<string, FlagSpec>;

export interface ComponentConfig {
  kubeconfig: string;
  logLevel: string;
  opsAddress: string;
  leaderElect: boolean;
  leaderElectionNamespace: string;
}

export interface ComponentContext {
  log: Logger;
  registry: Registry;
  queueMetrics: QueueMetrics;
  kubeConfig: k8s.KubeConfig;
  shutdown: Shutdown;
}

export interface ComponentSpec {
  name: string;
  config: ComponentConfig;
  /** What every replica runs; returns its readiness checks. Register closers on ctx.shutdown. */
  start(ctx: ComponentContext): Promise<ReadinessCheck[]>;
  /** What only the leader runs; returns how to stop it. */
  lead?(ctx: ComponentContext): Promise<() => Promise<void>>;
}

export function loadKubeConfig(path: string): k8s.KubeConfig {
  const kc = new k8s.KubeConfig();
  if (path === '') kc.loadFromDefault();
  else kc.loadFromFile(path);
  return kc;
}

/** Runs a component until SIGTERM/SIGINT; resolves when it has shut down. */
export async function runComponent(spec: ComponentSpec): Promise<void> {
  const log = createLogger({ name: spec.name, level: spec.config.logLevel });
  const registry = createRegistry(spec.name);
  const shutdown = createShutdown(log);
  const ctx: ComponentContext = { log, registry, queueMetrics: createQueueMetrics(registry), kubeConfig: loadKubeConfig(spec.config.kubeconfig), shutdown };
  const readiness = await spec.start(ctx);
  const ops = await startOpsServer({ address: spec.config.opsAddress, registry, readiness });
  shutdown.add('ops server', () => ops.close());
  log.info({ opsPort: ops.port }, 'Started');
  if (spec.lead) await startLeading(spec, ctx);
  await shutdown.begun;
}

async function startLeading(spec: ComponentSpec, ctx: ComponentContext): Promise<void> {
  const lead = spec.lead?.bind(spec);
  if (!lead) return;
  if (!spec.config.leaderElect) {
    ctx.shutdown.add('leader work', await lead(ctx));
    return;
  }
  let stopLeading: (() => Promise<void>) | undefined;
  let releasing = false;
  const elector = new LeaderElector({
    kubeConfig: ctx.kubeConfig,
    namespace: spec.config.leaderElectionNamespace,
    name: spec.name,
    identity: `${hostname()}-${process.pid}`,
    log: ctx.log,
    onStartedLeading: () => {
      void lead(ctx).then((stop) => (stopLeading = stop));
    },
    // Losing the lease mid-work could mean two leaders writing: exit and let the restart campaign again.
    onStoppedLeading: () => {
      if (!releasing) void ctx.shutdown.run('lost leadership').then(() => process.exit(1));
    },
  });
  ctx.shutdown.add('leader election', async () => {
    releasing = true;
    await stopLeading?.();
    await elector.stop();
  });
  elector.start();
}
