/**
 * `npm start`: the local embedded environment. A management cluster and a guest cluster from the test bed,
 * Kindling's and Cluster API's CRDs, and every Kindling component as its own process, each logging to a file
 * in the state folder. Starting again resumes the same clusters (etcd data and credentials are kept).
 * Ctrl-C or SIGTERM stops everything and leaves no process or port behind.
 */
import { mkdir, rm } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import * as k8s from '@kubernetes/client-node';
import { formatHelp, parseConfig, ConfigError } from '../../support/src/config.js';
import { startCluster, installKindlingCrds, installCapiCrds, testbedBinary, type Cluster } from '../../test/bed/src/index.js';
import { startComponents, type RunningComponent } from './components.js';

const FLAGS = {
  stateDir: { type: 'string', default: '.state/local', help: 'Folder holding the clusters, logs and host roots (kept between runs)' },
  fresh: { type: 'bool', default: false, help: 'Remove the state folder first and start from nothing' },
  namespace: { type: 'string', default: 'tenants', help: 'Management-cluster namespace of the guest Cluster and its NodePools' },
  exitAfterStart: { type: 'bool', default: false, help: 'Stop everything once it is up (for smoke tests and timing)' },
} as const;

const out = (line: string): void => void process.stdout.write(`${line}\n`);

async function step<T>(label: string, fn: () => Promise<T>): Promise<T> {
  const started = Date.now();
  process.stdout.write(`  ${label}… `);
  const result = await fn();
  out(`done (${((Date.now() - started) / 1000).toFixed(1)} s)`);
  return result;
}

async function ensureNamespace(cluster: Cluster, name: string): Promise<void> {
  const core = cluster.kubeConfig.makeApiClient(k8s.CoreV1Api);
  await core.createNamespace({ body: { metadata: { name } } }).catch((err: { code?: number }) => {
    if (err.code !== 409) throw err;
  });
}

interface Environment {
  mgmt: Cluster;
  guest: Cluster;
  components: RunningComponent[];
}

async function bringUp(stateDir: string, namespace: string): Promise<Environment> {
  const mgmt = await step('management cluster (etcd, kube-apiserver, kube-controller-manager)', () =>
    startCluster({ name: 'management', dir: join(stateDir, 'management') }),
  );
  const env: Environment = { mgmt, guest: undefined as unknown as Cluster, components: [] };
  try {
    await step('CRDs (Kindling, Cluster API v1.14.2)', async () => {
      await Promise.all([installKindlingCrds(mgmt), installCapiCrds(mgmt)]);
      await ensureNamespace(mgmt, namespace);
    });
    env.guest = await step('guest cluster "guest" (etcd, kube-apiserver, kube-controller-manager, KWOK)', () =>
      startCluster({ name: 'guest', dir: join(stateDir, 'guest'), kwok: true, management: { cluster: mgmt, namespace } }),
    );
    env.components = await step('Kindling components', () => startComponents({ mgmt, stateDir }));
    return env;
  } catch (err) {
    await tearDown(env);
    throw err;
  }
}

async function tearDown(env: Partial<Environment>): Promise<void> {
  for (const c of env.components ?? []) await c.process.stop();
  await env.guest?.stop();
  await env.mgmt?.stop();
}

function summary(env: Environment, stateDir: string, namespace: string): void {
  const kubectl = testbedBinary('kubectl');
  out('');
  out('Kindling is up.');
  out(`  management kubeconfig: ${env.mgmt.kubeconfigPath}`);
  out(`  guest kubeconfig:      ${env.guest.kubeconfigPath}`);
  out(`  state and logs:        ${stateDir}`);
  for (const c of env.components) out(`  ${c.name.padEnd(22)} log: ${c.process.logFile}`);
  out('');
  out('Try:');
  out(`  ${kubectl} --kubeconfig ${env.mgmt.kubeconfigPath} get nodepools -A`);
  out(`  ${kubectl} --kubeconfig ${env.mgmt.kubeconfigPath} -n ${namespace} get secret guest-kubeconfig`);
  out(`  ${kubectl} --kubeconfig ${env.guest.kubeconfigPath} get nodes`);
  out('');
  out('Ctrl-C stops everything.');
}

/** Resolves on the first of SIGINT/SIGTERM or the exit of a component (which is reported, not hidden). */
function untilStopped(env: Environment): Promise<string> {
  let stopping = false;
  return new Promise((resolveStop) => {
    const stop = (reason: string): void => {
      stopping = true;
      resolveStop(reason);
    };
    process.once('SIGINT', () => stop('SIGINT'));
    process.once('SIGTERM', () => stop('SIGTERM'));
    const all = [...env.components.map((c) => c.process), ...env.mgmt.processes, ...env.guest.processes];
    for (const p of all) {
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
  const stateDir = resolve(config.stateDir);
  if (config.fresh) await rm(stateDir, { recursive: true, force: true });
  await mkdir(stateDir, { recursive: true });
  const started = Date.now();
  out(`Starting Kindling's local environment in ${stateDir}`);
  const env = await bringUp(stateDir, config.namespace);
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
    process.stderr.write(`${err instanceof ConfigError ? err.message : err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(1);
  },
);
