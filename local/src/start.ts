/**
 * `npm start`: the local embedded environment. A management cluster and a guest cluster from the test bed,
 * Kindling's and Cluster API's CRDs, and every Kindling component as its own process, each logging to a file
 * in the state folder. Starting again resumes the same clusters (etcd data and credentials are kept).
 * Kindling's components are supervised: one that exits (a crash, a kill, a replica that lost its Lease) is
 * restarted with backoff and the rest keep running; `--replicas 2` runs two of each elected component. The
 * clusters, Cluster API and the registry are the environment's ground: if one of them exits, everything stops.
 * Ctrl-C or SIGTERM stops everything and leaves no process or port behind.
 */
import { mkdir, rm } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { runtimeWarning } from '../../support/src/runtime.js';
import { formatHelp, parseConfig, ConfigError } from '../../support/src/config.js';
import {
  startCluster,
  installKindlingCrds,
  installCapiCrds,
  installCrds,
  startCapiManager,
  reserveKept,
  testbedBinary,
  type Cluster,
  type CapiManager,
  type ManagedProcess,
} from '../../test/bed/src/index.js';
import { startComponents, stopComponents, type RunningComponent } from './components.js';
import type { Restart } from './supervisor.js';
import {
  applySamples,
  fixedPortFiles,
  ignitionFiles,
  sampleReleases,
  startRegistry,
  SAMPLE_RELEASES,
  type LocalRegistry,
} from './environment.js';
import { LOCAL_CRD_DIR } from './crds.js';
import { applyWorkload } from './workload.js';
import { waitForPools } from './pools.js';
import { extensionFiles, registerExtension } from './extension.js';
import { ensureTenantNamespace } from './credentials.js';

const FLAGS = {
  stateDir: {
    type: 'string',
    default: '.state/local',
    help: 'Folder holding the clusters, logs and host roots (kept between runs)',
  },
  fresh: { type: 'bool', default: false, help: 'Remove the state folder first and start from nothing' },
  namespace: {
    type: 'string',
    default: 'tenants',
    help: 'Management-cluster namespace of the guest Cluster and its NodePools',
  },
  exitAfterStart: { type: 'bool', default: false, help: 'Stop everything once it is up (for smoke tests and timing)' },
  samples: {
    type: 'bool',
    default: true,
    help: 'Create the sample tenant (Cluster, LocalControlPlane, two NodePools) and wait for its pools to be Ready',
  },
  readyTimeout: { type: 'duration', default: 300_000, help: 'How long to wait for the sample pools to be Ready' },
  replicas: {
    type: 'int',
    default: 1,
    help: 'Processes of each elected component (ignition-server, nodepool-controller, inplace-upgrader, drainer): 2 to try failover by hand; the pools reach the ignition server at replica 0',
  },
} as const;

const out = (line: string): void => void process.stdout.write(`${line}\n`);
const warn = (line: string): void => void process.stderr.write(`${line}\n`);
const seconds = (ms: number): string => `${(ms / 1000).toFixed(1)} s`;
const indent = (text: string): string =>
  text
    .split('\n')
    .map((l) => `    ${l}`)
    .join('\n');

/** A component's exit, on the environment's output: which, how, what comes next, and why (its last lines). */
function reportExit(r: Restart): void {
  warn(
    `\n${r.name} exited, ${r.exit}, after ${seconds(r.ranForMs)}; restart ${r.attempt} in ${seconds(r.delayMs)}. Last log lines:\n${indent(r.lastLines)}`,
  );
}

const reportRestarted = (name: string, pid: number | undefined, restarts: number): void =>
  warn(`${name} running again (pid ${pid ?? 'gone already'}; ${restarts} restart(s) so far)`);

async function step<T>(label: string, fn: () => Promise<T>): Promise<T> {
  const started = Date.now();
  process.stdout.write(`  ${label}… `);
  const result = await fn();
  out(`done (${((Date.now() - started) / 1000).toFixed(1)} s)`);
  return result;
}

/** Pools not Ready in time are reported, and the environment stays up: it is where a person sees why. */
function reportNotReady(report: readonly string[], timeoutMs: number): void {
  if (report.length === 0) return;
  out(`  NodePools not Ready after ${timeoutMs / 1000} s (Kindling stays up; \`kindling status\` follows them):`);
  for (const line of report) out(`    ${line}`);
}

