/**
 * Kindling's components in the local environment: each runs as its own `kindling <command>` process against
 * the management cluster, logging to <state>/logs/<name>.log. A component is started only once its command
 * exists in the CLI, so the environment grows as the deployables land.
 */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { COMMANDS } from '../../cli/src/commands.js';
import { ManagedProcess, type Cluster } from '../../test/bed/src/index.js';

const KINDLING = fileURLToPath(new URL('../../../bin/kindling.js', import.meta.url));

export interface RunningComponent {
  name: string;
  process: ManagedProcess;
}

interface ComponentLaunch {
  command: string;
  args(env: { mgmt: Cluster; stateDir: string }): string[];
}

/** The long-running components and their local flags (single replica: no leader election). */
const LAUNCHES: ComponentLaunch[] = [];

export async function startComponents(env: { mgmt: Cluster; stateDir: string }): Promise<RunningComponent[]> {
  const logs = join(env.stateDir, 'logs');
  await mkdir(logs, { recursive: true });
  const available = new Set(COMMANDS.map((c) => c.name));
  return LAUNCHES.filter((l) => available.has(l.command)).map((l) => ({
    name: l.command,
    process: new ManagedProcess({
      name: l.command,
      command: process.execPath,
      args: [KINDLING, l.command, `--kubeconfig=${env.mgmt.kubeconfigPath}`, '--leader-elect=false', ...l.args(env)],
      logFile: join(logs, `${l.command}.log`),
    }),
  }));
}
