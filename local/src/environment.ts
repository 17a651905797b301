/**
 * What the local environment prepares besides clusters: the ignition server's serving certificate and
 * token-signing key (kept in the state folder, so a restart serves the same tokens), a real OCI registry
 * (Debian `docker-registry`) holding the sample release images built by Kindling's release tool, and the
 * sample tenant (local/samples.yaml; its workload in the guest is workload.ts).
 */
import { access, mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import { generateKeyPairSync } from 'node:crypto';
import { get as httpsGet } from 'node:https';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as k8s from '#k8s';
import { createApplier } from '../../support/src/apply.js';
import { parseManifests } from '../../support/src/manifests.js';
import { loadCertificateAuthority } from '../../test/bed/src/pki.js';
import { buildRelease, pushRelease } from '../../ignition-server/src/release/build.js';
import { keptPort, ManagedProcess, waitForPort, type Cluster } from '../../test/bed/src/index.js';
import { SIMULATION } from '../../test/bed/src/keys.js';
import { sleep } from '../../support/src/timers.js';

const LOCAL_DIR = fileURLToPath(new URL('../../../local/', import.meta.url));
/** 1.36.3-broken-kubelet is broken on purpose: its kubelet config has a value the kubelet refuses (maxPods -1),
 * so a host updated to it stops being Ready and the agent's health gate rolls it back. A pre-release tag: a pool
 * takes it only with spec.release.allowPrerelease. 1.37.0 is newer than the guest's control plane (1.36.3), so
 * `kindling plan` lists it as an upgrade target the skew policy refuses. */
export const SAMPLE_RELEASES = ['1.36.2', '1.36.3', '1.36.3-broken-kubelet', '1.37.0'] as const;

const exists = (p: string): Promise<boolean> =>
  access(p).then(
    () => true,
    () => false,
  );

export interface IgnitionFiles {
  port: number;
  caFile: string;
  certFile: string;
  keyFile: string;
  signingKeyFile: string;
  cacheDir: string;
  /**
   * Where each replica serves and caches (index = replica). Replica 0's are `port` and `cacheDir`, the endpoint
   * pools and the upgrader are given; the others serve on their own loopback port (Node cannot share one
   * listening port between processes) and keep their own cache, since two processes pruning one folder race.
   */
  replicas: { port: number; cacheDir: string }[];
}

/** Replica i's port and cache folder (i ≥ 1), kept in the folder like replica 0's. */
async function replicaServing(dir: string, replica: number): Promise<{ port: number; cacheDir: string }> {
  const own = join(dir, `replica-${replica}`);
  await mkdir(join(own, 'cache'), { recursive: true });
  return { port: await keptPort(join(own, 'port')), cacheDir: join(own, 'cache') };
}

/**
 * The ignition server's port, certificate and signing key (shared by every replica, as a Deployment's Pods
 * share a Secret); made once, then reused so hosts and tokens stay valid.
 */
export async function ignitionFiles(stateDir: string, mgmt: Cluster, replicas = 1): Promise<IgnitionFiles> {
  const dir = join(stateDir, 'ignition-server');
  await mkdir(join(dir, 'cache'), { recursive: true });
  const files: IgnitionFiles = {
    port: 0,
    caFile: join(dir, 'ca.crt'),
    certFile: join(dir, 'tls.crt'),
    keyFile: join(dir, 'tls.key'),
    signingKeyFile: join(dir, 'signing-key.pem'),
    cacheDir: join(dir, 'cache'),
    replicas: [],
  };
  files.port = await keptPort(join(dir, 'port'));
  files.replicas = [{ port: files.port, cacheDir: files.cacheDir }];
  for (let i = 1; i < replicas; i++) files.replicas.push(await replicaServing(dir, i));
  if (await exists(files.signingKeyFile)) return files;
  const ca = await loadCertificateAuthority(mgmt.ca);
  const serving = await ca.issue({
    commonName: 'kindling-ignition-server',
    ipAddresses: ['127.0.0.1'],
    dnsNames: ['localhost'],
    usage: 'server',
  });
  const signing = generateKeyPairSync('ec', { namedCurve: 'P-256' })
    .privateKey.export({ type: 'pkcs8', format: 'pem' })
    .toString();
  await writeFile(files.caFile, mgmt.ca.certPem);
  await writeFile(files.certFile, serving.certPem);
  await writeFile(files.keyFile, serving.keyPem, { mode: 0o600 });
  await writeFile(files.signingKeyFile, signing, { mode: 0o600 });
  return files;
}

/**
 * The files of the ports clients were given, which never move (the ignition server's and its replicas', the
 * registry's, the extension's): reserved before the clusters start (reserveKept), which come up first and may
 * have to draw a port anew.
 */
export async function fixedPortFiles(stateDir: string): Promise<string[]> {
  const ignition = join(stateDir, 'ignition-server');
  const replicas = (await readdir(ignition).catch(() => [])).filter((name) => name.startsWith('replica-'));
  return [
    join(ignition, 'port'),
    ...replicas.map((name) => join(ignition, name, 'port')),
    join(stateDir, 'registry', 'port'),
    join(stateDir, 'extension', 'port'),
  ];
}

export interface LocalRegistry {
  /** host:port of the registry, for image references. */
  host: string;
  process: ManagedProcess;
}

/**
 * A real OCI registry over TLS (certificate from the management cluster's CA, which the ignition server is
 * told to trust), with its storage, port and certificate kept in the state folder. Pulls and pushes are
 * anonymous: the pull-secret and token-auth paths are covered by the ignition server's own tests. On loopback
 * unless given an `address` (the install test serves it where the ignition server's Pods reach it).
 */
export async function startRegistry(stateDir: string, mgmt: Cluster, address = '127.0.0.1'): Promise<LocalRegistry> {
  const dir = join(stateDir, 'registry');
  await mkdir(join(dir, 'data'), { recursive: true });
  const port = await keptPort(join(dir, 'port'));
  if (!(await exists(join(dir, 'tls.key')))) {
    const ca = await loadCertificateAuthority(mgmt.ca);
    const serving = await ca.issue({
      commonName: 'kindling-local-registry',
      ipAddresses: [address],
      dnsNames: ['localhost'],
      usage: 'server',
    });
    await writeFile(join(dir, 'tls.crt'), serving.certPem);
    await writeFile(join(dir, 'tls.key'), serving.keyPem, { mode: 0o600 });
  }
  const config = [
    'version: 0.1',
    'log: {level: warn}',
    `storage: {filesystem: {rootdirectory: ${join(dir, 'data')}}}`,
    `http: {addr: "${address}:${port}", secret: kindling-local, tls: {certificate: ${join(dir, 'tls.crt')}, key: ${join(dir, 'tls.key')}}}`,
  ].join('\n');
  await writeFile(join(dir, 'config.yml'), `${config}\n`);
  await mkdir(join(stateDir, 'logs'), { recursive: true });
  const proc = new ManagedProcess({
    name: 'docker-registry',
    command: '/usr/bin/docker-registry',
    args: ['serve', join(dir, 'config.yml')],
    logFile: join(stateDir, 'logs', 'registry.log'),
  });
  await waitForPort(port, proc, undefined, address);
  const host = `${address}:${port}`;
  await answersAsRegistry(host, mgmt.ca.certPem, proc);
  return { host, process: proc };
}

/**
 * Until the registry itself answers on its port: its API's version header over TLS with the cluster's CA. An open
 * port alone may be another process's (a restart once pushed the releases to a Cluster API webhook, HTTP 404).
 */
async function answersAsRegistry(host: string, caPem: string, proc: ManagedProcess): Promise<void> {
  const asked = (): Promise<string | undefined> =>
    new Promise((resolve) => {
      const req = httpsGet(`https://${host}/v2/`, { ca: caPem, timeout: 2_000 }, (res) => {
        res.resume();
        resolve(res.headers['docker-distribution-api-version']?.toString());
      });
      req.on('timeout', () => req.destroy()).on('error', () => resolve(undefined));
    });
  for (const deadline = Date.now() + 10_000; Date.now() < deadline; await sleep(100)) {
    if (!proc.alive) throw new Error(`docker-registry exited: ${proc.tail()}`);
    if ((await asked()) === 'registry/2.0') return;
  }
  throw new Error(
    `the registry did not answer on ${host} within 10 s (another process may hold the port): ${proc.tail()}`,
  );
}

/**
 * Builds the sample releases (local/releases/<version>) and pushes them to the registry; returns version →
 * reference. The build is reproducible (fixed timestamps and owners), so pushing again on a restart stores the
 * same digests and regenerates nothing.
 */
export async function sampleReleases(registry: LocalRegistry, caPem: string): Promise<Record<string, string>> {
  // At once: each is a small build and a few uploads, so the start waits for the slowest, not the sum.
  const pushed = await Promise.all(
    SAMPLE_RELEASES.map(async (version) => {
      const image = await buildRelease(join(LOCAL_DIR, 'releases', version), version);
      await pushRelease(image, registry.host, 'kindling/release', { ca: caPem, tag: version });
      return [version, `${registry.host}/kindling/release:${version}`] as const;
    }),
  );
  return Object.fromEntries(pushed);
}

/** Applies the sample tenant (server-side apply, so a restart changes nothing the user has not changed). */
export async function applySamples(
  mgmt: Cluster,
  guest: Cluster,
  opts: { namespace: string; release: string },
): Promise<void> {
  const applier = createApplier(mgmt.kubeConfig, SIMULATION.fieldManager);
  const secret = {
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: { name: 'guest-admin', namespace: opts.namespace },
    stringData: { value: guest.kubeconfigYaml },
  } as k8s.KubernetesObject;
  await applier.apply(secret);
  const text = (await readFile(join(LOCAL_DIR, 'samples.yaml'), 'utf8'))
    .replaceAll('${NAMESPACE}', opts.namespace)
    .replaceAll('${RELEASE}', opts.release);
  await createMissing(mgmt.kubeConfig, parseManifests(text, 'samples.yaml'));
}

/** Create-only, in order: on a restart the user's own changes (a new release, a scale) are kept. */
export async function createMissing(kc: k8s.KubeConfig, objects: k8s.KubernetesObject[]): Promise<void> {
  const client = k8s.KubernetesObjectApi.makeApiClient(kc);
  for (const obj of objects) {
    await client.create(obj).catch((err: { code?: number }) => {
      if (err.code !== 409) throw err;
    });
  }
}
