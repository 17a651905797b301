/**
 * Helpers shared by the tests (keys, a manual clock, release folders) and the real ignition server as a process
 * for every test and benchmark that needs one; never imported by production code.
 */
import { generateKeyPairSync } from 'node:crypto';
import { get as httpGet } from 'node:http';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Clock } from '../../support/src/timers.js';
import { createCertificateAuthority } from '../../test/bed/src/pki.js';
import { freePort, ManagedProcess, waitForPort } from '../../test/bed/src/index.js';
import { buildRelease, writeLayoutDir } from '../src/release/build.js';
import { loadSigningKey, type TokenAuthority, type TokenClaims } from '../src/tokens.js';
import { withJemalloc } from '../../support/src/malloc.js';

export const KINDLING_BIN = fileURLToPath(new URL('../../../bin/kindling.js', import.meta.url));

/** A fresh PKCS#8 PEM EC private key. */
export function ecKeyPem(curve = 'P-256'): string {
  return generateKeyPairSync('ec', { namedCurve: curve })
    .privateKey.export({ type: 'pkcs8', format: 'pem' })
    .toString();
}

/** A clock that only moves when told. */
export function manualClock(start = Date.UTC(2026, 10, 23, 8)): Clock & { advance: (ms: number) => void } {
  let now = start;
  return {
    now: () => now,
    setTimeout: (fn, ms) => setTimeout(fn, ms),
    clearTimeout: (h) => clearTimeout(h as NodeJS.Timeout),
    advance: (ms) => void (now += ms),
  };
}

export const RELEASE_MANIFEST = { version: '4.18.2', kubeletVersion: 'v1.36.3', osImage: 'Kindling Linux 42' };

/** Base fragments of the test release: a file, a unit and a directory, in two fragments. */
export const BASE_FRAGMENTS: Record<string, Record<string, unknown>> = {
  '00-base.json': {
    ignition: { version: '3.2.0' },
    storage: {
      files: [{ path: '/etc/kindling/release', mode: 420, contents: { source: 'data:,4.18.2%0A' } }],
      directories: [{ path: '/etc/kindling', mode: 493 }],
    },
  },
  '10-kubelet.json': {
    ignition: { version: '3.0.0' },
    systemd: {
      units: [
        {
          name: 'kubelet.service',
          enabled: true,
          contents:
            '[Unit]\nDescription=kubelet\n[Service]\nExecStart=/usr/bin/kubelet --config=/etc/kubernetes/kubelet.conf\n[Install]\nWantedBy=multi-user.target\n',
        },
      ],
    },
  },
};

/** Writes a release folder (release.json + ignition/*.json) and returns its path. */
export async function writeReleaseFolder(
  dir: string,
  manifest: object = RELEASE_MANIFEST,
  fragments = BASE_FRAGMENTS,
): Promise<string> {
  await mkdir(join(dir, 'ignition'), { recursive: true });
  await writeFile(join(dir, 'release.json'), JSON.stringify(manifest));
  for (const [name, config] of Object.entries(fragments))
    await writeFile(join(dir, 'ignition', name), JSON.stringify(config));
  return dir;
}

/** Collects a logger's lines (JSON strings) in memory. */
export function memoryDestination(): { lines: string[]; write: (line: string) => void } {
  const lines: string[] = [];
  return { lines, write: (line: string) => void lines.push(line) };
}

/** How often a serving thread samples its loop's delay: the benchmark's trace reads how late the samples ran. */
export { LOOP_RESOLUTION_MS } from '../src/serving/pauses.js';

/** The text a running ignition server's ops port serves at /metrics (Prometheus exposition format). */
export function opsMetrics(opsPort: number): Promise<string> {
  return new Promise((resolve, reject) => {
    httpGet(`http://127.0.0.1:${opsPort}/metrics`, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => resolve(body));
    }).on('error', reject);
  });
}

/** What an ignition server is given: a serving certificate (and its CA), a signing key, release images. */
export interface IgnitionServerFiles {
  dir: string;
  caPem: string;
  caFile: string;
  certFile: string;
  keyFile: string;
  signingKeyFile: string;
  /** Release images as OCI layouts, by tag: `oci:<dir>/release-<tag>:<tag>`, what a NodePool's release names. */
  releases: Record<string, string>;
}

const VERSION_TAG = /^v?(\d+\.\d+\.\d+)$/;

/**
 * Writes them into `dir`: one release image per tag, built by the code of `kindling release build`. A tag that
 * is a Kubernetes version (1.35.0) is a release of that kubelet version, as the NodePool controller reads it.
 */
export async function writeIgnitionServerFiles(
  dir: string,
  tags: readonly string[] = ['v1'],
): Promise<IgnitionServerFiles> {
  await mkdir(dir, { recursive: true });
  const file = (name: string): string => join(dir, name);
  const ca = await createCertificateAuthority('ignition serving CA');
  const serving = await ca.issue({
    commonName: 'ignition',
    dnsNames: ['localhost'],
    ipAddresses: ['127.0.0.1'],
    usage: 'server',
  });
  const release = async (tag: string): Promise<void> => {
    const version = VERSION_TAG.exec(tag)?.[1];
    const manifest = version === undefined ? RELEASE_MANIFEST : { ...RELEASE_MANIFEST, kubeletVersion: `v${version}` };
    await writeLayoutDir(
      await buildRelease(await writeReleaseFolder(file(`release-src-${tag}`), manifest), tag),
      file(`release-${tag}`),
    );
  };
  await Promise.all([
    writeFile(file('ca.pem'), ca.certPem),
    writeFile(file('tls.crt'), serving.certPem),
    writeFile(file('tls.key'), serving.keyPem),
    writeFile(file('signing.pem'), ecKeyPem()),
    ...tags.map(release),
  ]);
  const releases = Object.fromEntries(tags.map((tag) => [tag, `oci:${file(`release-${tag}`)}:${tag}`]));
  return {
    dir,
    caPem: ca.certPem,
    caFile: file('ca.pem'),
    certFile: file('tls.crt'),
    keyFile: file('tls.key'),
    signingKeyFile: file('signing.pem'),
    releases,
  };
}

