/**
 * Benchmark of the ignition server, side by side in one run on this machine, against references
 * given the same TLS certificate, the same bytes and the same bearer + NodePool check (references.ts): a Go
 * `net/http` server (test/bench/goref, standard library only), nginx (Debian nginx-light), and plain
 * `node:https`, one process per core (node-reference.ts): what this runtime does with the same lookup and nothing more.
 *  1. serving: warm `/ignition` with wrk (-t2 -c64) at ~1.4 KB, ~300 KB and ~900 KB: requests/s, p50, p99 and CPU time
 *     per request of each (the CPU time per request holds still when other work shares the cores; req/s
 *     does not);
 *  2. boot storm: N (2,000) token Secrets, each of its own pool, over 10 configs (10 payloads of ~300 KB),
 *     minted and generated; every server first gets the same warm-up (20 other hosts fetching 5 times each,
 *     a new connection per fetch, within 1 s, then 15 s idle: see warmUp); then the hosts arrive evenly over
 *     10 s, each a Go client opening a new TLS connection as Ignition does (gostorm): every host must end with 200; time from each host's arrival to the last byte of
 *     its 200, p50/p99, against the Go reference and plain node:https on the same storm; every host's first
 *     fetch recorded on its Secret (the server writes them after the burst: when, and at what CPU cost); with
 *     --rounds, round after round (a storm's tail moves from run to run, the references' too), medians; then
 *     each server's CPU time per TLS handshake alone (the certificate is ECDSA P-256, as the test bed issues it);
 *  3. memory: RSS of the server with 1,000 live tokens over 100 distinct ~1 MB payloads (each fetched once),
 *     once it is idle again (its memory saver back on), against 1.2 × the payload bytes it holds in memory
 *     + 100 MiB;
 *  4. restart: the server restarted on its cache directory with those 1,000 token Secrets (100 KiB of config
 *     each): time from spawn to the first 200 of a token.
 * Everything runs on loopback: a real test-bed apiserver, real `kindling ignition-server` processes (one per
 * phase, each watching its own namespace), the references, wrk. The server acts only on a token Secret its
 * NodePool owns, and mints a bootstrap token in the pool's guest cluster with each token: every Secret here
 * is owned by a NodePool of one guest (a second test-bed apiserver), and each payload carries its host's
 * join files. It ends with one table: figure, reference,
 * ratio, target, pass/fail.
 *
 * A payload is the release's fragments merged with the pool's config. The ~1 MB of each payload of phase 3 is
 * split between the release (shared, --release-kib) and a MachineConfig file distinct per config
 * (--config-kib), because every token Secret carries its config: 1,000 Secrets with 1 MB configs are 1 GB in
 * etcd, beyond the test bed's 1 GiB etcd quota.
 *
 *   npm run bench:ignition -- [--duration 10] [--rounds 1] [--storm 2000] [--storm-configs 10]
 *     [--storm-spread 10] [--handshakes 2000] [--mid-kib 300] [--configs 100]
 *     [--secrets-per-config 10] [--config-kib 100] [--release-kib 900] [--cpu-prof <dir>] [--perf <dir>]
 *     [--only serving,storm,memory] [--payloads small,mid,bulk] [--server-node-flags '<flags>'] [--node-threads]
 *
 * With --node-threads, serving and storm also measure plain node:https run as Kindling's serving threads run, a
 * worker thread per core in one process (node-reference.ts), beside its process per core: what threads cost.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync, readdirSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { request } from 'node:https';
import { availableParallelism, cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import * as k8s from '#k8s';
import {
  startCluster,
  freePort,
  installKindlingCrds,
  ManagedProcess,
  eventually,
  writeKubeconfigSecret,
  type Cluster,
} from '../bed/src/index.js';
import { createCertificateAuthority } from '../bed/src/pki.js';
import { ANNOTATIONS, IGNITION_HEADERS, LABELS, SECRET_KEYS } from '../../api/src/keys.js';
import type { NodePool } from '../../api/src/nodepool.js';
import { BASE_FRAGMENTS, ecKeyPem, opsMetrics, writeReleaseFolder } from '../../ignition-server/testing/index.js';
import { ensureNodePool, ownedTokenSecret } from '../../ignition-server/testing/pools.js';
import { loadAverage, reportRows, type Row } from './table.js';
import { buildGo, childPid, startGo, startNginx, startNode, type Reference, type Site } from './references.js';
import { withJemalloc } from '../../support/src/malloc.js';
import { bySecond, slowest, tracePauses, type HostTimes, type PauseSample } from './storm-trace.js';
import { metric, saverSwitches } from './metric-text.js';

const KINDLING = fileURLToPath(new URL('../../../bin/kindling.js', import.meta.url));
const WRK = '/usr/bin/wrk';
const ACCEPT = 'application/vnd.coreos.ignition+json;version=3.3.0';
const KiB = 1024;
const MiB = 1024 * 1024;
const CLK_TCK = 100;
/** The Cluster API cluster of every pool: where each mint puts a bootstrap token. */
const GUEST = 'guest';
const NAMESPACES = ['serve', 'storm', 'memory'];
const run = promisify(execFile);
const out = (line: string): void => void process.stdout.write(`${line}\n`);

function flag(name: string, fallback: number): number {
  const i = process.argv.indexOf(`--${name}`);
  const v = i > 0 ? Number(process.argv[i + 1]) : fallback;
  if (!Number.isFinite(v) || v < 0) throw new Error(`--${name} must be a non-negative number`);
  return v;
}

function textFlag(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : undefined;
}

const OPTS = {
  cpuProfDir: textFlag('cpu-prof'),
  /** After the memory phase's sample, a heap snapshot of the server's main thread is written here. */
  heapSnapshotDir: textFlag('heap-snapshot'),
  phases: new Set((textFlag('only') ?? 'serving,storm,memory').split(',')),
  /** The serving phase's payloads: small (~1.4 KB), mid (~300 KB), bulk (~900 KB). */
  payloads: new Set((textFlag('payloads') ?? 'small,mid,bulk').split(',')),
  /** During each wrk run against the server, `perf record -g` of its process is written here. */
  perfDir: textFlag('perf'),
  /** Node or V8 flags for the server's process only (space-separated), e.g. to try a GC setting against the references. */
  serverNodeFlags: (textFlag('server-node-flags') ?? '').split(' ').filter((f) => f !== ''),
  /** Plain node:https also in worker threads (one process), beside its processes. */
  nodeThreads: process.argv.includes('--node-threads'),
  durationS: flag('duration', 10),
  rounds: Math.max(1, flag('rounds', 1)),
  connections: flag('connections', 64),
  storm: flag('storm', 2000),
  /** The storm's hosts arrive evenly over this many seconds. */
  stormSpreadS: flag('storm-spread', 10),
  /** Connections of the handshake-only run against each server. */
  handshakes: flag('handshakes', 2000),
  /** The ~300 KiB payload (serving and storm): the size of its release's bulk file. */
  midKib: flag('mid-kib', 300),
  stormConfigs: Math.max(1, flag('storm-configs', 10)),
  configs: Math.min(flag('configs', 100), 500),
  secretsPerConfig: Math.min(flag('secrets-per-config', 10), 20),
  configKib: flag('config-kib', 100),
  releaseKib: flag('release-kib', 900),
};

interface Reply {
  status: number;
  bytes: number;
  body?: Buffer;
  /** From the request's start to its response headers. */
  ttfbMs: number;
  /** performance.now() when the response headers (its first bytes) arrived. */
  firstByteAt: number;
}

interface GetOptions {
  port: number;
  ca: string;
  headers: Record<string, string>;
  keepBody?: boolean;
}