interface Environment {
  mgmt: Cluster;
  guest: Cluster;
  capi?: CapiManager;
  registry?: LocalRegistry;
  releases?: Record<string, string>;
  components: RunningComponent[];
  ignitionPort?: number;
  /** Each ignition-server replica's port; replica 0's is the endpoint. */
  ignitionPorts?: number[];
  /** The CA of the registry's certificate (the management cluster's, as the ignition server's). */
  registryCaFile?: string;
}

type Config = { stateDir: string; namespace: string; samples: boolean; readyTimeout: number; replicas: number };

async function bringUp(cfg: Config): Promise<Environment> {
  const { stateDir, namespace } = cfg;
  await reserveKept(await fixedPortFiles(stateDir));
  const mgmt = await step('management cluster (etcd, kube-apiserver, kube-controller-manager)', () =>
    startCluster({ name: 'management', dir: join(stateDir, 'management') }),
  );
  const env: Environment = { mgmt, guest: undefined as unknown as Cluster, components: [] };
  try {
    await step('CRDs (Kindling, Cluster API v1.14.2, local providers)', async () => {
      await Promise.all([installKindlingCrds(mgmt), installCapiCrds(mgmt), installCrds(mgmt, LOCAL_CRD_DIR)]);
      await ensureTenantNamespace(mgmt, namespace);
    });
    env.guest = await step(
      'guest cluster "guest" (etcd, kube-apiserver with node authentication, kube-controller-manager signing CSRs, kube-scheduler, KWOK)',
      () => startCluster({ name: 'guest', dir: join(stateDir, 'guest'), kwok: true, nodeAuth: true, scheduler: true }),
    );
    env.capi = await step('Cluster API core manager v1.14.2 (webhooks registered)', () => startCapiManager(mgmt));
    const ignition = await step('ignition serving certificate, signing key', () =>
      ignitionFiles(stateDir, mgmt, cfg.replicas),
    );
    env.ignitionPort = ignition.port;
    env.ignitionPorts = ignition.replicas.map((r) => r.port);
    env.registryCaFile = ignition.caFile;
    env.registry = await step('OCI registry (docker-registry, TLS)', () => startRegistry(stateDir, mgmt));
    const registry = env.registry;
    const releases = await step(`release images ${SAMPLE_RELEASES.join(', ')} (kindling release build, pushed)`, () =>
      sampleReleases(registry, mgmt.ca.certPem),
    );
    env.releases = releases;
    const extension = await extensionFiles(stateDir, mgmt);
    const supervision = { replicas: cfg.replicas, onExit: reportExit, onRestarted: reportRestarted };
    env.components = await step(
      `Kindling components (${cfg.replicas} of each elected one) and local providers, supervised`,
      () => startComponents({ mgmt, stateDir, ignition, namespace, registry: registry.host, extension }, supervision),
    );
    await step('Kindling registered as Cluster API in-place update extension (ExtensionConfig)', () =>
      registerExtension(mgmt, extension),
    );
    if (cfg.samples) {
      await step('sample tenant (Cluster, LocalControlPlane, NodePools inplace ×3, replace ×2, capi ×2)', () =>
        applySamples(mgmt, env.guest, { namespace, release: releases[SAMPLE_RELEASES[0]] ?? '' }),
      );
      const notReady = await step('sample pools Ready (hosts booted through Ignition)', () =>
        waitForPools(mgmt, namespace, cfg.readyTimeout, out),
      );
      reportNotReady(notReady, cfg.readyTimeout);
      await step('sample workload in the guest (shop/web ×4 on the inplace nodes, behind a PodDisruptionBudget)', () =>
        applyWorkload(env.guest, out),
      );
    }
    return env;
  } catch (err) {
    await tearDown(env);
    throw err;
  }
}

async function tearDown(env: Partial<Environment>): Promise<void> {
  await stopComponents(env.components ?? []);
  await env.capi?.stop();
  await env.registry?.process.stop();
  await env.guest?.stop();
  await env.mgmt?.stop();
}

