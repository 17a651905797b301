/**
 * Benchmark of the ignition server (issue 4), in one run on this machine:
 *  1. warm `/ignition` over TLS, 256 connections (wrk), against nginx (Debian) serving the same payload bytes
 *     over TLS with the same certificate and an equivalent bearer check: requests/s ratio and both p99s;
 *  2. RSS of the server with 1,000 live tokens over 100 distinct ~1 MB payloads (each fetched once);
 *  3. time to first byte of `/ignition` after a restart of the server on its persisted cache directory.
 * Everything runs on loopback: a real test-bed apiserver, a real `kindling ignition-server` process, nginx, wrk.
 *
 * A payload is the release's fragments merged with the pool's config. The ~1 MB of each payload is split
 * between the release (shared, --release-kib) and a MachineConfig file distinct per config (--config-kib),
 * because every token Secret carries its config: 1,000 Secrets with 1 MB configs are 1 GB in etcd, beyond the
 * test bed's 1 GiB etcd quota. `--config-kib 1000 --release-kib 0 --secrets-per-config 1` puts all of it in
 * the MachineConfig at a tenth of the tokens.
 *
 *   npm run build && node dist/test/bench/ignition-server.js [--duration 15] [--configs 100]
 *     [--secrets-per-config 10] [--config-kib 100] [--release-kib 900] [--cpu-prof <dir>] [--skip-memory]
 *
 * `--cpu-prof <dir>` runs the server under `node --cpu-prof` and leaves its .cpuprofile files in <dir>;
 * `--skip-memory` stops after the throughput phase (for profiling it alone).
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync, readdirSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { request } from 'node:https';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import * as k8s from '@kubernetes/client-node';
import { startCluster, freePort, ManagedProcess, eventually, type Cluster } from '../bed/src/index.js';
import { createCertificateAuthority } from '../../support/src/pki.js';
import { IGNITION_HEADERS, LABELS, SECRET_KEYS, tokenSecretName } from '../../api/src/keys.js';
import { BASE_FRAGMENTS, ecKeyPem, writeReleaseFolder } from '../../ignition-server/testing/index.js';

const KINDLING = fileURLToPath(new URL('../../../bin/kindling.js', import.meta.url));
const NGINX = '/usr/sbin/nginx';
const WRK = '/usr/bin/wrk';
const NS = 'clusters';
const ACCEPT = 'application/vnd.coreos.ignition+json;version=3.3.0';
const KiB = 1024;
const MiB = 1024 * 1024;
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
  skipMemory: process.argv.includes('--skip-memory'),
  durationS: flag('duration', 15),
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
    const r = request({ host: '127.0.0.1', port: opts.port, path: '/ignition', ca: opts.ca, headers: opts.headers, servername: 'localhost', agent: false, timeout: 30_000 }, (res) => {
      const firstByteAt = performance.now();
      const ttfbMs = firstByteAt - started;
      const chunks: Buffer[] = [];
      let bytes = 0;
      res.on('data', (c: Buffer) => {
        bytes += c.length;
        if (opts.keepBody === true) chunks.push(c);
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, bytes, ttfbMs, firstByteAt, ...(opts.keepBody === true ? { body: Buffer.concat(chunks) } : {}) }));
      res.on('error', reject);
    });
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
  return `data:;base64,${randomBytes(Math.ceil((chars * 3) / 4)).toString('base64').slice(0, chars - (chars % 4))}`;
}

function machineConfig(name: string, path: string, kib: number): Record<string, unknown> {
  return {
    apiVersion: 'machineconfiguration.openshift.io/v1',
    kind: 'MachineConfig',
    metadata: { name },
    spec: { config: { ignition: { version: '3.2.0' }, storage: { files: [{ path, mode: 420, contents: { source: kib > 0 ? bulkSource(kib * KiB) : 'data:,bench%0A' } }] } } },
  };
}

/** The guarded command's pid: the guard's only child. */
function childPid(guardPid: number): number {
  for (const tid of readdirSync(`/proc/${guardPid}/task`)) {
    const kids = readFileSync(`/proc/${guardPid}/task/${tid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean);
    if (kids[0] !== undefined) return Number(kids[0]);
  }
  throw new Error(`process ${guardPid} has no child`);
}

function vmRssBytes(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (!m) throw new Error(`no VmRSS for ${pid}`);
  return Number(m[1]) * 1024;
}

interface WrkResult {
  requestsPerS: number;
  p50Ms: number;
  p99Ms: number;
  requests: number;
  non2xx: number;
  errors: string;
}

const UNIT_MS: Record<string, number> = { us: 0.001, ms: 1, s: 1000, m: 60_000 };

function latencyMs(text: string, pct: string): number {
  const m = new RegExp(`^\\s*${pct}%\\s+([\\d.]+)(us|ms|s|m)\\s*$`, 'm').exec(text);
  if (!m) throw new Error(`wrk printed no ${pct}% latency:\n${text}`);
  return Number(m[1]) * (UNIT_MS[m[2] as string] ?? Number.NaN);
}

export function parseWrk(text: string): WrkResult {
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

async function wrk(port: number, headers: Record<string, string>): Promise<WrkResult> {
  const args = ['-t2', '-c256', `-d${OPTS.durationS}s`, '--latency', ...Object.entries(headers).flatMap(([k, v]) => ['-H', `${k}: ${v}`]), `https://127.0.0.1:${port}/ignition`];
  const { stdout } = await run(WRK, args, { timeout: (OPTS.durationS + 60) * 1000, maxBuffer: 4 * MiB });
  return parseWrk(stdout);
}

interface NginxSite {
  port: number;
  token: string;
  root: string;
}

function nginxServer(dir: string, site: NginxSite): string {
  return `
  server {
    listen 127.0.0.1:${site.port} ssl;
    ssl_certificate ${join(dir, '..', 'tls.crt')};
    ssl_certificate_key ${join(dir, '..', 'tls.key')};
    root ${site.root};
    location = /ignition {
      if ($http_authorization != "Bearer ${site.token}") { return 401; }
      default_type application/vnd.coreos.ignition+json;
      add_header Cache-Control no-store;
    }
  }`;
}

function nginxConf(dir: string, sites: NginxSite[]): string {
  // Root runs workers as nobody, who cannot read a mkdtemp folder; a bench on loopback keeps them as root.
  const user = process.getuid?.() === 0 ? 'user root;\n' : '';
  return `${user}daemon off;
master_process on;
worker_processes auto;
pid ${join(dir, 'nginx.pid')};
error_log ${join(dir, 'error.log')} warn;
events { worker_connections 4096; }
http {
  access_log ${join(dir, 'access.log')};
  client_body_temp_path ${join(dir, 'client_body')};
  proxy_temp_path ${join(dir, 'proxy')};
  fastcgi_temp_path ${join(dir, 'fastcgi')};
  uwsgi_temp_path ${join(dir, 'uwsgi')};
  scgi_temp_path ${join(dir, 'scgi')};
  sendfile on;
  keepalive_requests 100000;${sites.map((site) => nginxServer(dir, site)).join('')}
}
`;
}

interface Bench {
  dir: string;
  cluster: Cluster;
  core: k8s.CoreV1Api;
  ca: string;
  releases: { small: string; bulk: string };
  processes: ManagedProcess[];
}

interface Server {
  proc: ManagedProcess;
  port: number;
  pid: number;
}

async function startServer(b: Bench, name: string): Promise<Server & { spawnedAt: number }> {
  const port = await freePort();
  const opsPort = await freePort();
  const spawnedAt = performance.now();
  const proc = new ManagedProcess({
    name,
    command: process.execPath,
    logFile: join(b.dir, `${name}.log`),
    args: [
      ...(OPTS.cpuProfDir === undefined ? [] : ['--cpu-prof', '--cpu-prof-dir', OPTS.cpuProfDir]),
      KINDLING, 'ignition-server',
      '--kubeconfig', b.cluster.kubeconfigPath,
      '--serving-address', `127.0.0.1:${port}`,
      '--ops-address', `127.0.0.1:${opsPort}`,
      '--tls-cert-file', join(b.dir, 'tls.crt'),
      '--tls-key-file', join(b.dir, 'tls.key'),
      '--signing-key-file', join(b.dir, 'signing.pem'),
      '--namespaces', NS,
      // The releases are OCI layouts in the bench's folder.
      '--allow-local-releases',
      '--cache-dir', join(b.dir, 'cache'),
      '--leader-election-namespace', 'kindling-system',
    ],
  });
  b.processes.push(proc);
  await eventually(`${name} to start`, () => Promise.resolve(proc.guardPid !== undefined && !Number.isNaN(childPid(proc.guardPid)) ? true : undefined), 10_000, 20);
  return { proc, port, pid: childPid(proc.guardPid as number), spawnedAt };
}

interface TokenSecretSpec {
  pool: string;
  hash: string;
  config: unknown[];
  release: string;
}

async function createTokenSecret(b: Bench, { pool, hash, config, release }: TokenSecretSpec): Promise<string> {
  const name = tokenSecretName(pool, hash);
  await b.core.createNamespacedSecret({
    namespace: NS,
    body: {
      metadata: { name, namespace: NS, labels: { [LABELS.tokenSecret]: 'true', [LABELS.nodePool]: pool, [LABELS.configHash]: hash } },
      stringData: { [SECRET_KEYS.release]: release, [SECRET_KEYS.config]: JSON.stringify(config), [SECRET_KEYS.pool]: `${NS}/${pool}` },
    },
  });
  return name;
}

async function mintedToken(b: Bench, name: string): Promise<string> {
  return eventually(`a token in ${name}`, async () => {
    const data = (await b.core.readNamespacedSecret({ name, namespace: NS })).data?.[SECRET_KEYS.token];
    return data === undefined ? undefined : Buffer.from(data, 'base64').toString();
  }, 120_000, 200);
}

function ignitionHeaders(token: string, pool: string, hash: string): Record<string, string> {
  return { Authorization: `Bearer ${token}`, [IGNITION_HEADERS.nodePool]: `${NS}/${pool}`, [IGNITION_HEADERS.targetConfigVersionHash]: hash, Accept: ACCEPT };
}

async function setUp(): Promise<Bench> {
  const dir = await mkdtemp(join(tmpdir(), 'bench-ignition-'));
  const cluster = await startCluster({ name: 'mgmt', controllerManager: false });
  const core = cluster.kubeConfig.makeApiClient(k8s.CoreV1Api);
  for (const name of [NS, 'kindling-system']) await core.createNamespace({ body: { metadata: { name } } });
  const ca = await createCertificateAuthority('ignition serving CA');
  const serving = await ca.issue({ commonName: 'ignition', dnsNames: ['localhost'], ipAddresses: ['127.0.0.1'], usage: 'server' });
  await writeFile(join(dir, 'tls.crt'), serving.certPem);
  await writeFile(join(dir, 'tls.key'), serving.keyPem);
  await writeFile(join(dir, 'signing.pem'), ecKeyPem());
  // The shared part of every payload lives in the release, built with the release tool as an operator would.
  const bulk: Record<string, Record<string, unknown>> = OPTS.releaseKib > 0 ? { '20-bulk.json': { ignition: { version: '3.2.0' }, storage: { files: [{ path: '/opt/kindling/base.bin', mode: 420, contents: { source: bulkSource(OPTS.releaseKib * KiB) } }] } } } : {};
  const releases = { small: '', bulk: '' };
  for (const [name, fragments] of [['small', BASE_FRAGMENTS], ['bulk', { ...BASE_FRAGMENTS, ...bulk }]] as const) {
    const folder = await writeReleaseFolder(join(dir, `release-src-${name}`), undefined, fragments);
    await run(process.execPath, [KINDLING, 'release', 'build', folder, '--output', join(dir, `release-${name}`), '--tag', 'v1'], { timeout: 60_000 });
    releases[name] = `oci:${join(dir, `release-${name}`)}:v1`;
  }
  return { dir, cluster, core, ca: ca.certPem, releases, processes: [] };
}

interface Case {
  name: string;
  headers: Record<string, string>;
  token: string;
  payload: Buffer;
  nginxPort: number;
}

interface Throughput {
  name: string;
  payloadBytes: number;
  server: WrkResult;
  nginx: WrkResult;
}

/** A token Secret for the case, and the payload bytes the server answers once it is warm. */
async function warmCase(b: Bench, server: Server, name: 'small' | 'bulk'): Promise<Case> {
  const pool = `bench-${name}`;
  const hash = 'warm0001';
  const token = await mintedToken(b, await createTokenSecret(b, { pool, hash, config: [machineConfig('99-bench-motd', '/etc/motd', 0)], release: b.releases[name] }));
  const headers = ignitionHeaders(token, pool, hash);
  const warm = await eventually(`a 200 from the ignition server (${name})`, async () => {
    const r = await get({ port: server.port, ca: b.ca, headers, keepBody: true });
    return r.status === 200 ? r : undefined;
  }, 120_000, 100);
  return { name, headers, token, payload: warm.body as Buffer, nginxPort: await freePort() };
}

async function startNginx(b: Bench, cases: Case[]): Promise<void> {
  const ndir = join(b.dir, 'nginx');
  const sites: NginxSite[] = [];
  for (const c of cases) {
    const root = join(ndir, `html-${c.name}`);
    await mkdir(root, { recursive: true });
    await writeFile(join(root, 'ignition'), c.payload);
    await chmod(join(root, 'ignition'), 0o644);
    sites.push({ port: c.nginxPort, token: c.token, root });
  }
  await writeFile(join(ndir, 'nginx.conf'), nginxConf(ndir, sites));
  b.processes.push(new ManagedProcess({ name: 'nginx', command: NGINX, args: ['-c', join(ndir, 'nginx.conf'), '-p', ndir, '-e', join(ndir, 'error.log')], logFile: join(ndir, 'stdout.log') }));
}

/** nginx must answer the same bytes to the token, and 401 to another. */
async function checkNginx(b: Bench, c: Case): Promise<void> {
  const fromNginx = await eventually('a 200 from nginx', async () => {
    const r = await get({ port: c.nginxPort, ca: b.ca, headers: c.headers, keepBody: true });
    return r.status === 200 ? r : undefined;
  }, 10_000, 50);
  if (!c.payload.equals(fromNginx.body as Buffer)) throw new Error(`nginx does not serve the same bytes (${c.name})`);
  const refused = await get({ port: c.nginxPort, ca: b.ca, headers: { ...c.headers, Authorization: 'Bearer wrong' } });
  if (refused.status !== 401) throw new Error(`nginx answered ${refused.status} to a wrong token`);
}

/** Phase 1: the same payload bytes from the ignition server and from nginx, 256 connections each. */
async function throughput(b: Bench, server: Server): Promise<Throughput[]> {
  const cases = [await warmCase(b, server, 'small'), await warmCase(b, server, 'bulk')];
  await startNginx(b, cases);
  const results: Throughput[] = [];
  for (const c of cases) {
    await checkNginx(b, c);
    const serverResult = await wrk(server.port, c.headers);
    const nginxResult = await wrk(c.nginxPort, c.headers);
    results.push({ name: c.name, payloadBytes: c.payload.length, server: serverResult, nginx: nginxResult });
  }
  return results;
}

interface MemoryResult {
  tokens: number;
  payloads: number;
  payloadBytes: number;
  configSecretBytes: number;
  rssBeforeBytes: number;
  rssAfterBytes: number;
  loadS: number;
  /** A token and its headers, to time the restart with. */
  probe: Record<string, string>;
}

/** Phase 2: 100 configs × 10 pools, each token fetched once so every payload is generated and cached. */
async function memory(b: Bench, server: Server): Promise<MemoryResult> {
  const rssBeforeBytes = vmRssBytes(server.pid);
  const started = performance.now();
  const jobs: { pool: string; hash: string; name: string }[] = [];
  let configSecretBytes = 0;
  for (let i = 0; i < OPTS.configs; i++) {
    const hash = `c${String(i).padStart(4, '0')}`;
    const config = [machineConfig(`50-bulk-${i}`, `/opt/bench/${hash}.bin`, OPTS.configKib)];
    configSecretBytes = JSON.stringify(config).length;
    for (let j = 0; j < OPTS.secretsPerConfig; j++) jobs.push({ pool: `p${j}`, hash, name: tokenSecretName(`p${j}`, hash) });
    await inBatches(jobs.slice(-OPTS.secretsPerConfig), OPTS.secretsPerConfig, (job) => createTokenSecret(b, { pool: job.pool, hash: job.hash, config, release: b.releases.bulk }));
  }
  let payloadBytes = 0;
  const seen = new Set<string>();
  let probe: Record<string, string> = {};
  await inBatches(jobs, 8, async (job) => {
    const headers = ignitionHeaders(await mintedToken(b, job.name), job.pool, job.hash);
    const r = await eventually(`a 200 for ${job.name}`, async () => {
      const reply = await get({ port: server.port, ca: b.ca, headers });
      return reply.status === 200 ? reply : undefined;
    }, 120_000, 200);
    if (!seen.has(job.hash)) payloadBytes += r.bytes;
    seen.add(job.hash);
    probe = headers;
  });
  const loadS = (performance.now() - started) / 1000;
  // Let the garbage of generation settle (bounded) before sampling, as a long-running server would.
  await new Promise((r) => setTimeout(r, 10_000));
  return { tokens: jobs.length, payloads: seen.size, payloadBytes, configSecretBytes, rssBeforeBytes, rssAfterBytes: vmRssBytes(server.pid), loadS, probe };
}

interface RestartResult {
  firstAnswerMs: number;
  firstByteMs: number;
  firstRequestTtfbMs: number;
  attempts: number;
  generatedAfterRestart: number;
}

/** Phase 3: stop, start on the same cache directory, and poll until the first 200 byte arrives. */
async function restart(b: Bench, server: Server, probe: Record<string, string>): Promise<RestartResult> {
  await server.proc.stop();
  const logFile = join(b.dir, 'server-restarted.log');
  const next = await startServer(b, 'server-restarted');
  let attempts = 0;
  let firstAnswerAt: number | undefined;
  let answered = false;
  // A server that dies while starting fails the phase at once instead of after the polling deadline.
  const died = next.proc.exited.then((code) => (answered ? undefined : Promise.reject(new Error(`the restarted server exited with code ${code} after ${fmt((performance.now() - next.spawnedAt) / 1000, 1)} s without answering 200`))));
  const polled = eventually('the first 200 after the restart', async () => {
    attempts++;
    const r = await get({ port: next.port, ca: b.ca, headers: probe });
    firstAnswerAt ??= r.firstByteAt;
    return r.status === 200 ? r : undefined;
  }, 600_000, 10);
  const first = await Promise.race([polled, died.then(() => polled)]).catch((err: unknown) => {
    throw new Error(`no 200 after the restart; the server's log ends with:\n${next.proc.tail(10)}`, { cause: err });
  }).finally(() => (answered = true));
  const firstByteMs = first.firstByteAt - next.spawnedAt;
  const generatedAfterRestart = readFileSync(logFile, 'utf8').split('Generated a payload').length - 1;
  return { firstAnswerMs: (firstAnswerAt ?? Number.NaN) - next.spawnedAt, firstByteMs, firstRequestTtfbMs: first.ttfbMs, attempts, generatedAfterRestart };
}

const fmt = (n: number, digits = 0): string => n.toFixed(digits);
const mib = (n: number): string => `${fmt(n / MiB, 1)} MiB`;

function reportThroughput(ts: Throughput[]): void {
  const row = (name: string, w: WrkResult): string => `| ${name.padEnd(44)} | ${fmt(w.requestsPerS).padStart(7)} | ${fmt(w.p50Ms, 1).padStart(7)} | ${fmt(w.p99Ms, 1).padStart(7)} | ${String(w.requests).padStart(8)} | ${String(w.non2xx).padStart(7)} |`;
  out('');
  out(`${availableParallelism()} cores, shared by wrk, the server, nginx and the test bed; wrk -t2 -c256 -d${OPTS.durationS}s --latency over TLS (same cert), keep-alive`);
  out('the ignition server has no cluster/worker mode: one Node process (one core at most); nginx: worker_processes auto');
  out(`| ${'warm /ignition'.padEnd(44)} |   req/s |  p50 ms |  p99 ms | requests | non-2xx |`);
  out(`|${'-'.repeat(46)}|---------|---------|---------|----------|---------|`);
  for (const t of ts) {
    out(row(`kindling ignition-server, ${t.payloadBytes} B payload`, t.server));
    out(row(`nginx 1.22, same ${t.payloadBytes} B`, t.nginx));
  }
  for (const t of ts) {
    out(`${t.payloadBytes} B payload: ratio ignition-server ÷ nginx req/s = ${fmt(t.server.requestsPerS / t.nginx.requestsPerS, 3)}; p99 ${fmt(t.server.p99Ms, 1)} ms vs ${fmt(t.nginx.p99Ms, 1)} ms; socket errors: server ${t.server.errors}, nginx ${t.nginx.errors}`);
  }
}

function reportMemory(m: MemoryResult): void {
  out('');
  out(`memory: ${m.tokens} live tokens over ${m.payloads} distinct payloads of ${mib(m.payloadBytes / Math.max(1, m.payloads))} each (config JSON in each token Secret: ${fmt(m.configSecretBytes / KiB)} KiB), each token fetched once`);
  out(`  VmRSS of the ignition-server process: ${mib(m.rssBeforeBytes)} before loading, ${mib(m.rssAfterBytes)} after (creating + minting + fetching took ${fmt(m.loadS, 1)} s)`);
}

function reportRestart(tokens: number, r: RestartResult): void {
  out('');
  out(`restart on the persisted cache dir with ${tokens} token Secrets live (spawn of node bin/kindling.js →):`);
  out(`  first answer of any status: ${fmt(r.firstAnswerMs)} ms; first byte of a 200 /ignition: ${fmt(r.firstByteMs)} ms`);
  out(`  (that request's own TTFB ${fmt(r.firstRequestTtfbMs, 1)} ms; ${r.attempts} polls, 10 ms apart; payloads generated after the restart: ${r.generatedAfterRestart})`);
}

async function main(): Promise<void> {
  const b = await setUp();
  try {
    const server = await startServer(b, 'server');
    reportThroughput(await throughput(b, server));
    if (OPTS.skipMemory) return;
    const m = await memory(b, server);
    reportMemory(m);
    reportRestart(m.tokens, await restart(b, server, m.probe));
  } finally {
    for (const p of b.processes.reverse()) await p.stop();
    await b.cluster.stop();
    if (process.env.KEEP_BENCH_DIR === undefined) await rm(b.dir, { recursive: true, force: true });
  }
}

await main();