/** One GET /ignition on a fresh connection; the body is counted, and kept only when asked. */
function get(opts: GetOptions): Promise<Reply> {
  const started = performance.now();
  return new Promise((resolve, reject) => {
    const r = request(
      {
        host: '127.0.0.1',
        port: opts.port,
        path: '/ignition',
        ca: opts.ca,
        headers: opts.headers,
        servername: 'localhost',
        agent: false,
        timeout: 60_000,
      },
      (res) => {
        const firstByteAt = performance.now();
        const chunks: Buffer[] = [];
        let bytes = 0;
        res.on('data', (c: Buffer) => {
          bytes += c.length;
          if (opts.keepBody === true) chunks.push(c);
        });
        res.on('end', () =>
          resolve({
            status: res.statusCode ?? 0,
            bytes,
            ttfbMs: firstByteAt - started,
            firstByteAt,
            ...(opts.keepBody === true ? { body: Buffer.concat(chunks) } : {}),
          }),
        );
        res.on('error', reject);
      },
    );
    r.on('timeout', () => r.destroy(new Error('request timed out')));
    r.on('error', reject);
    r.end();
  });
}

async function inBatches<T>(items: T[], size: number, fn: (t: T) => Promise<unknown>): Promise<void> {
  for (let i = 0; i < items.length; i += size) await Promise.all(items.slice(i, i + size).map(fn));
}

/** `data:` URL of n random bytes' worth of base64 text, so the file is n characters and incompressible. */
function bulkSource(chars: number): string {
  return `data:;base64,${randomBytes(Math.ceil((chars * 3) / 4))
    .toString('base64')
    .slice(0, chars - (chars % 4))}`;
}

function machineConfig(name: string, path: string, kib: number): Record<string, unknown> {
  return {
    apiVersion: 'machineconfiguration.openshift.io/v1',
    kind: 'MachineConfig',
    metadata: { name },
    spec: {
      config: {
        ignition: { version: '3.2.0' },
        storage: {
          files: [{ path, mode: 420, contents: { source: kib > 0 ? bulkSource(kib * KiB) : 'data:,bench%0A' } }],
        },
      },
    },
  };
}

function vmRssBytes(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (!m) throw new Error(`no VmRSS for ${pid}`);
  return Number(m[1]) * 1024;
}

/** User + system CPU seconds of the processes (all their threads). */
function cpuSeconds(pids: number[]): number {
  return pids.reduce((sum, pid) => {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? [];
    return sum + (Number(fields[11]) + Number(fields[12])) / CLK_TCK;
  }, 0);
}

interface WrkResult {
  requestsPerS: number;
  p50Ms: number;
  p99Ms: number;
  requests: number;
  non2xx: number;
  errors: string;
  /** CPU time of the server per request, in microseconds. */
  cpuUsPerRequest: number;
}

const UNIT_MS: Record<string, number> = { us: 0.001, ms: 1, s: 1000, m: 60_000 };

function latencyMs(text: string, pct: string): number {
  const m = new RegExp(`^\\s*${pct}%\\s+([\\d.]+)(us|ms|s|m)\\s*$`, 'm').exec(text);
  if (!m) throw new Error(`wrk printed no ${pct}% latency:\n${text}`);
  return Number(m[1]) * (UNIT_MS[m[2] as string] ?? Number.NaN);
}

export function parseWrk(text: string): Omit<WrkResult, 'cpuUsPerRequest'> {
  const rps = /^Requests\/sec:\s+([\d.]+)/m.exec(text);
  const total = /^\s*(\d+) requests in /m.exec(text);
  if (!rps || !total) throw new Error(`unexpected wrk output:\n${text}`);
  return {
    requestsPerS: Number(rps[1]),
    p50Ms: latencyMs(text, '50'),
    p99Ms: latencyMs(text, '99'),
    requests: Number(total[1]),
    non2xx: Number(/Non-2xx or 3xx responses:\s+(\d+)/.exec(text)?.[1] ?? 0),
    errors: /Socket errors:.*$/m.exec(text)?.[0] ?? 'none',
  };
}

async function wrk(
  port: number,
  headers: Record<string, string>,
  pids: () => number[],
  perfFile?: string,
): Promise<WrkResult> {
  const args = [
    '-t2',
    `-c${OPTS.connections}`,
    `-d${OPTS.durationS}s`,
    '--latency',
    ...Object.entries(headers).flatMap(([k, v]) => ['-H', `${k}: ${v}`]),
    `https://127.0.0.1:${port}/ignition`,
  ];
  const before = cpuSeconds(pids());
  // Recorded over most of the run (all its threads, kernel included); a profiled run's figures carry perf's cost.
  const perf =
    perfFile === undefined
      ? undefined
      : run(
          'perf',
          [
            'record',
            '-g',
            '-o',
            perfFile,
            '-p',
            pids().join(','),
            '--',
            'sleep',
            String(Math.max(1, OPTS.durationS - 2)),
          ],
          { timeout: (OPTS.durationS + 60) * 1000 },
        );
  const { stdout } = await run(WRK, args, { timeout: (OPTS.durationS + 60) * 1000, maxBuffer: 4 * MiB });
  await perf;
  const cpu = cpuSeconds(pids()) - before;
  const parsed = parseWrk(stdout);
  return { ...parsed, cpuUsPerRequest: (cpu * 1e6) / Math.max(1, parsed.requests) };
}

interface Bench {
  dir: string;
  cluster: Cluster;
  guest: Cluster;
  /** The NodePools created so far, by namespace/name. */
  pools: Map<string, Promise<NodePool>>;
  core: k8s.CoreV1Api;
  ca: string;
  releases: Record<PayloadSize, string>;
  goBin: string;
  /** The storm client (test/bench/gostorm). */
  stormBin: string;
  processes: ManagedProcess[];
}

interface Server {
  name: string;
  proc: ManagedProcess;
  port: number;
  opsPort: number;
  pid: number;
  spawnedAt: number;
  /** Date.now() at the spawn, to place the server's own log lines after it. */
  spawnedWallMs: number;
  cacheDir: string;
  namespace: string;
}

async function startServer(
  b: Bench,
  name: string,
  namespace: string,
  cacheDir = join(b.dir, `cache-${namespace}`),
): Promise<Server> {
  const port = await freePort();
  const opsPort = await freePort();
  const spawnedAt = performance.now();
  const spawnedWallMs = Date.now();
  const proc = new ManagedProcess({
    name,
    command: process.execPath,
    logFile: join(b.dir, `${name}.log`),
    // As the image runs it.
    env: withJemalloc(process.env),
    args: [
      ...OPTS.serverNodeFlags,
      ...(OPTS.cpuProfDir === undefined ? [] : ['--cpu-prof', '--cpu-prof-dir', OPTS.cpuProfDir]),
      ...(OPTS.heapSnapshotDir === undefined
        ? []
        : ['--heapsnapshot-signal=SIGUSR2', '--diagnostic-dir', OPTS.heapSnapshotDir]),
      KINDLING,
      'ignition-server',
      '--kubeconfig',
      b.cluster.kubeconfigPath,
      '--serving-address',
      `127.0.0.1:${port}`,
      '--ops-address',
      `127.0.0.1:${opsPort}`,
      '--tls-cert-file',
      join(b.dir, 'tls.crt'),
      '--tls-key-file',
      join(b.dir, 'tls.key'),
      '--signing-key-file',
      join(b.dir, 'signing.pem'),
      '--namespaces',
      namespace,
      // The releases are OCI layouts in the bench's folder.
      '--allow-local-releases',
      '--cache-dir',
      cacheDir,
      '--leader-election-namespace',
      'kindling-system',
    ],
  });
  b.processes.push(proc);
  await eventually(
    `${name} to start`,
    () => Promise.resolve(proc.guardPid !== undefined && !Number.isNaN(childPid(proc.guardPid)) ? true : undefined),
    10_000,
    20,
  );
  return {
    name,
    proc,
    port,
    opsPort,
    pid: childPid(proc.guardPid as number),
    spawnedAt,
    spawnedWallMs,
    cacheDir,
    namespace,
  };
}

interface TokenSecretSpec {
  namespace: string;
  pool: string;
  config: unknown[];
  release: string;
}

/** A token Secret as the nodepool-controller writes it for the pool (created on first use): its name and hash. */
async function createTokenSecret(
  b: Bench,
  { namespace, pool, config, release }: TokenSecretSpec,
): Promise<{ name: string; hash: string }> {
  const key = `${namespace}/${pool}`;
  let owner = b.pools.get(key);
  if (!owner) {
    owner = ensureNodePool(b.cluster.kubeConfig, { namespace, name: pool, release, clusterName: GUEST });
    b.pools.set(key, owner);
  }
  const { hash, secret } = ownedTokenSecret(await owner, release, config);
  await b.core.createNamespacedSecret({ namespace, body: secret });
  return { name: secret.metadata?.name ?? '', hash };
}