function summary(env: Environment, stateDir: string, namespace: string): void {
  const kubectl = testbedBinary('kubectl');
  out('');
  out('Kindling is up.');
  out(`  management kubeconfig: ${env.mgmt.kubeconfigPath}`);
  out(`  guest kubeconfig:      ${env.guest.kubeconfigPath}`);
  out(`  ignition endpoint:     https://127.0.0.1:${env.ignitionPort ?? '?'}/ignition`);
  out(
    `  release registry:      https://${env.registry?.host ?? '?'} (${Object.values(env.releases ?? {}).join(', ')})`,
  );
  out(`  host roots:            ${join(stateDir, 'hosts')}`);
  out(`  state and logs:        ${stateDir}`);
  out(`  components (restarted with backoff when they exit; pid files in ${join(stateDir, 'run')}):`);
  for (const c of env.components)
    out(
      `    ${c.name.padEnd(22)} log: ${c.logFile}${c.component === 'ignition-server' ? servingNote(env, c.replica) : ''}`,
    );
  out('');
  const kindling = `KUBECONFIG=${env.mgmt.kubeconfigPath} ${fileURLToPath(new URL('../../../bin/kindling.js', import.meta.url))}`;
  const next = env.releases?.[SAMPLE_RELEASES[1]] ?? '<release image>';
  out('Try:');
  out(`  ${kubectl} --kubeconfig ${env.mgmt.kubeconfigPath} get nodepools -A`);
  out(`  ${kindling} status --watch`);
  out(`  ${kindling} plan ${namespace}/inplace --release ${next}`);
  // The registry's certificate is issued by the management cluster's CA: plan trusts it to list upgrade targets.
  out(`  ${kindling} plan ${namespace}/inplace --registry-ca-file ${env.registryCaFile ?? '<CA file>'}`);
  out(
    `  ${kubectl} --kubeconfig ${env.mgmt.kubeconfigPath} -n ${namespace} patch np inplace --type merge -p '{"spec":{"release":{"image":"${next}"}}}'`,
  );
  out('');
  out('Ctrl-C stops everything.');
}

function servingNote(env: Environment, replica: number): string {
  const port = env.ignitionPorts?.[replica];
  return replica === 0 ? ` (serving :${port ?? '?'}, the pools' endpoint)` : ` (serving :${port ?? '?'})`;
}

/** The processes the environment stands on: when one exits, the environment cannot go on. */
function groundOf(env: Environment): ManagedProcess[] {
  return [
    ...env.mgmt.processes,
    ...env.guest.processes,
    ...(env.capi ? [env.capi.process] : []),
    ...(env.registry ? [env.registry.process] : []),
  ];
}

/**
 * Resolves on the first of SIGINT/SIGTERM or the exit of a cluster process, Cluster API or the registry (which
 * is reported, not hidden). Kindling's components are not watched here: their supervisors restart them.
 */
function untilStopped(env: Environment): Promise<string> {
  let stopping = false;
  return new Promise((resolveStop) => {
    const stop = (reason: string): void => {
      stopping = true;
      resolveStop(reason);
    };
    process.once('SIGINT', () => stop('SIGINT'));
    process.once('SIGTERM', () => stop('SIGTERM'));
    for (const p of groundOf(env)) {
      void p.exited.then((code) => {
        if (stopping) return;
        process.stderr.write(`\n${p.name} exited unexpectedly (code ${code}); last log lines:\n${p.tail()}\n`);
        stop(`${p.name} exited`);
      });
    }
  });
}

export async function start(argv: string[]): Promise<number> {
  if (argv.includes('--help')) {
    out(formatHelp('npm start -- [flags]', 'Run Kindling on a local embedded environment.', FLAGS));
    return 0;
  }
  const config = parseConfig(FLAGS, argv, process.env);
  if (config.replicas < 1) throw new ConfigError(`--replicas must be at least 1, not ${config.replicas}`);
  const stateDir = resolve(config.stateDir);
  if (config.fresh) await rm(stateDir, { recursive: true, force: true });
  await mkdir(stateDir, { recursive: true });
  const started = Date.now();
  out(`Starting Kindling's local environment on Node.js ${process.version} in ${stateDir}`);
  const runtime = runtimeWarning(process.version, new Date());
  if (runtime !== undefined) warn(runtime);
  const env = await bringUp({ ...config, stateDir });
  out(`  everything up in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  summary(env, stateDir, config.namespace);
  const reason = config.exitAfterStart ? 'exit-after-start' : await untilStopped(env);
  out(`\nStopping (${reason})…`);
  await tearDown(env);
  out('Stopped; nothing left running.');
  return reason.endsWith('exited') ? 1 : 0;
}

start(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(
      `${err instanceof ConfigError ? err.message : err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
    );
    process.exit(1);
  },
);
