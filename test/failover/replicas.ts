/**
 * Two replicas of an elected component as real processes (`kindling <command>`) against a test-bed management
 * cluster, each under its own client certificate so the apiserver's audit log tells their requests apart, each
 * logging to its own file. The leader is read from the Lease (its holder identity ends with the process id);
 * it can be paused (SIGSTOP) right after one of its renewals, so nothing of it is in flight, and resumed.
 */
import { readFileSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import * as k8s from '#k8s';
import { loadCertificateAuthority } from '../bed/src/pki.js';
import { eventually, kubeconfigFor, ManagedProcess, type Cluster } from '../bed/src/index.js';

export const LEASE_NAMESPACE = 'kindling-system';
/** Short enough for a test, long enough for a loaded 2-core machine to renew in time. */
const LEADER_FLAGS = [
  '--leader-elect-lease-duration=12s',
  '--leader-elect-renew-deadline=8s',
  '--leader-elect-retry-period=1s',
];

export interface Replica {
  /** `drainer-a` */
  name: string;
  /** Its client certificate's user, as the audit log names it. */
  user: string;
  process: ManagedProcess;
}

/** What one replica's log says about its leadership (pino JSON lines; times in ms). */
export interface Leadership {
  startedAt?: number;
  /** When its renew deadline passed, as logged by the replica once it noticed (it may have been paused). */
  actingUntil?: number;
  /** When it logged that it stopped leading. */
  stoppedLoggedAt?: number;
  /** It exited on purpose, loudly (a fatal line). */
  crashed: boolean;
}

interface LogLine {
  time: string;
  level: number;
  msg: string;
  actingUntil?: string;
}

export class ElectedComponent {
  readonly replicas: Replica[];

  private constructor(
    readonly command: string,
    readonly lease: string,
    replicas: Replica[],
    readonly mgmt: Cluster,
  ) {
    this.replicas = replicas;
  }

  /** Starts replicas `a` and `b` of `kindling <command>`; `args` gives each replica's own flags. */
  static async start(opts: {
    mgmt: Cluster;
    dir: string;
    command: string;
    args: (replica: 'a' | 'b', kubeconfig: string) => string[];
  }): Promise<ElectedComponent> {
    const ca = await loadCertificateAuthority(opts.mgmt.ca);
    const replicas = await Promise.all(
      (['a', 'b'] as const).map(async (id) => {
        const user = `kindling-${opts.command}-${id}`;
        const cert = await ca.issue({ commonName: user, organizations: ['system:masters'], usage: 'client' });
        const kubeconfig = join(opts.dir, `${user}.kubeconfig`);
        await writeFile(kubeconfig, kubeconfigFor(user, opts.mgmt.server, opts.mgmt.ca.certPem, cert), { mode: 0o600 });
        const args = [
          ...opts.args(id, kubeconfig),
          `--leader-election-namespace=${LEASE_NAMESPACE}`,
          ...LEADER_FLAGS,
          '--log-level=info',
        ];
        const process_ = new ManagedProcess({
          name: `${opts.command}-${id}`,
          command: process.execPath,
          args,
          logFile: join(opts.dir, `${opts.command}-${id}.log`),
        });
        return { name: `${opts.command}-${id}`, user, process: process_ };
      }),
    );
    return new ElectedComponent(opts.command, `kindling-${opts.command}`, replicas, opts.mgmt);
  }

  async readLease(): Promise<k8s.V1Lease> {
    return this.mgmt.kubeConfig
      .makeApiClient(k8s.CoordinationV1Api)
      .readNamespacedLease({ name: this.lease, namespace: LEASE_NAMESPACE });
  }

  /** The replica holding the Lease now. */
  holderOf(lease: k8s.V1Lease): Replica | undefined {
    const holder = lease.spec?.holderIdentity ?? '';
    return this.replicas.find((r) => r.process.alive && holder.endsWith(`-${r.process.commandPid() ?? 'none'}`));
  }

  async waitForLeader(timeoutMs = 60_000): Promise<Replica> {
    return eventually(
      `a leader of ${this.command}`,
      async () => {
        const leader = this.holderOf(await this.readLease());
        return leader && this.leadership(leader).startedAt !== undefined ? leader : undefined;
      },
      timeoutMs,
      200,
    );
  }

  /** Waits for the leader's next renewal and pauses it at once (SIGSTOP): its next round is a retry period away. */
  async pauseLeaderAfterRenewal(): Promise<Replica> {
    const leader = await this.waitForLeader();
    // client-node hands MicroTime back as it came on the wire: compare the text.
    const renewTime = async (): Promise<string> => String((await this.readLease()).spec?.renewTime);
    const renewed = await renewTime();
    await eventually(`${leader.name} to renew`, async () => (await renewTime()) !== renewed, 10_000, 20);
    leader.process.signalCommand('SIGSTOP');
    return leader;
  }

  other(replica: Replica): Replica {
    const other = this.replicas.find((r) => r !== replica);
    if (!other) throw new Error('one replica only');
    return other;
  }

  leadership(replica: Replica): Leadership {
    let text: string;
    try {
      text = readFileSync(replica.process.logFile, 'utf8');
    } catch {
      return { crashed: false };
    }
    const lines = text
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as LogLine);
    const at = (msg: string): LogLine | undefined => lines.find((l) => l.msg === msg);
    const started = at('Started leading');
    const stopped = at('Stopped leading');
    return {
      startedAt: started && Date.parse(started.time),
      stoppedLoggedAt: stopped && Date.parse(stopped.time),
      actingUntil: stopped?.actingUntil === undefined ? undefined : Date.parse(stopped.actingUntil),
      crashed: lines.some((l) => l.level >= 60),
    };
  }

  async stop(): Promise<void> {
    for (const r of this.replicas) {
      if (r.process.alive) r.process.signalCommand('SIGCONT');
      await r.process.stop();
    }
  }
}

export interface AuditEvent {
  auditID: string;
  verb: string;
  stage: string;
  user: { username: string };
  requestURI: string;
  requestReceivedTimestamp: string;
  objectRef?: { resource?: string; name?: string; apiGroup?: string };
  responseStatus?: { code?: number };
}

/** The requests in the management cluster's audit log, one event each (a watch still open has no closing stage yet). */
export function auditedRequests(cluster: Cluster): AuditEvent[] {
  const byId = new Map<string, AuditEvent>();
  for (const line of readFileSync(cluster.auditLogPath ?? '', 'utf8').split('\n')) {
    if (!line) continue;
    const event = JSON.parse(line) as AuditEvent;
    byId.set(event.auditID, event);
  }
  return [...byId.values()];
}
