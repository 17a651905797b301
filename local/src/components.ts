/**
 * Kindling's components in the local environment: each runs as its own process against the management
 * cluster (the deployables as `kindling <command>`, plus the local providers), logging to
 * <state>/logs/<name>.log. A deployable is started only once its command exists in the CLI.
 * The deployables run as in production: with their own ServiceAccount's token and the RBAC of deploy/
 * (credentials.ts), electing a leader through their Lease. The local providers keep the admin credentials:
 * they stand for the infrastructure provider, not for Kindling.
 *
 * Each process is supervised as a Deployment's Pod would be (supervisor.ts): restarted with backoff when it
 * exits, the others untouched. The elected components can run several replicas (`<name>-<i>`, each its own log
 * and pid file), so failover can be tried by hand. <state>/run/<name>.pid holds the pid of each replica's
 * current process (the Lease's holderIdentity is `<hostname>-<pid>`), so the leader can be found and signalled.
 */
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { COMMANDS } from '../../cli/src/commands.js';
import { ManagedProcess, type Cluster } from '../../test/bed/src/index.js';
import { sleep } from '../../support/src/timers.js';
import { withJemalloc } from '../../support/src/malloc.js';
import { Supervisor, type BackoffPolicy, type Restart } from './supervisor.js';
import type { IgnitionFiles } from './environment.js';
import type { ExtensionFiles } from './extension.js';
import { componentKubeconfigs } from './credentials.js';

const KINDLING = fileURLToPath(new URL('../../../bin/kindling.js', import.meta.url));
const PROVIDERS = fileURLToPath(new URL('./providers/main.js', import.meta.url));

export interface RunningComponent {
  /** The command or program: `drainer`, `local-providers`. */
  component: string;
  /** `drainer`, or `drainer-1` when the environment runs several replicas of it. */
  name: string;
  replica: number;
  logFile: string;
  /** The pid of the replica's current process; absent while it is down. */
  pidFile: string;
  supervisor: Supervisor<ManagedProcess>;
}

export interface ComponentEnv {
  mgmt: Cluster;
  stateDir: string;
  ignition: IgnitionFiles;
  /** The NodePools' namespace: the only one every component serves (--namespaces). */
  namespace: string;
  /** host:port of the local registry: the only one releases may come from. */
  registry: string;
  /** Where the inplace-upgrader serves Cluster API's in-place hooks; absent: it does not serve them. */
  extension?: ExtensionFiles;
}

export interface Supervision {
  /** Processes of each elected component (default 1). */
  replicas?: number;
  policy?: BackoffPolicy;
  /** A process exited; it is started again after `restart.delayMs`. */
  onExit?: (restart: Restart) => void;
  /** A process started again after an exit (`restarts` ≥ 1), now running as `pid`. */
  onRestarted?: (name: string, pid: number | undefined, restarts: number) => void;
}

/** What a launch needs besides the environment: each component's kubeconfig (component name → path). */
type LaunchEnv = ComponentEnv & { kubeconfigs: Record<string, string> };

interface ComponentLaunch {
  name: string;
  /** Elects a leader through its Lease, so it may run several replicas. */
  elected: boolean;
  /** Arguments after `node`: the script and what it runs, for replica `replica`. */
  argv: (env: LaunchEnv, replica: number) => string[];
  /** Runs as the image runs it (the image's allocator); the local providers stand for the hosts, not for Kindling. */
  asImage: boolean;
}

const kindling = (command: string, flags: (env: ComponentEnv, replica: number) => string[]): ComponentLaunch => ({
  name: command,
  elected: true,
  asImage: true,
  // Every component serves the environment's tenant namespace only, as deploy/overlays/local grants it.
  argv: (env, replica) => [
    KINDLING,
    command,
    `--kubeconfig=${env.kubeconfigs[command] ?? ''}`,
    `--namespaces=${env.namespace}`,
    ...flags(env, replica),
  ],
});

/**
 * The pools and the upgrader reach the ignition server at replica 0's port. In a cluster that address is the
 * Service, which sends each connection to a ready replica. Replicas sharing one port (`reusePort`) would not
 * be that: the kernel keeps handing connections to a replica still listening while it drains, and a proxy
 * standing in for the Service would be a part production does not have. So while replica 0 is down (until its restart, about a second), hosts and the upgrader retry, as they
 * would against a Service with no ready endpoint; the other replicas serve on their own ports and can lead.
 */
const ignitionEndpoint = (i: IgnitionFiles): string => `127.0.0.1:${i.port}`;