async function mintedToken(b: Bench, namespace: string, name: string): Promise<string> {
  return eventually(
    `a token in ${name}`,
    async () => {
      const data = (await b.core.readNamespacedSecret({ name, namespace })).data?.[SECRET_KEYS.token];
      return data === undefined ? undefined : Buffer.from(data, 'base64').toString();
    },
    300_000,
    200,
  );
}

function ignitionHeaders(token: string, pool: string, hash: string): Record<string, string> {
  return {
    Authorization: `Bearer ${token}`,
    [IGNITION_HEADERS.nodePool]: pool,
    [IGNITION_HEADERS.targetConfigVersionHash]: hash,
    Accept: ACCEPT,
  };
}

type PayloadSize = 'small' | 'mid' | 'bulk';

/** A release fragment of one file of `kib` KiB of incompressible bytes (none for 0): the payload's shared bulk. */
function bulkFragment(kib: number): Record<string, Record<string, unknown>> {
  if (kib <= 0) return {};
  return {
    '20-bulk.json': {
      ignition: { version: '3.2.0' },
      storage: {
        files: [{ path: '/opt/kindling/base.bin', mode: 420, contents: { source: bulkSource(kib * KiB) } }],
      },
    },
  };
}

async function setUp(): Promise<Bench> {
  const dir = await mkdtemp(join(tmpdir(), 'bench-ignition-'));
  const [goBin, stormBin] = [await buildGo(dir, 'goref'), await buildGo(dir, 'gostorm')];
  const cluster = await startCluster({ name: 'mgmt', controllerManager: false });
  const core = cluster.kubeConfig.makeApiClient(k8s.CoreV1Api);
  for (const name of [...NAMESPACES, 'kindling-system']) await core.createNamespace({ body: { metadata: { name } } });
  await installKindlingCrds(cluster);
  const guest = await startCluster({ name: GUEST, controllerManager: false });
  for (const ns of NAMESPACES) await writeKubeconfigSecret(cluster, ns, GUEST, guest.kubeconfigYaml);
  const ca = await createCertificateAuthority('ignition serving CA');
  const serving = await ca.issue({
    commonName: 'ignition',
    dnsNames: ['localhost'],
    ipAddresses: ['127.0.0.1'],
    usage: 'server',
  });
  await writeFile(join(dir, 'tls.crt'), serving.certPem);
  await writeFile(join(dir, 'tls.key'), serving.keyPem);
  await writeFile(join(dir, 'signing.pem'), ecKeyPem());
  await writeFile(join(dir, 'ca.crt'), ca.certPem);
  // The shared part of every payload lives in the release, built with the release tool as an operator would.
  const releases: Record<PayloadSize, string> = { small: '', mid: '', bulk: '' };
  for (const [name, kib] of [
    ['small', 0],
    ['mid', OPTS.midKib],
    ['bulk', OPTS.releaseKib],
  ] as const) {
    const folder = await writeReleaseFolder(join(dir, `release-src-${name}`), undefined, {
      ...BASE_FRAGMENTS,
      ...bulkFragment(kib),
    });
    await run(
      process.execPath,
      [KINDLING, 'release', 'build', folder, '--output', join(dir, `release-${name}`), '--tag', 'v1'],
      { timeout: 60_000 },
    );
    releases[name] = `oci:${join(dir, `release-${name}`)}:v1`;
  }
  return { dir, cluster, guest, pools: new Map(), core, ca: ca.certPem, releases, goBin, stormBin, processes: [] };
}

/** A 200 from the server for these headers (a payload may still be generating: 511 until it is). */
async function fetched(b: Bench, port: number, headers: Record<string, string>): Promise<Reply> {
  return eventually(
    'a 200 from the ignition server',
    async () => {
      const r = await get({ port, ca: b.ca, headers, keepBody: true });
      return r.status === 200 ? r : undefined;
    },
    300_000,
    100,
  );
}

interface Case {
  name: string;
  pool: string;
  headers: Record<string, string>;
  token: string;
  payload: Buffer;
  file: string;
}

/** A token Secret for the case, and the payload bytes the server answers once it is warm. */
async function warmCase(b: Bench, server: Server, name: PayloadSize): Promise<Case> {
  const pool = `bench-${name}`;
  const secret = await createTokenSecret(b, {
    namespace: server.namespace,
    pool,
    config: [machineConfig('99-bench-motd', '/etc/motd', 0)],
    release: b.releases[name],
  });
  const token = await mintedToken(b, server.namespace, secret.name);
  const hash = secret.hash;
  const headers = ignitionHeaders(token, `${server.namespace}/${pool}`, hash);
  const payload = (await fetched(b, server.port, headers)).body as Buffer;
  const file = join(b.dir, `payload-${name}`);
  await writeFile(file, payload);
  return { name, pool: `${server.namespace}/${pool}`, headers, token, payload, file };
}

/** A reference must answer the same bytes to the token, 401 to another token, 403 to another pool. */
async function checkReference(b: Bench, ref: Reference, c: Case): Promise<void> {
  const same = await eventually(
    `a 200 from ${ref.name}`,
    async () => {
      const r = await get({ port: ref.port, ca: b.ca, headers: c.headers, keepBody: true }).catch(() => undefined);
      return r?.status === 200 ? r : undefined;
    },
    30_000,
    50,
  );
  if (!c.payload.equals(same.body as Buffer)) throw new Error(`${ref.name} does not serve the same bytes (${c.name})`);
  const refused = await get({ port: ref.port, ca: b.ca, headers: { ...c.headers, Authorization: 'Bearer wrong' } });
  const otherPool = await get({
    port: ref.port,
    ca: b.ca,
    headers: { ...c.headers, [IGNITION_HEADERS.nodePool]: 'other/pool' },
  });
  if (refused.status !== 401 || otherPool.status !== 403)
    throw new Error(`${ref.name} answered ${refused.status} to a wrong token and ${otherPool.status} to another pool`);
}

interface Throughput {
  name: string;
  payloadBytes: number;
  results: Map<string, WrkResult[]>;
}

/**
 * Plain node:https, a process per core (`name`), and with --node-threads also a thread per core (`name-threads`).
 */
async function startNodeReferences(
  b: Bench,
  name: string,
  sites: Site[],
  tls: { cert: string; key: string },
): Promise<Reference[]> {
  const refs = [await startNode({ dir: b.dir, name, ...tls, sites })];
  if (OPTS.nodeThreads)
    refs.push(await startNode({ dir: b.dir, name: `${name}-threads`, ...tls, sites, threads: true }));
  b.processes.push(...refs.map((r) => r.proc));
  return refs;
}

/**
 * The servers in the order of a round: each round starts with the next server, so no server always runs first
 * (on a machine still busy with the set-up) or always last.
 */
const rotated = <T>(servers: T[], round: number): T[] => [
  ...servers.slice(round % servers.length),
  ...servers.slice(0, round % servers.length),
];

