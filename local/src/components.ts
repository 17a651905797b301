/**
 * Kindling's components in the local environment: each runs as its own process against the management
 * cluster (the deployables as `kindling <command>`, plus the local providers), logging to
 * <state>/logs/<name>.log. A deployable is started only once its command exists in the CLI.
 * The deployables run as in production: with their own ServiceAccount's token and the RBAC of deploy/
 * (credentials.ts), electing a leader through their Lease. The local providers keep the admin credentials:
 * they stand for the infrastructure provider, not for Kindling.
 */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { COMMANDS } from '../../cli/src/commands.js';
import { ManagedProcess, type Cluster } from '../../test/bed/src/index.js';
import type { IgnitionFiles } from './environment.js';
import type { ExtensionFiles } from './extension.js';
import { componentKubeconfigs } from './credentials.js';

const KINDLING = fileURLToPath(new URL('../../../bin/kindling.js', import.meta.url));
const PROVIDERS = fileURLToPath(new URL('./providers/main.js', import.meta.url));

export interface RunningComponent {
  name: string;
  process: ManagedProcess;
}

export interface ComponentEnv {
  mgmt: Cluster;
  stateDir: string;
  ignition: IgnitionFiles;
  /** The NodePools' namespace: the only one whose token Secrets the ignition server serves. */
  namespace: string;
  /** host:port of the local registry: the only one releases may come from. */
  registry: string;
  /** Where the inplace-upgrader serves Cluster API's in-place hooks; absent: it does not serve them. */
  extension?: ExtensionFiles;
}

/** What a launch needs besides the environment: each component's kubeconfig (component name → path). */
type LaunchEnv = ComponentEnv & { kubeconfigs: Record<string, string> };

interface ComponentLaunch {
  name: string;
  /** Arguments after `node`: the script and what it runs. */
  argv: (env: LaunchEnv) => string[];
}

const kindling = (command: string, flags: (env: ComponentEnv) => string[]): ComponentLaunch => ({
  name: command,
  argv: (env) => [KINDLING, command, `--kubeconfig=${env.kubeconfigs[command] ?? ''}`, ...flags(env)],
});

const LAUNCHES: ComponentLaunch[] = [
  kindling('ignition-server', ({ ignition: i, namespace, registry }) => [
    `--namespaces=${namespace}`,
    `--allowed-registries=${registry}`,
    `--serving-address=127.0.0.1:${i.port}`,
    `--tls-cert-file=${i.certFile}`,
    `--tls-key-file=${i.keyFile}`,
    `--signing-key-file=${i.signingKeyFile}`,
    `--cache-dir=${i.cacheDir}`,
    // The local registry's certificate comes from the same CA as the ignition server's.
    `--registry-ca-file=${i.caFile}`,
  ]),
  kindling('nodepool-controller', ({ ignition: i }) => [`--ignition-endpoint=127.0.0.1:${i.port}`, `--ignition-ca-file=${i.caFile}`]),
  kindling('inplace-upgrader', ({ ignition: i, extension: e }) => [
    `--ignition-url=https://127.0.0.1:${i.port}`,
    `--ignition-ca-file=${i.caFile}`,
    '--agent-image=kindling:local',
    ...(e ? [`--extension-address=127.0.0.1:${e.port}`, `--extension-tls-cert-file=${e.certFile}`, `--extension-tls-key-file=${e.keyFile}`] : []),
  ]),
  kindling('drainer', () => []),
  { name: 'local-providers', argv: (env) => [PROVIDERS, `--kubeconfig=${env.mgmt.kubeconfigPath}`, `--state-dir=${env.stateDir}`] },
];

export async function startComponents(componentEnv: ComponentEnv): Promise<RunningComponent[]> {
  const env: LaunchEnv = { ...componentEnv, kubeconfigs: await componentKubeconfigs(componentEnv.mgmt, componentEnv.stateDir) };
  const logs = join(env.stateDir, 'logs');
  await mkdir(logs, { recursive: true });
  const available = new Set(COMMANDS.map((c) => c.name));
  return LAUNCHES.filter((l) => l.argv(env)[0] !== KINDLING || available.has(l.name)).map((l) => ({
    name: l.name,
    process: new ManagedProcess({ name: l.name, command: process.execPath, args: l.argv(env), logFile: join(logs, `${l.name}.log`) }),
  }));
}