const LAUNCHES: ComponentLaunch[] = [
  kindling('ignition-server', ({ ignition: i, registry }, replica) => [
    `--allowed-registries=${registry}`,
    `--serving-address=127.0.0.1:${i.replicas[replica]?.port ?? i.port}`,
    `--tls-cert-file=${i.certFile}`,
    `--tls-key-file=${i.keyFile}`,
    `--signing-key-file=${i.signingKeyFile}`,
    `--cache-dir=${i.replicas[replica]?.cacheDir ?? i.cacheDir}`,
    // The local registry's certificate comes from the same CA as the ignition server's.
    `--registry-ca-file=${i.caFile}`,
  ]),
  kindling('nodepool-controller', ({ ignition: i }) => [
    `--ignition-endpoint=${ignitionEndpoint(i)}`,
    `--ignition-ca-file=${i.caFile}`,
  ]),
  // The ExtensionConfig names one URL: the first replica serves the in-place hooks (its supervisor restarts it on the same port).
  kindling('inplace-upgrader', ({ ignition: i, extension: e }, replica) => [
    `--ignition-url=https://${ignitionEndpoint(i)}`,
    `--ignition-ca-file=${i.caFile}`,
    '--agent-image=kindling:local',
    ...(e && replica === 0
      ? [
          `--extension-address=127.0.0.1:${e.port}`,
          `--extension-tls-cert-file=${e.certFile}`,
          `--extension-tls-key-file=${e.keyFile}`,
        ]
      : []),
  ]),
  kindling('drainer', () => []),
  {
    name: 'local-providers',
    elected: false,
    asImage: false,
    argv: (env) => [PROVIDERS, `--kubeconfig=${env.mgmt.kubeconfigPath}`, `--state-dir=${env.stateDir}`],
  },
];

/** The pid of the guarded command once its guard has started it; undefined if it is gone first. */
async function commandPidOf(p: ManagedProcess, timeoutMs = 10_000): Promise<number | undefined> {
  const deadline = Date.now() + timeoutMs;
  while (p.alive && Date.now() < deadline) {
    try {
      const pid = p.commandPid();
      if (pid !== undefined) return pid;
    } catch {
      // The guard exited between the check and the read: the loop ends on `alive`.
    }
    await sleep(20);
  }
  return undefined;
}

function supervise(
  launch: ComponentLaunch,
  replica: number,
  env: LaunchEnv,
  opts: Supervision & { single: boolean },
): RunningComponent {
  const name = opts.single ? launch.name : `${launch.name}-${replica}`;
  const logFile = join(env.stateDir, 'logs', `${name}.log`);
  const pidFile = join(env.stateDir, 'run', `${name}.pid`);
  const supervisor: Supervisor<ManagedProcess> = new Supervisor({
    name,
    policy: opts.policy,
    spawn: () =>
      new ManagedProcess({
        name,
        command: process.execPath,
        args: launch.argv(env, replica),
        logFile,
        env: launch.asImage ? withJemalloc(process.env) : process.env,
      }),
    onStart: (proc, restarts) => {
      void commandPidOf(proc).then(async (pid) => {
        if (pid !== undefined && supervisor.current === proc) await writeFile(pidFile, `${pid}\n`);
        if (restarts > 0) opts.onRestarted?.(name, pid, restarts);
      });
    },
    onExit: (restart) => {
      void rm(pidFile, { force: true });
      opts.onExit?.(restart);
    },
  });
  return { component: launch.name, name, replica, logFile, pidFile, supervisor };
}

/** Starts every component under supervision: `replicas` processes of each elected one, one of the others. */
export async function startComponents(
  componentEnv: ComponentEnv,
  supervision: Supervision = {},
): Promise<RunningComponent[]> {
  const env: LaunchEnv = {
    ...componentEnv,
    kubeconfigs: await componentKubeconfigs(componentEnv.mgmt, componentEnv.stateDir),
  };
  await mkdir(join(env.stateDir, 'logs'), { recursive: true });
  // Pid files of an earlier run that did not stop cleanly (or ran other replicas) would name other processes.
  await rm(join(env.stateDir, 'run'), { recursive: true, force: true });
  await mkdir(join(env.stateDir, 'run'), { recursive: true });
  const replicas = supervision.replicas ?? 1;
  if (env.ignition.replicas.length < replicas)
    throw new Error(
      `the ignition files hold ${env.ignition.replicas.length} replica(s) of the ignition server, not ${replicas}`,
    );
  const available = new Set(COMMANDS.map((c) => c.name));
  const launches = LAUNCHES.filter((l) => l.argv(env, 0)[0] !== KINDLING || available.has(l.name));
  const running = launches.flatMap((l) => {
    const count = l.elected ? replicas : 1;
    return Array.from({ length: count }, (_, i) => supervise(l, i, env, { ...supervision, single: count === 1 }));
  });
  for (const c of running) c.supervisor.start();
  return running;
}

/** Stops every component (no restart follows) and removes their pid files. */
export async function stopComponents(components: RunningComponent[]): Promise<void> {
  await Promise.all(
    components.map(async (c) => {
      await c.supervisor.stop();
      await rm(c.pidFile, { force: true });
    }),
  );
}