/** Phase 1: the same payload bytes from the ignition server, Go, nginx and plain Node, wrk in turn, round after round. */
async function serving(b: Bench): Promise<Throughput[]> {
  const server = await startServer(b, 'server-serve', 'serve');
  const cases: Case[] = [];
  for (const name of ['small', 'mid', 'bulk'] as const)
    if (OPTS.payloads.has(name)) cases.push(await warmCase(b, server, name));
  const sites: Site[] = cases.map((c) => ({ token: c.token, pool: c.pool, payload: c.file }));
  const tls = { cert: join(b.dir, 'tls.crt'), key: join(b.dir, 'tls.key') };
  const go = await startGo({ bin: b.goBin, dir: b.dir, name: 'go-serve', ...tls, sites });
  const nginx = await startNginx({ dir: b.dir, ...tls, sites });
  b.processes.push(go.proc, nginx.proc);
  const bare = await startNodeReferences(b, 'node-serve', sites, tls);
  const kindling: Reference = { name: 'kindling', port: server.port, proc: server.proc, pids: () => [server.pid] };
  const results: Throughput[] = [];
  for (const c of cases) {
    for (const ref of [go, nginx, ...bare]) await checkReference(b, ref, c);
    const t: Throughput = { name: c.name, payloadBytes: c.payload.length, results: new Map() };
    const servers = [kindling, go, nginx, ...bare];
    for (let round = 0; round < OPTS.rounds; round++) {
      for (const ref of rotated(servers, round)) {
        const perfFile =
          OPTS.perfDir === undefined ? undefined : join(OPTS.perfDir, `${ref.name}-${c.name}-${round}.data`);
        t.results.set(ref.name, [
          ...(t.results.get(ref.name) ?? []),
          await wrk(ref.port, c.headers, () => ref.pids(), perfFile),
        ]);
      }
    }
    results.push(t);
  }
  await Promise.all([server, go, nginx, ...bare].map((r) => r.proc.stop()));
  return results;
}

/** The storm's warm-up (warmUp): hosts of its own, fetches by each, and the idle time after it. */
const WARM_HOSTS = 20;
const WARM_FETCHES = 5;
/**
 * Longer than V8's memory reducer waits after a busy spell (8 s) before it collects an idle heap: with 3 s,
 * Kindling's threads were in that collection as the storm began, which a server up for hours is not.
 */
const WARM_IDLE_MS = 15_000;

/** What the Go storm client (test/bench/gostorm) prints: one entry per host or connection, -1 when lost. */
interface GoStormOutput {
  /** From the storm's start (storm mode). */
  arrivedMs: number[];
  ttfbMs: number[];
  ttlbMs: number[];
  handshakeMs: number[];
  bytes: number[];
  statuses: Record<string, number>;
  tookMs: number;
}

interface StormResult {
  hosts: number;
  /** Statuses seen over all attempts ("error": a connection that failed). */
  statuses: Record<string, number>;
  /** Hosts that never got their 200 (a 4xx, or the deadline). */
  lost: number;
  /** From each host's arrival to the first and to the last byte of its 200, sorted (lost hosts left out). */
  ttfbMs: number[];
  ttlbMs: number[];
  /** Client-side time of each host's first TLS handshake, sorted. */
  handshakeMs: number[];
  /** Bytes of the payloads, the smallest. */
  payloadBytes: number;
  /** The server's CPU time (every thread or process) over the storm, per host. */
  cpuUsPerHost: number;
  tookMs: number;
  /** Each host's own times, in arrival order. */
  times: HostTimes;
  /** Kindling's loops, second by second (storm-trace.ts). */
  pauses: PauseSample[];
}

interface HandshakeResult {
  connections: number;
  failed: number;
  /** The server's CPU time over the run, per connection. */
  cpuUsPerHandshake: number;
  /** Client-side handshake time, median. */
  p50Ms: number;
}

const sorted = (xs: number[]): number[] => xs.filter((x) => x >= 0).sort((x, y) => x - y);

async function goStorm(b: Bench, args: string[]): Promise<GoStormOutput> {
  const { stdout } = await run(b.stormBin, ['--ca', join(b.dir, 'ca.crt'), ...args], {
    timeout: (OPTS.stormSpreadS + 300) * 1000,
    maxBuffer: 64 * MiB,
  });
  return JSON.parse(stdout) as GoStormOutput;
}

/**
 * The hosts arrive evenly over --storm-spread, each opening its own TLS connection as Ignition does; with the
 * server's ops port, what its threads' loops went through, second by second.
 */
async function storm(b: Bench, ref: Reference, hostsFile: string, opsPort?: number): Promise<StormResult> {
  const trace = opsPort === undefined ? undefined : await tracePauses(opsPort);
  const before = cpuSeconds(ref.pids());
  const r = await goStorm(b, [
    '--addr',
    `127.0.0.1:${ref.port}`,
    '--hosts',
    hostsFile,
    '--spread',
    `${OPTS.stormSpreadS}s`,
  ]);
  const cpu = cpuSeconds(ref.pids()) - before;
  const pauses = (await trace?.stop()) ?? [];
  const ttlbMs = sorted(r.ttlbMs);
  return {
    times: { arrivedMs: r.arrivedMs, handshakeMs: r.handshakeMs, ttlbMs: r.ttlbMs },
    pauses,
    hosts: r.ttlbMs.length,
    statuses: r.statuses,
    lost: r.ttlbMs.length - ttlbMs.length,
    ttfbMs: sorted(r.ttfbMs),
    ttlbMs,
    handshakeMs: sorted(r.handshakeMs),
    payloadBytes: Math.min(...r.bytes.filter((n) => n > 0)),
    cpuUsPerHost: (cpu * 1e6) / Math.max(1, r.ttlbMs.length),
    tookMs: r.tookMs,
  };
}

/** --handshakes connections, 8 at a time, each closed after its handshake: the server's CPU per handshake. */
async function handshakeCost(b: Bench, ref: Reference): Promise<HandshakeResult> {
  const before = cpuSeconds(ref.pids());
  const r = await goStorm(b, [
    '--mode',
    'handshake',
    '--addr',
    `127.0.0.1:${ref.port}`,
    '--n',
    String(OPTS.handshakes),
    '--concurrency',
    '8',
  ]);
  const cpu = cpuSeconds(ref.pids()) - before;
  const done = sorted(r.handshakeMs).filter((t) => t > 0);
  return {
    connections: OPTS.handshakes,
    failed: OPTS.handshakes - done.length,
    cpuUsPerHandshake: (cpu * 1e6) / Math.max(1, OPTS.handshakes),
    p50Ms: pct(done, 50),
  };
}

interface StormHost {
  headers: Record<string, string>;
  pool: string;
  token: string;
  /** Its token Secret's name. */
  secret: string;
}

/**
 * `count` token Secrets, one per pool (`<prefix>NNNNN`), over --storm-configs configs of the ~300 KiB release,
 * each minted.
 */
async function stormHosts(b: Bench, ns: string, prefix: string, count: number): Promise<StormHost[]> {
  const specs = Array.from({ length: count }, (_, i) => {
    const c = i % OPTS.stormConfigs;
    return {
      namespace: ns,
      pool: `${prefix}${String(i).padStart(5, '0')}`,
      config: [machineConfig(`50-storm-${c}`, `/etc/storm-${c}`, 0)],
      release: b.releases.mid,
    };
  });
  const secrets: { name: string; hash: string }[] = [];
  await inBatches(
    specs.map((s, i) => ({ s, i })),
    20,
    async ({ s, i }) => (secrets[i] = await createTokenSecret(b, s)),
  );
  const tokens = await eventually(
    'every storm token minted',
    async () => {
      const list = await b.core.listNamespacedSecret({ namespace: ns, labelSelector: LABELS.tokenSecret });
      const byName = new Map(list.items.map((s) => [s.metadata?.name, s.data?.[SECRET_KEYS.token]]));
      const all = secrets.map((s) => byName.get(s.name));
      return all.every((t) => t !== undefined) ? all.map((t) => Buffer.from(t, 'base64').toString()) : undefined;
    },
    900_000,
    1000,
  );
  return specs.map((s, i) => ({
    headers: ignitionHeaders(tokens[i] as string, `${ns}/${s.pool}`, secrets[i]?.hash ?? ''),
    pool: `${ns}/${s.pool}`,
    token: tokens[i] as string,
    secret: secrets[i]?.name ?? '',
  }));
}

/** Generated payloads, from the server's metrics (waiting on them fetches nothing, so every storm fetch is a first). */
async function payloadsGenerated(server: Server, count: number): Promise<void> {
  await eventually(
    `${count} payloads generated`,
    async () => {
      const m = await opsMetrics(server.opsPort).catch(() => '');
      const n = Number(
        /^kindling_ignition_payload_generation_seconds_count\{[^}]*outcome="success"[^}]*\} (\d+)$/m.exec(m)?.[1] ?? 0,
      );
      return n >= count ? true : undefined;
    },
    600_000,
    500,
  );
}

/** One of Kindling's storms: its hosts, and the file the storm client reads them from. */
interface StormRound {
  hosts: StormHost[];
  file: string;
}