export interface IgnitionServerOptions {
  kubeconfigPath: string;
  /** Namespace of the token Secrets it serves. */
  namespace: string;
  /** Names its log (`<dir>/<name>.log`) and payload cache (`<dir>/cache-<name>`); default `ignition-server`. */
  name?: string;
  /** Elect a leader through a Lease in this namespace; without it, the one replica leads from the start. */
  leaderElectionNamespace?: string;
  /** Flags of node itself, before the script (`--heapsnapshot-signal=…`). */
  nodeArgs?: string[];
  /** More flags of `kindling ignition-server` (`--token-ttl`, `--log-level`). */
  args?: string[];
}

/** The script and flags of one `kindling ignition-server` replica on `files` (leader election and extras left to the caller). */
export function ignitionServerArgs(
  files: IgnitionServerFiles,
  opts: { kubeconfigPath: string; namespace: string; port: number; opsPort: number; cacheDir: string },
): string[] {
  return [
    KINDLING_BIN,
    'ignition-server',
    '--kubeconfig',
    opts.kubeconfigPath,
    '--namespaces',
    opts.namespace,
    // The test releases are OCI layouts on this machine.
    '--allow-local-releases',
    '--serving-address',
    `127.0.0.1:${opts.port}`,
    '--ops-address',
    `127.0.0.1:${opts.opsPort}`,
    '--tls-cert-file',
    files.certFile,
    '--tls-key-file',
    files.keyFile,
    '--signing-key-file',
    files.signingKeyFile,
    '--cache-dir',
    opts.cacheDir,
  ];
}

/** The real `kindling ignition-server` as its own process, serving HTTPS on loopback. */
export class IgnitionServer {
  readonly name: string;
  readonly port: number;
  readonly opsPort: number;
  readonly log: string;
  readonly files: IgnitionServerFiles;
  #args: string[];
  #proc: ManagedProcess | undefined;
  #authority: Promise<TokenAuthority> | undefined;

  private constructor(
    files: IgnitionServerFiles,
    opts: IgnitionServerOptions,
    ports: { port: number; opsPort: number },
  ) {
    this.files = files;
    this.name = opts.name ?? 'ignition-server';
    this.port = ports.port;
    this.opsPort = ports.opsPort;
    this.log = join(files.dir, `${this.name}.log`);
    const election =
      opts.leaderElectionNamespace === undefined
        ? ['--leader-elect=false']
        : ['--leader-election-namespace', opts.leaderElectionNamespace];
    const args = ignitionServerArgs(files, { ...opts, ...ports, cacheDir: join(files.dir, `cache-${this.name}`) });
    this.#args = [...(opts.nodeArgs ?? []), ...args, ...election, ...(opts.args ?? [])];
  }

  /** Starts one replica on `files`; several replicas of the same files share the key, certificate and releases. */
  static async spawn(files: IgnitionServerFiles, opts: IgnitionServerOptions): Promise<IgnitionServer> {
    const server = new IgnitionServer(files, opts, { port: await freePort(), opsPort: await freePort() });
    await server.start();
    return server;
  }

  /** `127.0.0.1:<port>`, a NodePool controller's --ignition-endpoint. */
  get endpoint(): string {
    return `127.0.0.1:${this.port}`;
  }

  /** Base URL of /ignition. */
  get url(): string {
    return `https://${this.endpoint}`;
  }

  get caPem(): string {
    return this.files.caPem;
  }

  /** The serving CA in a file, for --ignition-ca-file. */
  get caFile(): string {
    return this.files.caFile;
  }

  get releases(): Record<string, string> {
    return this.files.releases;
  }

  /** The first release image. */
  get release(): string {
    return Object.values(this.files.releases)[0] ?? '';
  }

  /** The process running now. */
  get proc(): ManagedProcess {
    if (!this.#proc) throw new Error(`${this.name} was never started`);
    return this.#proc;
  }

  /** Starts the process (again, after stop(): the same ports, key and payload cache, as a restarted Pod). */
  async start(): Promise<void> {
    this.#proc = new ManagedProcess({
      name: this.name,
      command: process.execPath,
      args: this.#args,
      logFile: this.log,
      env: withJemalloc(process.env),
    });
    // The ops port opens only once the token Secrets are listed and /ignition serves.
    await waitForPort(this.opsPort, this.#proc, 30_000);
  }

  async stop(): Promise<void> {
    await this.#proc?.stop();
  }

  /** The claims of a token this server's key signed; undefined for any other string. */
  verify(token: string): Promise<TokenClaims | undefined> {
    this.#authority ??= loadSigningKey(this.files.signingKeyFile).then((key) => key.authority);
    return this.#authority.then((a) => a.verify(token));
  }
}

/** Writes fresh files into `opts.dir` (releases of the given tags, default `v1`) and starts one replica on them. */
export async function runIgnitionServer(
  opts: IgnitionServerOptions & { dir: string; releases?: readonly string[] },
): Promise<IgnitionServer> {
  return IgnitionServer.spawn(await writeIgnitionServerFiles(opts.dir, opts.releases), opts);
}
