/**
 * The references of the ignition-server benchmark, each given the same TLS certificate, the same bytes and the
 * same check (the bearer token looked up, the NodePool header compared with the token's pool): a Go
 * `net/http` server built from test/bench/goref (standard library only), nginx (Debian nginx-light), and plain
 * `node:https` one process per core (node-reference.ts), the ceiling of Kindling's own runtime (or a thread per
 * core, as Kindling's serving threads run).
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { chmod, mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { childPids, freePort, ManagedProcess } from '../bed/src/index.js';

const run = promisify(execFile);
const GO_SOURCES = fileURLToPath(new URL('../../../test/bench', import.meta.url));
const NGINX = '/usr/sbin/nginx';
const NODE_REFERENCE = fileURLToPath(new URL('./node-reference.js', import.meta.url));

/** One token the references answer: its pool, and the file holding the bytes it is answered with. */
export interface Site {
  token: string;
  pool: string;
  payload: string;
}

export interface Reference {
  name: string;
  port: number;
  proc: ManagedProcess;
  /** PIDs whose CPU time is the reference's (nginx: master and workers). */
  pids(): number[];
}

/** The pid of a guarded command (the guard's only child). */
export function childPid(guardPid: number): number {
  const [kid] = childPids(guardPid);
  if (kid === undefined) throw new Error(`process ${guardPid} has no child`);
  return kid;
}

/** A process and its descendants. */
export function processTree(pid: number): number[] {
  return [pid, ...childPids(pid).flatMap(processTree)];
}

/**
 * Builds a Go program of test/bench into dir: the reference server (goref) or the storm client (gostorm). A
 * warm Go build cache makes this seconds.
 */
export async function buildGo(dir: string, name: 'goref' | 'gostorm'): Promise<string> {
  const bin = join(dir, name);
  await run('go', ['build', '-trimpath', '-o', bin, '.'], {
    cwd: join(GO_SOURCES, name),
    env: { ...process.env, GOTOOLCHAIN: 'local', CGO_ENABLED: '0', GOFLAGS: '-mod=mod' },
    timeout: 600_000,
  });
  return bin;
}

interface ReferenceOptions {
  dir: string;
  name: string;
  cert: string;
  key: string;
  sites: Site[];
}

/**
 * A reference server on a free port, answering `sites` (written beside its log): `command` and `script`, then
 * --addr, --cert, --key and --tokens (Go's flag package takes the double dash as node's parseArgs does).
 */
async function startReference(opts: ReferenceOptions, command: string, script: string[]): Promise<Reference> {
  const port = await freePort();
  const sites = join(opts.dir, `${opts.name}-sites.json`);
  await writeFile(sites, JSON.stringify(opts.sites));
  const proc = new ManagedProcess({
    name: opts.name,
    command,
    args: [...script, '--addr', `127.0.0.1:${port}`, '--cert', opts.cert, '--key', opts.key, '--tokens', sites],
    logFile: join(opts.dir, `${opts.name}.log`),
  });
  return { name: opts.name, port, proc, pids: () => processTree(childPid(proc.guardPid as number)) };
}

export const startGo = (opts: ReferenceOptions & { bin: string }): Promise<Reference> =>
  startReference(opts, opts.bin, []);

/** Plain node:https, a process per core, or with `threads` a worker thread per core in one process. */
export const startNode = (opts: ReferenceOptions & { threads?: boolean }): Promise<Reference> =>
  startReference(opts, process.execPath, [NODE_REFERENCE, ...(opts.threads === true ? ['--threads'] : [])]);

/** Copies each distinct payload file under root, named by its index, and returns the token → file map. */
async function nginxFiles(root: string, sites: Site[]): Promise<Map<string, string>> {
  const files = new Map<string, string>();
  const byPayload = new Map<string, string>();
  await mkdir(join(root, 'files'), { recursive: true });
  for (const s of sites) {
    let name = byPayload.get(s.payload);
    if (name === undefined) {
      name = `p${byPayload.size}`;
      byPayload.set(s.payload, name);
      await writeFile(join(root, 'files', name), readFileSync(s.payload));
      await chmod(join(root, 'files', name), 0o644);
    }
    files.set(s.token, name);
  }
  return files;
}

function nginxConf(
  dir: string,
  port: number,
  opts: { cert: string; key: string },
  maps: { file: string; pool: string },
): string {
  // Root runs workers as nobody, who cannot read a mkdtemp folder; a bench on loopback keeps them as root.
  const user = process.getuid?.() === 0 ? 'user root;\n' : '';
  return `${user}daemon off;
master_process on;
worker_processes auto;
pid ${join(dir, 'nginx.pid')};
error_log ${join(dir, 'error.log')} warn;
events { worker_connections 8192; }
http {
  access_log off;
  client_body_temp_path ${join(dir, 'client_body')};
  proxy_temp_path ${join(dir, 'proxy')};
  fastcgi_temp_path ${join(dir, 'fastcgi')};
  uwsgi_temp_path ${join(dir, 'uwsgi')};
  scgi_temp_path ${join(dir, 'scgi')};
  sendfile on;
  keepalive_requests 100000;
  map_hash_bucket_size 1024;
  map_hash_max_size 65536;
  map $http_authorization $ign_file { default ""; ${maps.file} }
  map $http_authorization $ign_pool { default ""; ${maps.pool} }
  map "$http_nodepool|$ign_pool" $ign_pool_ok { default 0; "~^[|]" 1; "~^([^|]+)[|]\\1$" 1; }
  server {
    listen 127.0.0.1:${port} ssl backlog=4096;
    ssl_certificate ${opts.cert};
    ssl_certificate_key ${opts.key};
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_prefer_server_ciphers on;
    ssl_conf_command Ciphersuites TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256;
    root ${join(dir, 'html')};
    location = /ignition {
      if ($ign_file = "") { return 401; }
      if ($ign_pool_ok = 0) { return 403; }
      default_type "application/vnd.coreos.ignition+json;version=3.3.0";
      add_header Cache-Control no-store;
      rewrite ^ /files/$ign_file break;
    }
  }
}
`;
}

export async function startNginx(opts: { dir: string; cert: string; key: string; sites: Site[] }): Promise<Reference> {
  const dir = join(opts.dir, 'nginx');
  const port = await freePort();
  const files = await nginxFiles(join(dir, 'html'), opts.sites);
  const quoted = (s: string): string => `"${s.replace(/["\\]/g, '\\$&')}"`;
  const file = opts.sites.map((s) => `${quoted(`Bearer ${s.token}`)} ${files.get(s.token) as string};`).join(' ');
  const pool = opts.sites.map((s) => `${quoted(`Bearer ${s.token}`)} ${quoted(s.pool)};`).join(' ');
  await writeFile(join(dir, 'nginx.conf'), nginxConf(dir, port, opts, { file, pool }));
  const proc = new ManagedProcess({
    name: 'nginx',
    command: NGINX,
    args: ['-c', join(dir, 'nginx.conf'), '-p', dir, '-e', join(dir, 'error.log')],
    logFile: join(dir, 'stdout.log'),
  });
  return { name: 'nginx', port, proc, pids: () => processTree(childPid(proc.guardPid as number)) };
}