interface Storms {
  /** Each server's storms, a round each. */
  results: Map<string, StormResult[]>;
  handshakes: Map<string, HandshakeResult>;
  /** Each of Kindling's storms' first fetches. */
  recordings: Recording[];
}

/** The storm's first fetches as written to the token Secrets (ignitionReachedAt), after the storm. */
interface Recording {
  /** Secrets stamped, of the storm's. */
  recorded: number;
  /** From the storm's end until the last was written. */
  afterMs: number;
  /** The server's CPU time over that wait, per host. */
  cpuUsPerHost: number;
}

/**
 * Waits until every storm Secret carries its first-fetch stamp (none lost; the server writes them once the
 * burst is over), before anything else runs on the machine: what writing them took, and cost.
 */
async function firstFetchesRecorded(b: Bench, hosts: StormHost[], ref: Reference): Promise<Recording> {
  const started = performance.now();
  const before = cpuSeconds(ref.pids());
  const recorded = await stamped(b, hosts);
  const cpu = cpuSeconds(ref.pids()) - before;
  return { recorded, afterMs: performance.now() - started, cpuUsPerHost: (cpu * 1e6) / hosts.length };
}

/** How many of the hosts' token Secrets carry their first-fetch stamp, once all do (or after 3 minutes). */
async function stamped(b: Bench, hosts: StormHost[]): Promise<number> {
  const [ns] = (hosts[0]?.pool ?? '').split('/');
  const names = new Set(hosts.map((h) => h.secret));
  let recorded = 0;
  await eventually(
    `${hosts.length} first fetches recorded`,
    async () => {
      const list = await b.core.listNamespacedSecret({ namespace: ns ?? '', labelSelector: LABELS.tokenSecret });
      recorded = list.items.filter(
        (s) => names.has(s.metadata?.name ?? '') && s.metadata?.annotations?.[ANNOTATIONS.ignitionReachedAt],
      ).length;
      return recorded >= hosts.length ? true : undefined;
    },
    180_000,
    1000,
  ).catch(() => undefined);
  return recorded;
}

/**
 * The same warm-up for every server before its storm, as a server in production has been up for hours
 * before one: WARM_HOSTS hosts of their own (not the storm's, whose fetches must be first fetches), each
 * fetching WARM_FETCHES times, all over new connections from the storm's client within a second; with a
 * connection per fetch, each of Kindling's serving threads takes some of them (the kernel spreads
 * connections over its sockets). Then, once `settled` (Kindling's: the warm hosts' first fetches written, so
 * that none is written during the storm), the server is left idle for WARM_IDLE_MS.
 */
async function warmUp(b: Bench, ref: Reference, warmFile: string, settled?: () => Promise<void>): Promise<void> {
  const r = await goStorm(b, ['--addr', `127.0.0.1:${ref.port}`, '--hosts', warmFile, '--spread', '1s']);
  const failed = r.ttlbMs.filter((t) => t < 0).length;
  if (failed > 0) throw new Error(`${ref.name}: ${failed} of the warm-up's fetches failed`);
  await settled?.();
  await new Promise((resolve) => setTimeout(resolve, WARM_IDLE_MS));
}

/**
 * Phase 2: N hosts (a pool each, over 10 configs of a ~300 KiB payload) boot over 10 s, each on a new TLS
 * connection (Go's client, as Ignition), round after round (--rounds): each of Kindling's storms has hosts of
 * its own (every fetch the host's first; the payloads generated before), Go and plain node:https storm with the
 * first round's hosts, given each host's bytes as Kindling answered them. Round 0 starts with Kindling, whose
 * answers the references serve; each later round with the next server. Then each server's CPU per handshake alone.
 * Two things differ between Kindling's rounds: every round's Secrets exist from the start (the index holds
 * rounds × N), and from round 1 on Kindling keeps the join files of round 0's hosts, which the references'
 * set-up fetched a second time (joinFor: about 4.5 KB a host).
 */
async function bootStorm(b: Bench): Promise<Storms> {
  const ns = 'storm';
  const server = await startServer(b, 'server-storm', ns);
  const rounds: StormRound[] = [];
  for (let round = 0; round < OPTS.rounds; round++) {
    const hosts = await stormHosts(b, ns, `pool${round}-`, OPTS.storm);
    const file = join(b.dir, `storm-hosts-${round}.json`);
    await writeFile(file, JSON.stringify(hosts.map((h) => ({ headers: h.headers }))));
    rounds.push({ hosts, file });
  }
  const warm = await stormHosts(b, ns, 'warm', WARM_HOSTS);
  await payloadsGenerated(server, OPTS.stormConfigs);
  const warmFile = join(b.dir, 'warm-hosts.json');
  const warmFetches = Array.from({ length: WARM_FETCHES }, () => warm.map((h) => ({ headers: h.headers })));
  await writeFile(warmFile, JSON.stringify(warmFetches.flat()));
  const kindling: Reference = { name: 'kindling', port: server.port, proc: server.proc, pids: () => [server.pid] };
  const results = new Map<string, StormResult[]>();
  const add = (name: string, r: StormResult): void => void results.set(name, [...(results.get(name) ?? []), r]);
  const recordings: Recording[] = [];
  const stormKindling = async (round: number): Promise<void> => {
    // The warm-up's first fetches written before the storm: their patches are not the storm's load.
    await warmUp(b, kindling, warmFile, async () => {
      const written = await stamped(b, warm);
      if (written < warm.length)
        throw new Error(`kindling: ${written} of the warm-up's ${warm.length} first fetches written`);
    });
    const { hosts, file } = rounds[round] as StormRound;
    add('kindling', await storm(b, kindling, file, server.opsPort));
    recordings.push(await firstFetchesRecorded(b, hosts, kindling));
  };
  // The references serve the bytes Kindling answered round 0's hosts, so that storm comes first, before them.
  await stormKindling(0);
  const first = rounds[0] as StormRound;
  const refs = await startStormReferences(b, server, [...first.hosts, ...warm], first.hosts[0] as StormHost);
  for (let round = 0; round < OPTS.rounds; round++) {
    for (const ref of rotated([kindling, ...refs], round)) {
      if (ref !== kindling) {
        await warmUp(b, ref, warmFile);
        add(ref.name, await storm(b, ref, first.file));
      } else if (round > 0) await stormKindling(round);
    }
  }
  const handshakes = new Map<string, HandshakeResult>();
  for (const ref of [kindling, ...refs]) handshakes.set(ref.name, await handshakeCost(b, ref));
  await Promise.all([server, ...refs].map((r) => r.proc.stop()));
  await b.core.deleteCollectionNamespacedSecret({ namespace: ns, labelSelector: LABELS.tokenSecret });
  return { results, handshakes, recordings };
}

/**
 * Go and plain node:https for the storm, each answering every host's token with the bytes Kindling served it
 * (each payload carries its host's own join files), checked with the first host.
 */
async function startStormReferences(
  b: Bench,
  server: Server,
  hosts: StormHost[],
  probeHost: StormHost,
): Promise<Reference[]> {
  const sites: Site[] = [];
  await inBatches(hosts, 20, async (h) => {
    const file = join(b.dir, `storm-${h.pool.replace('/', '-')}`);
    await writeFile(file, (await fetched(b, server.port, h.headers)).body as Buffer);
    sites.push({ token: h.token, pool: h.pool, payload: file });
  });
  const tls = { cert: join(b.dir, 'tls.crt'), key: join(b.dir, 'tls.key') };
  const go = await startGo({ bin: b.goBin, dir: b.dir, name: 'go-storm', ...tls, sites });
  b.processes.push(go.proc);
  const refs = [go, ...(await startNodeReferences(b, 'node-storm', sites, tls))];
  const site = sites.find((s) => s.token === probeHost.token) as Site;
  const probe: Case = {
    name: 'storm',
    pool: site.pool,
    headers: probeHost.headers,
    token: site.token,
    payload: readFileSync(site.payload),
    file: site.payload,
  };
  for (const ref of refs) await checkReference(b, ref, probe);
  return refs;
}

interface MemoryResult {
  tokens: number;
  payloads: number;
  payloadBytes: number;
  cachedBytes: number;
  configSecretBytes: number;
  rssBeforeBytes: number;
  /** 15 s after the load: the server may still be recording first fetches. */
  rssSettledBytes: number;
  /** Once idle (untilIdle); the figure. */
  rssAfterBytes: number;
  /** Seconds from the load's end to idle: undefined when the server runs without the memory saver, or never was. */
  idleAfterS: number | undefined;
  /** Where the RSS is (anonymous, file-backed, shared) and the main thread's heap. */
  breakdown: string;
  loadS: number;
  /** A token and its headers, to time the restart with. */
  probe: Record<string, string>;
  server: Server;
}

/** Phase 3: 100 configs × 10 pools, each token fetched once so every payload is generated and cached. */
async function memory(b: Bench): Promise<MemoryResult> {
  const ns = 'memory';
  const server = await startServer(b, 'server-memory', ns);
  // Sampled once the server is up (its ops port answers), not at a fixed delay that a loaded machine outlasts.
  await eventually(
    'the server up',
    async () => ((await opsMetrics(server.opsPort).catch(() => undefined)) === undefined ? undefined : true),
    120_000,
    100,
  );
  await new Promise((r) => setTimeout(r, 2000));
  const rssBeforeBytes = vmRssBytes(server.pid);
  const started = performance.now();
  const jobs: { pool: string; hash: string; name: string }[] = [];
  let configSecretBytes = 0;
  for (let i = 0; i < OPTS.configs; i++) {
    const config = [machineConfig(`50-bulk-${i}`, `/opt/bench/c${String(i).padStart(4, '0')}.bin`, OPTS.configKib)];
    configSecretBytes = JSON.stringify(config).length;
    const pools = Array.from({ length: OPTS.secretsPerConfig }, (_, j) => `p${j}`);
    await inBatches(pools, OPTS.secretsPerConfig, async (pool) => {
      const secret = await createTokenSecret(b, { namespace: ns, pool, config, release: b.releases.bulk });
      jobs.push({ pool, ...secret });
    });
  }
  let payloadBytes = 0;
  const seen = new Set<string>();
  let probe: Record<string, string> = {};
  await inBatches(jobs, 8, async (job) => {
    const headers = ignitionHeaders(await mintedToken(b, ns, job.name), `${ns}/${job.pool}`, job.hash);
    const r = await fetched(b, server.port, headers);
    if (!seen.has(job.hash)) payloadBytes += r.bytes;
    seen.add(job.hash);
    probe = headers;
  });
  const loadS = (performance.now() - started) / 1000;
  // Let the garbage of generation settle (bounded) before sampling, as a long-running server would.
  await new Promise((r) => setTimeout(r, 15_000));
  const rssSettledBytes = vmRssBytes(server.pid);
  const idleAfterS = await untilIdle(server.opsPort, started + loadS * 1000);
  const m = await opsMetrics(server.opsPort);
  const cachedBytes = metric(m, 'kindling_ignition_payload_cache_bytes');
  const status = readFileSync(`/proc/${server.pid}/status`, 'utf8');
  const kb = (field: string): number =>
    Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? Number.NaN) * 1024;
  const saver = `the memory saver ${metric(m, 'kindling_memory_saver_on') === 1 ? 'on' : 'off'} (turned off ${saverSwitches(m, 'off')} and on ${saverSwitches(m, 'on')} times)`;
  const breakdown = `${mappings(server.pid)}; ${saver}; RssAnon ${mib(kb('RssAnon'))}, RssFile ${mib(kb('RssFile'))}, RssShmem ${mib(kb('RssShmem'))}; main thread's V8 heap ${mib(metric(m, 'nodejs_heap_size_used_bytes'))} used of ${mib(metric(m, 'nodejs_heap_size_total_bytes'))}, external ${mib(metric(m, 'nodejs_external_memory_bytes'))}`;
  const rssAfterBytes = vmRssBytes(server.pid);
  if (OPTS.heapSnapshotDir !== undefined) await heapSnapshot(server, OPTS.heapSnapshotDir);
  return {
    tokens: jobs.length,
    payloads: seen.size,
    payloadBytes,
    cachedBytes,
    configSecretBytes,
    rssBeforeBytes,
    rssSettledBytes,
    rssAfterBytes,
    idleAfterS,
    breakdown,
    loadS,
    probe,
    server,
  };
}

/**
 * Waits (up to 2 minutes) until the server is idle as it judges itself: its memory saver back on after the load
 * and its heaps collected (support/src/memory-saver.ts). Seconds from `loadEndMs` (performance.now()), or
 * undefined at once when the server runs without the saver, or after the 2 minutes.
 */
async function untilIdle(opsPort: number, loadEndMs: number): Promise<number | undefined> {
  const deadline = performance.now() + 120_000;
  while (performance.now() < deadline) {
    const m = await opsMetrics(opsPort);
    const on = metric(m, 'kindling_memory_saver_on');
    if (Number.isNaN(on)) return undefined;
    if (on === 1 && saverSwitches(m, 'on') > 0) return (performance.now() - loadEndMs) / 1000;
    await new Promise((r) => setTimeout(r, 1000));
  }
  return undefined;
}

/** A heap snapshot of the server's main thread (a full GC first): then its RSS and heap again, garbage gone. */
async function heapSnapshot(server: Server, dir: string): Promise<void> {
  const before = new Set(readdirSync(dir));
  process.kill(server.pid, 'SIGUSR2');
  const file = await eventually(
    'the heap snapshot',
    async () => {
      const made = readdirSync(dir).find((f) => !before.has(f) && f.endsWith('.heapsnapshot'));
      // Written once the server answers again (the snapshot blocks its main thread).
      return made !== undefined && (await opsMetrics(server.opsPort).catch(() => undefined)) !== undefined
        ? made
        : undefined;
    },
    300_000,
    500,
  );
  const m = await opsMetrics(server.opsPort);
  out(
    `  heap snapshot ${join(dir, file)}; after its full GC: VmRSS ${mib(vmRssBytes(server.pid))}, main thread's V8 heap ${mib(metric(m, 'nodejs_heap_size_used_bytes'))} used of ${mib(metric(m, 'nodejs_heap_size_total_bytes'))}`,
  );
}

type MappingKind = 'brk' | '≥ 8 MiB' | '1–8 MiB' | '< 1 MiB';

/** An smaps header line's kind, when the mapping is anonymous memory. */
function mappingKind(line: string): MappingKind | undefined {
  const head = /^([0-9a-f]+)-([0-9a-f]+) \S+ \S+ \S+ (\d+)\s*(.*)$/.exec(line);
  if (!head) return undefined;
  if (head[4] === '[heap]') return 'brk';
  if (head[4] !== '' || head[3] !== '0') return undefined;
  const span = (parseInt(head[2] as string, 16) - parseInt(head[1] as string, 16)) / MiB;
  return span >= 8 ? '≥ 8 MiB' : span >= 1 ? '1–8 MiB' : '< 1 MiB';
}

/** The process's anonymous memory by kind of mapping (from smaps): malloc's heap, large mappings, small ones. */
function mappings(pid: number): string {
  const sizes: Record<MappingKind, number> = { brk: 0, '≥ 8 MiB': 0, '1–8 MiB': 0, '< 1 MiB': 0 };
  let kind: MappingKind | undefined;
  for (const line of readFileSync(`/proc/${pid}/smaps`, 'utf8').split('\n')) {
    if (/^[0-9a-f]+-[0-9a-f]+ /.test(line)) kind = mappingKind(line);
    const rss = /^Rss:\s+(\d+) kB/.exec(line);
    if (rss && kind !== undefined) sizes[kind] += Number(rss[1]) * 1024;
  }
  return `anonymous RSS by mapping: ${Object.entries(sizes)
    .map(([k, v]) => `${k} ${mib(v)}`)
    .join(', ')}`;
}

interface RestartResult {
  firstAnswerMs: number;
  firstByteMs: number;
  firstRequestTtfbMs: number;
  attempts: number;
  generatedAfterRestart: number;
  /** Where the time went: the first line of each kind the server logged, ms after the spawn. */
  milestones: string;
}

/** The first time (ms after the spawn) the server logged each message of its start. */
function milestones(server: Server): string {
  const first = new Map<string, number>();
  for (const line of readFileSync(server.proc.logFile, 'utf8').split('\n')) {
    try {
      const { time, msg } = JSON.parse(line) as { time?: string; msg?: string };
      if (time !== undefined && msg !== undefined && !first.has(msg))
        first.set(msg, Date.parse(time) - server.spawnedWallMs);
    } catch {
      // not a log line
    }
  }
  return [...first]
    .sort((a, b) => a[1] - b[1])
    .slice(0, 12)
    .map(([msg, ms]) => `${fmt(ms)} ms ${msg}`)
    .join('; ');
}

/** Phase 4: stop, start on the same cache directory, and poll until the first 200 byte arrives. */
async function restart(b: Bench, server: Server, probe: Record<string, string>): Promise<RestartResult> {
  await server.proc.stop();
  const next = await startServer(b, 'server-restarted', server.namespace, server.cacheDir);
  let attempts = 0;
  let firstAnswerAt: number | undefined;
  let answered = false;
  // A server that dies while starting fails the phase at once instead of after the polling deadline.
  const died = next.proc.exited.then((code) =>
    answered
      ? undefined
      : Promise.reject(
          new Error(
            `the restarted server exited with code ${code} after ${fmt((performance.now() - next.spawnedAt) / 1000, 1)} s without answering 200`,
          ),
        ),
  );
  const polled = eventually(
    'the first 200 after the restart',
    async () => {
      attempts++;
      const r = await get({ port: next.port, ca: b.ca, headers: probe }).catch(() => undefined);
      if (r) firstAnswerAt ??= r.firstByteAt;
      return r?.status === 200 ? r : undefined;
    },
    600_000,
    10,
  );
  const first = await Promise.race([polled, died.then(() => polled)])
    .catch((err: unknown) => {
      throw new Error(`no 200 after the restart; the server's log ends with:\n${next.proc.tail(10)}`, { cause: err });
    })
    .finally(() => (answered = true));
  const generatedAfterRestart = readFileSync(next.proc.logFile, 'utf8').split('Generated a payload').length - 1;
  await next.proc.stop();
  return {
    milestones: milestones(next),
    firstAnswerMs: (firstAnswerAt ?? Number.NaN) - next.spawnedAt,
    firstByteMs: first.firstByteAt - next.spawnedAt,
    firstRequestTtfbMs: first.ttfbMs,
    attempts,
    generatedAfterRestart,
  };
}

const fmt = (n: number, digits = 0): string => n.toFixed(digits);
const mib = (n: number): string => `${fmt(n / MiB, 1)} MiB`;
const median = (xs: number[]): number => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)] ?? Number.NaN;
const pct = (sorted: number[], p: number): number =>
  sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] ?? Number.NaN;

const rows: Row[] = [];

function reportThroughput(ts: Throughput[]): void {
  out('');
  out(
    `serving: wrk -t2 -c${OPTS.connections} -d${OPTS.durationS}s --latency over TLS (same certificate, same bytes, bearer + NodePool check), keep-alive, ${OPTS.rounds} round(s), medians`,
  );
  out(`| ${'server'.padEnd(34)} |   req/s |  p50 ms |  p99 ms | CPU µs/req | requests | non-2xx | socket errors`);
  out(`|${'-'.repeat(36)}|---------|---------|---------|------------|----------|---------|--------------`);
  for (const t of ts) {
    for (const [name, rs] of t.results) {
      const m = (f: (w: WrkResult) => number): number => median(rs.map(f));
      out(
        `| ${`${name}, ${t.payloadBytes} B`.padEnd(34)} | ${fmt(m((w) => w.requestsPerS)).padStart(7)} | ${fmt(
          m((w) => w.p50Ms),
          1,
        ).padStart(7)} | ${fmt(
          m((w) => w.p99Ms),
          1,
        ).padStart(
          7,
        )} | ${fmt(m((w) => w.cpuUsPerRequest)).padStart(10)} | ${String(m((w) => w.requests)).padStart(8)} | ${String(m((w) => w.non2xx)).padStart(7)} | ${rs.map((w) => w.errors).join('; ')}`,
      );
    }
    // Each server's median of one figure over the rounds.
    const med = (server: string, f: (w: WrkResult) => number): number => median((t.results.get(server) ?? []).map(f));
    const rps = {
      kindling: med('kindling', (w) => w.requestsPerS),
      go: med('go-serve', (w) => w.requestsPerS),
      node: med('node-serve', (w) => w.requestsPerS),
    };
    const p99 = { kindling: med('kindling', (w) => w.p99Ms), go: med('go-serve', (w) => w.p99Ms) };
    const cpu = { kindling: med('kindling', (w) => w.cpuUsPerRequest), go: med('go-serve', (w) => w.cpuUsPerRequest) };
    const size = `${fmt(t.payloadBytes / KiB, 0)} KiB`;
    // Against Go from 300 KB up: below, the ceiling is the runtime's own TLS server (the node:https row).
    const againstGo = t.payloadBytes >= 256 * KiB;
    rows.push({
      figure: `serving ${size}: req/s`,
      value: fmt(rps.kindling),
      reference: `Go ${fmt(rps.go)}`,
      ratio: rps.kindling / rps.go,
      target: againstGo ? '≥ 1.0' : '(reported)',
      pass: againstGo ? rps.kindling / rps.go >= 1 : undefined,
    });
    rows.push({
      figure: `serving ${size}: p99`,
      value: `${fmt(p99.kindling, 1)} ms`,
      reference: `Go ${fmt(p99.go, 1)} ms`,
      ratio: p99.kindling / p99.go,
      target: '≤ 1.5',
      pass: p99.kindling / p99.go <= 1.5,
    });
    rows.push({
      figure: `serving ${size}: req/s against plain node:https`,
      value: fmt(rps.kindling),
      reference: `node:https ${fmt(rps.node)} (Go ÷ it: ${fmt(rps.go / rps.node, 2)})`,
      ratio: rps.kindling / rps.node,
      target: '≥ 0.95',
      pass: rps.kindling / rps.node >= 0.95,
    });
    rows.push({
      figure: `serving ${size}: requests per CPU-second (Go ÷ kindling CPU/req)`,
      value: `${fmt(cpu.kindling)} µs/req`,
      reference: `Go ${fmt(cpu.go)} µs/req`,
      ratio: cpu.go / cpu.kindling,
      target: '(≥ 1.0)',
      pass: undefined,
    });
    if (t.results.has('node-serve-threads')) rows.push(threadsRow(size, med));
  }
}

/** Plain node:https in threads against its processes (--node-threads): the CPU per request threads cost. */
function threadsRow(size: string, med: (server: string, f: (w: WrkResult) => number) => number): Row {
  const cpu = (server: string): number => med(server, (w) => w.cpuUsPerRequest);
  return {
    figure: `serving ${size}: plain node:https CPU/req, threads ÷ processes`,
    value: `${fmt(cpu('node-serve-threads'))} µs/req`,
    reference: `processes ${fmt(cpu('node-serve'))} µs/req, kindling ${fmt(cpu('kindling'))}`,
    ratio: cpu('node-serve-threads') / cpu('node-serve'),
    target: '(reported)',
    pass: undefined,
  };
}

function stormLine(name: string, s: StormResult): string {
  const ms = (xs: number[], p: number): string => fmt(pct(xs, p), 1);
  return `  ${name.padEnd(10)} ${s.hosts} hosts, ${s.lost} lost, statuses over all attempts ${JSON.stringify(s.statuses)}; from arrival: first byte p50 ${ms(s.ttfbMs, 50)} ms p99 ${ms(s.ttfbMs, 99)} ms, last byte p50 ${ms(s.ttlbMs, 50)} ms p99 ${ms(s.ttlbMs, 99)} ms max ${fmt(s.ttlbMs.at(-1) ?? Number.NaN, 1)} ms; handshake (client) p50 ${ms(s.handshakeMs, 50)} ms p99 ${ms(s.handshakeMs, 99)} ms; server CPU ${fmt(s.cpuUsPerHost)} µs per host; all done in ${fmt(s.tookMs)} ms`;
}

function reportStorm({ results, handshakes, recordings }: Storms): void {
  const k = results.get('kindling') as StormResult[];
  out('');
  out(
    `boot storm: ${OPTS.storm} hosts (a pool each, ${OPTS.stormConfigs} configs, payload ${fmt((k[0]?.payloadBytes ?? Number.NaN) / KiB)} KiB) arriving evenly over ${OPTS.stormSpreadS} s, each on its own new TLS connection (Go's client as Ignition's: no session resumption, X25519 then P-256; ECDSA P-256 certificate), 5xx retried with Ignition's backoff; ${OPTS.rounds} round(s), medians`,
  );
  for (const [name, rs] of results) rs.forEach((r, round) => out(stormLine(`${name} r${round}`, r)));
  out(
    `  by second of arrival: hosts, client handshake and last byte p99/max; for kindling, how late each loop's samples ran, p99/max (a serving thread's every 10 ms while it serves, the main thread's every 100 ms, so a main-thread stall under 100 ms mostly shows 0; never late or never sampled shows 0) and GC pauses ms (count, longest, full collections), over that second`,
  );
  for (const [name, rs] of results)
    rs.forEach((r, round) => {
      out(`  ${name}, round ${round}`);
      for (const line of bySecond(r.times, r.pauses)) out(line);
      out(`    slowest 20 (arrival: client handshake, last byte, ms): ${slowest(r.times, 20)}`);
    });
  out(
    `  handshakes alone (${OPTS.handshakes} connections, 8 at a time, closed after the handshake), server CPU per handshake: ${[
      ...handshakes,
    ]
      .map(
        ([name, h]) => `${name} ${fmt(h.cpuUsPerHandshake)} µs (client p50 ${fmt(h.p50Ms, 2)} ms, ${h.failed} failed)`,
      )
      .join(', ')}`,
  );
  for (const [round, r] of recordings.entries())
    out(
      `  round ${round}: first fetches recorded (ignitionReachedAt): ${r.recorded} of ${OPTS.storm} Secrets, the last ${fmt(r.afterMs / 1000, 1)} s after the storm; server CPU meanwhile ${fmt(r.cpuUsPerHost)} µs per host`,
    );
  const p99s = (name: string): number[] => (results.get(name) ?? []).map((r) => pct(r.ttlbMs, 99));
  out(
    `  p99 arrival to last byte by round: ${[...results.keys()]
      .map(
        (name) =>
          `${name} ${p99s(name)
            .map((p) => fmt(p, 1))
            .join(', ')} ms`,
      )
      .join('; ')}`,
  );
  const p99 = (name: string): number => median(p99s(name));
  const lost = (name: string): number => (results.get(name) ?? []).reduce((n, r) => n + r.lost, 0);
  const recorded = Math.min(...recordings.map((r) => r.recorded));
  const afterMs = Math.max(...recordings.map((r) => r.afterMs));
  const cost = (name: string): number => handshakes.get(name)?.cpuUsPerHandshake ?? Number.NaN;
  const against = (name: string, label: string, target?: string): Row => ({
    figure: `boot storm: p99 arrival to last byte${target === undefined ? `, against ${label}` : ''}`,
    value: `${fmt(p99('kindling'), 1)} ms`,
    reference: `${label} ${fmt(p99(name), 1)} ms`,
    ratio: p99('kindling') / p99(name),
    target: target ?? '(reported)',
    pass: target === undefined ? undefined : p99('kindling') <= p99(name),
  });
  rows.push(
    {
      figure: `boot storm: hosts lost`,
      value: String(lost('kindling')),
      reference: `of ${k.length} × ${OPTS.storm} (Go lost ${lost('go-storm')}, node:https ${lost('node-storm')})`,
      ratio: Number.NaN,
      target: '0',
      pass: lost('kindling') === 0,
    },
    {
      figure: 'boot storm: first fetches recorded',
      value: String(recorded),
      reference: `of ${OPTS.storm} each round, ${fmt(afterMs / 1000, 1)} s after the storm at most`,
      ratio: Number.NaN,
      target: `${OPTS.storm}`,
      pass: recorded >= OPTS.storm,
    },
    against('go-storm', 'Go', '≤ 1.0'),
    against('node-storm', 'node:https'),
    ...(results.has('node-storm-threads') ? [against('node-storm-threads', 'node:https in threads')] : []),
    {
      figure: 'boot storm: server CPU per TLS handshake (P-256)',
      value: `${fmt(cost('kindling'))} µs`,
      reference: `Go ${fmt(cost('go-storm'))} µs, node:https ${fmt(cost('node-storm'))} µs`,
      ratio: cost('kindling') / cost('go-storm'),
      target: '(reported)',
      pass: undefined,
    },
  );
}

function reportMemory(m: MemoryResult): void {
  const bound = 1.2 * m.cachedBytes + 100 * MiB;
  out('');
  out(
    `memory: ${m.tokens} live tokens over ${m.payloads} distinct payloads of ${mib(m.payloadBytes / Math.max(1, m.payloads))} each (config JSON in each token Secret: ${fmt(m.configSecretBytes / KiB)} KiB), each token fetched once`,
  );
  out(
    `  VmRSS of the ignition-server process (every thread): ${mib(m.rssBeforeBytes)} before loading, ${mib(m.rssSettledBytes)} 15 s after loading (creating + minting + fetching took ${fmt(m.loadS, 1)} s), ${mib(m.rssAfterBytes)} once idle (${m.idleAfterS === undefined ? 'not seen: no memory saver, or not within 2 minutes' : `the memory saver back on ${fmt(m.idleAfterS, 1)} s after loading`}); payload bytes in memory (kindling_ignition_payload_cache_bytes): ${mib(m.cachedBytes)}`,
  );
  out(`  ${m.breakdown}`);
  rows.push({
    figure: 'memory: RSS, 1,000 tokens over 100 payloads',
    value: mib(m.rssAfterBytes),
    reference: `1.2 × ${mib(m.cachedBytes)} + 100 MiB = ${mib(bound)}`,
    ratio: m.rssAfterBytes / bound,
    target: '≤ 1.0',
    pass: m.rssAfterBytes <= bound,
  });
}

function reportRestart(tokens: number, r: RestartResult): void {
  out('');
  out(`restart on the persisted cache dir with ${tokens} token Secrets live (spawn of node bin/kindling.js →):`);
  out(
    `  first answer of any status: ${fmt(r.firstAnswerMs)} ms; first byte of a 200 /ignition: ${fmt(r.firstByteMs)} ms`,
  );
  out(`  the server's log, ms after the spawn: ${r.milestones}`);
  out(
    `  (that request's own TTFB ${fmt(r.firstRequestTtfbMs, 1)} ms; ${r.attempts} polls, 10 ms apart; payloads generated after the restart: ${r.generatedAfterRestart})`,
  );
  rows.push({
    figure: 'restart: first 200 after spawn',
    value: `${fmt(r.firstByteMs)} ms`,
    reference: '5,000 ms',
    ratio: r.firstByteMs / 5000,
    target: '≤ 1.0',
    pass: r.firstByteMs <= 5000,
  });
}

async function main(): Promise<void> {
  out(
    `machine: ${availableParallelism()} cores (${cpus()[0]?.model ?? '?'}), load average at start ${loadAverage()}; the server runs one serving thread per core`,
  );
  const b = await setUp();
  try {
    if (OPTS.phases.has('serving')) reportThroughput(await serving(b));
    if (OPTS.phases.has('storm')) reportStorm(await bootStorm(b));
    if (OPTS.phases.has('memory')) {
      const m = await memory(b);
      reportMemory(m);
      reportRestart(m.tokens, await restart(b, m.server, m.probe));
    }
    out('');
    out(`load average at the end: ${loadAverage()}`);
    reportRows(rows);
  } finally {
    for (const p of b.processes.reverse()) await p.stop();
    await b.guest.stop();
    await b.cluster.stop();
    if (process.env.KEEP_BENCH_DIR === undefined) await rm(b.dir, { recursive: true, force: true });
  }
}

await main();
