/**
 * The ignition server as it runs: two `kindling ignition-server` processes (one leader) against a real
 * apiserver, serving HTTPS, pulling the release from a real registry; hosts booting with the real Ignition
 * client (fetch then files stage into a scratch root) from a user-data stub in the Flow 1 format.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'node:https';
import { mkdir, mkdtemp, readFile, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { existsSync, readFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as k8s from '#k8s';
import {
  childPids,
  startCluster,
  freePort,
  installKindlingCrds,
  ManagedProcess,
  writeKubeconfigSecret,
  type Cluster,
} from '../../test/bed/src/index.js';
import { createCertificateAuthority, type CertificateAuthority } from '../../test/bed/src/pki.js';
import { ANNOTATIONS, IGNITION_HEADERS, LABELS, SECRET_KEYS } from '../../api/src/keys.js';
import { buildRelease, writeLayoutDir } from './release/build.js';
import { createValidator } from './payload/validate.js';
import { ecKeyPem, opsMetrics, writeReleaseFolder } from '../testing/index.js';
import { ensureNodePool, ownedTokenSecret } from '../testing/pools.js';
import { parsePullSecret } from './release/registry.js';
import { eventually } from '../../test/bed/src/eventually.js';
import { bootHost } from '../../local/src/providers/boot.js';
import { startRegistry, type RegistryFixture } from '../testing/registry-fixture.js';
import { pushRelease } from './release/build.js';

const NS = 'clusters';
/** A second namespace the replicas serve, and one they are not told. */
const NS2 = 'clusters-b';
const OUTSIDE = 'elsewhere';
const POOL = 'workers';
const KINDLING = fileURLToPath(new URL('../../../bin/kindling.js', import.meta.url));
const TTL_S = 8;

interface Replica {
  name: string;
  proc: ManagedProcess;
  port: number;
  opsPort: number;
  log: string;
}

function get(port: number, ca: string, headers: Record<string, string>): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const r = request({ host: '127.0.0.1', port, path: '/ignition', ca, headers, servername: 'localhost' }, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    r.on('error', reject);
    r.end();
  });
}

describe('ignition server on the test bed', { timeout: 180_000 }, () => {
  let cluster: Cluster;
  let guest: Cluster;
  let dir: string;
  let ca: CertificateAuthority;
  let core: k8s.CoreV1Api;
  let releaseRef: string;
  let otherRef: string;
  let layoutRef: string;
  let registry: RegistryFixture;
  const replicas: Replica[] = [];
  /** The token Secret of the first test, which the restart test serves again. */
  let booted: { name: string; hash: string };

  /** The V8 heap of a replica (node --heapsnapshot-signal), as text: what the process holds, after a full GC. */
  async function heapSnapshot(replica: Replica): Promise<string> {
    const guard = replica.proc.guardPid as number;
    const [pid = NaN] = childPids(guard);
    const heapDir = join(dir, `heap-${replica.name}`);
    const before = new Set(await readdir(heapDir));
    process.kill(pid, 'SIGUSR2');
    const file = await eventually('a heap snapshot', async () =>
      (await readdir(heapDir)).find((f) => !before.has(f) && f.endsWith('.heapsnapshot')),
    );
    // Written in place: done when its size stops changing.
    let size = -1;
    await eventually(
      'the heap snapshot written',
      async () => {
        const now = (await stat(join(heapDir, file))).size;
        const done = now > 0 && now === size;
        size = now;
        return done ? true : undefined;
      },
      60_000,
      500,
    );
    return readFile(join(heapDir, file), 'utf8');
  }

  const eventsOf = async (name: string, reason: string): Promise<k8s.CoreV1Event[]> =>
    (await core.listNamespacedEvent({ namespace: NS, fieldSelector: `involvedObject.name=${name},reason=${reason}` }))
      .items;

  async function startReplica(name: string): Promise<Replica> {
    const port = await freePort();
    const opsPort = await freePort();
    const log = join(dir, `${name}.log`);
    await mkdir(join(dir, `heap-${name}`), { recursive: true });
    const args = [
      '--heapsnapshot-signal=SIGUSR2',
      `--diagnostic-dir=${join(dir, `heap-${name}`)}`,
      KINDLING,
      'ignition-server',
      '--kubeconfig',
      cluster.kubeconfigPath,
      '--serving-address',
      `127.0.0.1:${port}`,
      '--ops-address',
      `127.0.0.1:${opsPort}`,
      '--tls-cert-file',
      join(dir, 'tls.crt'),
      '--tls-key-file',
      join(dir, 'tls.key'),
      '--signing-key-file',
      join(dir, 'signing.pem'),
      '--token-ttl',
      `${TTL_S}s`,
      '--namespaces',
      `${NS},${NS2}`,
      '--allowed-registries',
      registry.host,
      '--registry-ca-file',
      join(dir, 'registry-ca.pem'),
      '--cache-dir',
      join(dir, `cache-${name}`),
      '--leader-election-namespace',
      'kindling-system',
    ];
    const proc = new ManagedProcess({ name, command: process.execPath, args, logFile: log });
    await eventually(`${name} to serve`, async () =>
      (await get(port, ca.certPem, {})).status === 401 ? true : undefined,
    );
    // The ops port opens after the serving threads accept (once the component is up), so it is waited on too.
    await eventually(`${name}'s ops port`, () => opsMetrics(opsPort));
    return { name, proc, port, opsPort, log };
  }

  /**
   * A replica's answer once it knows the token: the leader's mint reaches each replica through its own watch,
   * so a replica that has not seen it yet answers 401 for a moment.
   */
  const answerOnceKnown = (r: Replica, token: string, hash: string, pool = POOL): Promise<number> =>
    eventually(`${r.name} to know the token`, async () => {
      const { status } = await get(r.port, ca.certPem, headers(token, hash, pool));
      return status === 401 ? undefined : status;
    });

  /**
   * The token Secret of a pool (created on `release` if need be; its cluster is the guest) for a config, as the
   * nodepool-controller writes it: named by the hash of its release and config, owned by the pool.
   */
  async function createTokenSecret(
    config: unknown[],
    opts: { namespace?: string; pool?: string; release?: string } = {},
  ): Promise<{ name: string; hash: string }> {
    const namespace = opts.namespace ?? NS;
    const release = opts.release ?? releaseRef;
    const pool = await ensureNodePool(cluster.kubeConfig, { namespace, name: opts.pool ?? POOL, release });
    const { hash, secret } = ownedTokenSecret(pool, release, config);
    await core.createNamespacedSecret({ namespace, body: secret });
    return { name: secret.metadata?.name as string, hash };
  }

  const readSecret = (name: string): Promise<k8s.V1Secret> => core.readNamespacedSecret({ name, namespace: NS });
  const dataOf = (s: k8s.V1Secret, key: string): string | undefined =>
    s.data?.[key] ? Buffer.from(s.data[key], 'base64').toString() : undefined;
  const tokenOf = async (name: string): Promise<string | undefined> =>
    dataOf(await readSecret(name), SECRET_KEYS.token);
  const headers = (token: string, hash: string, pool = POOL): Record<string, string> => ({
    authorization: `Bearer ${token}`,
    [IGNITION_HEADERS.nodePool]: `${NS}/${pool}`,
    [IGNITION_HEADERS.targetConfigVersionHash]: hash,
    accept: 'application/vnd.coreos.ignition+json;version=3.3.0, */*;q=0.1',
  });

  /** The user-data stub of Flow 1 step 3. */
  function stub(replica: Replica, token: string, hash: string): string {
    return JSON.stringify({
      ignition: {
        version: '3.2.0',
        config: {
          merge: [
            {
              source: `https://localhost:${replica.port}/ignition`,
              httpHeaders: [
                { name: 'Authorization', value: `Bearer ${token}` },
                { name: IGNITION_HEADERS.nodePool, value: `${NS}/${POOL}` },
                { name: IGNITION_HEADERS.targetConfigVersionHash, value: hash },
              ],
            },
          ],
        },
        security: {
          tls: {
            certificateAuthorities: [
              { source: `data:text/plain;base64,${Buffer.from(ca.certPem).toString('base64')}` },
            ],
          },
        },
      },
    });
  }

  /** Boots a host with the real Ignition client (fetch, then files into a scratch root), as the local hosts do. */
  async function boot(
    replica: Replica,
    token: string,
    hash: string,
    fetchTimeoutMs = 60_000,
  ): Promise<{ code: number; root: string; output: string }> {
    const root = join(await mkdtemp(join(dir, 'host-')), 'root');
    try {
      await bootHost({ root, userData: stub(replica, token, hash), fetchTimeoutMs });
      return { code: 0, root, output: '' };
    } catch (err) {
      return { code: 1, root, output: (err as Error).message };
    }
  }

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'ignition-server-'));
    cluster = await startCluster({ name: 'mgmt', controllerManager: false });
    core = cluster.kubeConfig.makeApiClient(k8s.CoreV1Api);
    for (const name of [NS, NS2, OUTSIDE, 'kindling-system'])
      await core.createNamespace({ body: { metadata: { name } } });
    await installKindlingCrds(cluster);
    guest = await startCluster({ name: 'guest', controllerManager: false, management: { cluster, namespace: NS } });
    // The pools of the second namespace join the same guest.
    await writeKubeconfigSecret(cluster, NS2, 'guest', guest.kubeconfigYaml);
    ca = await createCertificateAuthority('ignition serving CA');
    const serving = await ca.issue({
      commonName: 'ignition',
      dnsNames: ['localhost'],
      ipAddresses: ['127.0.0.1'],
      usage: 'server',
    });
    await writeFile(join(dir, 'tls.crt'), serving.certPem);
    await writeFile(join(dir, 'tls.key'), serving.keyPem);
    await writeFile(join(dir, 'signing.pem'), ecKeyPem());
    const image = await buildRelease(await writeReleaseFolder(join(dir, 'release-src')), 'v1');
    await writeLayoutDir(image, join(dir, 'release'));
    layoutRef = `oci:${join(dir, 'release')}:v1`;
    // Anonymous pulls of public/*: the servers have the registry's CA and no pull secret.
    registry = await startRegistry();
    await writeFile(join(dir, 'registry-ca.pem'), registry.ca.certPem);
    await pushRelease(image, registry.host, 'public/release', {
      ca: registry.ca.certPem,
      credentials: parsePullSecret(registry.pullSecret),
      tag: 'v1',
    });
    releaseRef = `${registry.host}/public/release:v1`;
    // The same image under another tag: a release a pool could use, but the pools here do not.
    await pushRelease(image, registry.host, 'public/release', {
      ca: registry.ca.certPem,
      credentials: parsePullSecret(registry.pullSecret),
      tag: 'v0',
    });
    otherRef = `${registry.host}/public/release:v0`;
    replicas.push(await startReplica('a'), await startReplica('b'));
  });

  after(async () => {
    await Promise.all(replicas.map((r) => r.proc.stop()));
    await registry?.stop();
    await guest?.stop();
    await cluster?.stop();
    if (process.env.KEEP_TEST_DIR === undefined) await rm(dir, { recursive: true, force: true });
  });

  const MACHINE_CONFIG = {
    apiVersion: 'machineconfiguration.openshift.io/v1',
    kind: 'MachineConfig',
    metadata: { name: '99-worker-motd' },
    spec: {
      config: {
        ignition: { version: '3.2.0' },
        storage: {
          files: [{ path: '/etc/motd', mode: 420, contents: { source: 'data:,hello%20from%20kindling%0A' } }],
        },
      },
    },
  };
  /** The same MachineConfig under another name: another config, so another hash, with the same files. */
  const renamed = (name: string): object => ({ ...MACHINE_CONFIG, metadata: { name } });
  const KUBELET_CONFIG = {
    apiVersion: 'machineconfiguration.openshift.io/v1',
    kind: 'KubeletConfig',
    metadata: { name: 'max-pods' },
    spec: { kubeletConfig: { maxPods: 42 } },
  };

  it('when a token Secret appears, it should mint its token, generate the payload once, and let a host boot with the real Ignition client', async () => {
    booted = await createTokenSecret([KUBELET_CONFIG, MACHINE_CONFIG]);
    const { name, hash } = booted;
    const token = await eventually('a minted token', () => tokenOf(name));
    const secret = await eventually('the payload result', async () => {
      const s = await readSecret(name);
      return s.metadata?.annotations?.[ANNOTATIONS.payloadReason] ? s : undefined;
    });
    assert.equal(secret.metadata?.annotations?.[ANNOTATIONS.payloadReason], 'AsExpected');
    assert.ok(secret.metadata?.annotations?.[ANNOTATIONS.tokenIssuedAt]);
    assert.equal(dataOf(secret, SECRET_KEYS.rotatedToken), undefined);
    // Both replicas serve the leader's token.
    for (const r of replicas)
      await eventually(`replica ${r.log} serving`, async () =>
        (await get(r.port, ca.certPem, headers(token, hash))).status === 200 ? true : undefined,
      );

    const host = await boot(replicas[1] as Replica, token, hash);
    assert.equal(host.code, 0, host.output);
    assert.equal(await readFile(join(host.root, 'etc/motd'), 'utf8'), 'hello from kindling\n');
    assert.equal(
      (JSON.parse(await readFile(join(host.root, 'etc/kubernetes/kubelet.conf'), 'utf8')) as { maxPods: number })
        .maxPods,
      42,
    );
    assert.equal(
      (JSON.parse(await readFile(join(host.root, 'etc/kindling/release.json'), 'utf8')) as { version: string }).version,
      '4.18.2',
    );
    assert.ok(existsSync(join(host.root, 'etc/systemd/system/kubelet.service')));
    const fetched = await readFile(join(host.root, 'run', 'ignition', 'config.json'));
    assert.equal(await createValidator()(fetched), undefined, 'the fetched config passes ignition-validate');

    const reached = await eventually(
      'the first fetch recorded',
      async () => (await readSecret(name)).metadata?.annotations?.[ANNOTATIONS.ignitionReachedAt],
    );
    assert.ok(Date.parse(reached) > 0);
    const logs = replicas.map((r) => readFileSync(r.log, 'utf8')).join('\n');
    assert.equal(logs.split('Minted the token').length - 1, 1, 'one replica (the leader) minted');
    assert.equal(logs.split('Generated a payload').length - 1, 2, 'one generation per replica for the pair');
    assert.ok(!logs.includes(token.split('.')[1] as string), 'no token in any log');
    assert.match(logs, /"status":200,"nodePool":"clusters\/workers"/);
  });

  it("when token Secrets' pools name their cluster, it should mint each token a bootstrap token in that guest, boot hosts with join material of the guest only, generate once for two pools, and revoke with the Secret", async () => {
    const generatedBefore = replicas.map((r) => readFileSync(r.log, 'utf8').split('Generated a payload').length);
    const pools = ['join-a', 'join-b'];
    const secrets = await Promise.all(pools.map((pool) => createTokenSecret([MACHINE_CONFIG], { pool })));
    // One release and config: one hash for both pools.
    const [{ hash }] = secrets as [{ name: string; hash: string }];
    const guestCore = guest.kubeConfig.makeApiClient(k8s.CoreV1Api);
    const minted = await Promise.all(
      pools.map((pool, i) =>
        eventually(`${pool}'s token and bootstrap token`, async () => {
          const name = secrets[i]?.name as string;
          const s = await readSecret(name);
          const token = dataOf(s, SECRET_KEYS.token);
          const bootstrap = dataOf(s, SECRET_KEYS.bootstrapToken);
          return token && bootstrap ? { pool, name, token, bootstrap } : undefined;
        }),
      ),
    );
    for (const m of minted) {
      const id = m.bootstrap.split('.')[0] as string;
      const secret = await guestCore.readNamespacedSecret({ name: `bootstrap-token-${id}`, namespace: 'kube-system' });
      assert.equal(secret.type, 'bootstrap.kubernetes.io/token');
      assert.equal(dataOf(secret, 'token-secret'), m.bootstrap.split('.')[1]);
      assert.equal(
        dataOf(secret, 'auth-extra-groups'),
        `system:bootstrappers:kindling,system:bootstrappers:kindling:${NS}:${m.pool}`,
      );
      const exp =
        (JSON.parse(Buffer.from(m.token.split('.')[1] as string, 'base64url').toString()) as { exp: number }).exp *
        1000;
      assert.equal(
        Date.parse(dataOf(secret, 'expiration') ?? ''),
        exp,
        'the bootstrap token expires with its Ignition token',
      );
    }
    const [a] = minted as [{ pool: string; name: string; token: string; bootstrap: string }];
    const host = await eventually('a host of join-a booted', async () => {
      const stubFor = JSON.parse(stub(replicas[0] as Replica, a.token, hash)) as {
        ignition: { config: { merge: { httpHeaders: { name: string; value: string }[] }[] } };
      };
      for (const h of stubFor.ignition.config.merge[0]?.httpHeaders ?? [])
        if (h.name === IGNITION_HEADERS.nodePool) h.value = `${NS}/${a.pool}`;
      const root = join(await mkdtemp(join(dir, 'host-')), 'root');
      return bootHost({ root, userData: JSON.stringify(stubFor) }).then(
        () => root,
        () => undefined,
      );
    });
    const kubeconfig = JSON.parse(await readFile(join(host, 'etc/kubernetes/bootstrap-kubeconfig'), 'utf8')) as {
      clusters: { cluster: { server: string } }[];
      users: { user: { token: string } }[];
    };
    assert.equal(kubeconfig.users[0]?.user.token, a.bootstrap);
    assert.equal(kubeconfig.clusters[0]?.cluster.server, guest.server);
    assert.equal(await readFile(join(host, 'etc/kubernetes/pki/ca.crt'), 'utf8'), guest.ca.certPem);
    // Nothing of the management cluster (its CA, its address) nor the guest kubeconfig's admin credentials.
    const everything = (
      await Promise.all(
        [
          'etc/kubernetes/bootstrap-kubeconfig',
          'etc/kubernetes/pki/ca.crt',
          'etc/kubernetes/kubelet.conf',
          'etc/motd',
          'run/ignition/config.json',
        ].map((f) => readFile(join(host, f), 'utf8').catch(() => '')),
      )
    ).join('\n');
    const adminCert = Buffer.from(
      /client-certificate-data: (\S+)/.exec(guest.kubeconfigYaml)?.[1] ?? '',
      'base64',
    ).toString();
    for (const [what, text] of [
      ['management CA', cluster.ca.certPem],
      ['management apiserver', cluster.server],
      ['guest admin certificate', adminCert],
      ['admin key', 'PRIVATE KEY'],
    ] as const) {
      assert.ok(!everything.includes(text.trim()), `the host holds the ${what}`);
    }
    const generated = replicas.map(
      (r, i) => readFileSync(r.log, 'utf8').split('Generated a payload').length - (generatedBefore[i] ?? 0),
    );
    assert.deepEqual(generated, [1, 1], 'two pools on one (release, config): one generation per replica');
    await core.deleteNamespacedSecret({ name: a.name, namespace: NS });
    await eventually("the deleted Secret's bootstrap token gone from the guest", async () =>
      guestCore
        .readNamespacedSecret({ name: `bootstrap-token-${a.bootstrap.split('.')[0]}`, namespace: 'kube-system' })
        .then(
          () => undefined,
          () => true,
        ),
    );
  });

  it('when a token Secret owned by its pool names a release the pool does not use, it should mint no token nor bootstrap token in the guest, generate nothing, and say why in a Warning Event', async () => {
    const pool = await ensureNodePool(cluster.kubeConfig, { namespace: NS, name: 'attacked', release: releaseRef });
    // All a tenant can write: owned by the pool (its UID is readable), named and labelled by the hash of what it holds.
    const forged = ownedTokenSecret(pool, otherRef, [renamed('99-forged')]);
    const forgedName = forged.secret.metadata?.name as string;
    await core.createNamespacedSecret({ namespace: NS, body: forged.secret });
    const [event] = await eventually('the refusal Event', async () => {
      const events = await eventsOf(forgedName, 'ReleaseNotOfPool');
      return events.length > 0 ? events : undefined;
    });
    assert.equal(event?.type, 'Warning');
    assert.match(event?.message ?? '', /NodePool attacked uses release .* the Secret names release .*:v0$/);
    // The pool's own Secret, after it, gets its token and bootstrap token: by then the forged one had every chance.
    const own = await createTokenSecret([renamed('99-own')], { pool: 'attacked' });
    await eventually('the own bootstrap token', async () =>
      dataOf(await readSecret(own.name), SECRET_KEYS.bootstrapToken),
    );
    const left = await readSecret(forgedName);
    assert.equal(dataOf(left, SECRET_KEYS.token), undefined, 'no token minted for the forged Secret');
    assert.equal(left.metadata?.annotations?.[ANNOTATIONS.payloadReason], undefined, 'no payload reported for it');
    const inGuest = await guest.kubeConfig
      .makeApiClient(k8s.CoreV1Api)
      .listNamespacedSecret({ namespace: 'kube-system', labelSelector: `${LABELS.nodePool}=attacked` });
    assert.equal(inGuest.items.length, 1, "one bootstrap token of the pool in the guest: its own Secret's");
    for (const r of replicas)
      await eventually(`${r.name} to count the refusal`, async () =>
        /kindling_ignition_token_secrets_refused_total\{[^}]*reason="ReleaseNotOfPool"[^}]*\} [1-9]/.test(
          await opsMetrics(r.opsPort),
        )
          ? true
          : undefined,
      );
    const generated = replicas
      .flatMap((r) => readFileSync(r.log, 'utf8').split('\n'))
      .filter((l) => l.includes('Generated a payload') && l.includes(otherRef));
    assert.deepEqual(generated, [], 'no payload generated from the release the pool does not use');
  });

  it('when the token reaches TTL/2, it should rotate it, keep the old one valid until its own expiry, and boot with either', async () => {
    const { name, hash } = await createTokenSecret([renamed('99-rotate')]);
    const first = await eventually('a minted token', () => tokenOf(name));
    const [replica] = replicas as [Replica];
    await eventually('payload', async () =>
      (await get(replica.port, ca.certPem, headers(first, hash))).status === 200 ? true : undefined,
    );
    const second = await eventually(
      'a rotated token',
      async () => {
        const s = await readSecret(name);
        const t = dataOf(s, SECRET_KEYS.token);
        return t !== first ? s : undefined;
      },
      TTL_S * 1000,
    );
    assert.equal(dataOf(second, SECRET_KEYS.rotatedToken), first);
    const current = dataOf(second, SECRET_KEYS.token) as string;
    await eventually('the new token served', async () =>
      (await get(replica.port, ca.certPem, headers(current, hash))).status === 200 ? true : undefined,
    );
    assert.equal(
      (await get(replica.port, ca.certPem, headers(first, hash))).status,
      200,
      'the rotated token still works',
    );
    const host = await boot(replica, first, hash);
    assert.equal(host.code, 0, host.output);
    assert.equal(await readFile(join(host.root, 'etc/motd'), 'utf8'), 'hello from kindling\n');
    // The first token's own expiry (iat + TTL) passes: refused, while the current one still works.
    const firstExp =
      (JSON.parse(Buffer.from(first.split('.')[1] as string, 'base64url').toString()) as { exp: number }).exp * 1000;
    await new Promise((r) => setTimeout(r, Math.max(0, firstExp - Date.now() + 200)));
    assert.equal((await get(replica.port, ca.certPem, headers(first, hash))).status, 401);
    const latest = (await tokenOf(name)) as string;
    assert.equal((await get(replica.port, ca.certPem, headers(latest, hash))).status, 200);
    // Rotations every TTL/2 by the leader alone: one Event per (Secret, reason) per window, not one per rotation.
    const rotated = await eventually('the rotation Event', async () =>
      (await eventsOf(name, 'TokenRotated')).length > 0 ? eventsOf(name, 'TokenRotated') : undefined,
    );
    assert.equal(rotated.length, 1);
    assert.equal(rotated[0]?.reportingComponent, 'kindling-ignition-server');
    assert.equal(rotated[0]?.involvedObject.kind, 'Secret');
    assert.equal(rotated[0]?.involvedObject.uid, (await readSecret(name)).metadata?.uid);
  });

  it('when the token Secret is deleted, it should refuse its token at once on every replica', async () => {
    const { name, hash } = await createTokenSecret([renamed('99-revoke')]);
    const token = await eventually('a minted token', () => tokenOf(name));
    for (const r of replicas)
      await eventually('served', async () =>
        (await get(r.port, ca.certPem, headers(token, hash))).status === 200 ? true : undefined,
      );
    await core.deleteNamespacedSecret({ name, namespace: NS });
    const started = Date.now();
    for (const r of replicas)
      await eventually(
        'refused',
        async () => ((await get(r.port, ca.certPem, headers(token, hash))).status === 401 ? true : undefined),
        3000,
      );
    assert.ok(Date.now() - started < 3000);
  });

  it('when the expiry annotation passes, it should refuse the token, delete the Secret, and a booting host should fail', async () => {
    const { name, hash } = await createTokenSecret([renamed('99-expire')]);
    const token = await eventually('a minted token', () => tokenOf(name));
    const [replica] = replicas as [Replica];
    await eventually('served', async () =>
      (await get(replica.port, ca.certPem, headers(token, hash))).status === 200 ? true : undefined,
    );
    const expiresAt = new Date(Date.now() + 1500).toISOString();
    await core.patchNamespacedSecret(
      { name, namespace: NS, body: { metadata: { annotations: { [ANNOTATIONS.tokenExpiresAt]: expiresAt } } } },
      k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
    );
    await eventually('the Secret deleted', async () => {
      try {
        await readSecret(name);
        return undefined;
      } catch {
        return true;
      }
    });
    assert.equal((await get(replica.port, ca.certPem, headers(token, hash))).status, 401);
    const expired = await eventually('the expiry Event', async () =>
      (await eventsOf(name, 'TokenSecretExpired')).length > 0 ? eventsOf(name, 'TokenSecretExpired') : undefined,
    );
    assert.equal(expired.length, 1);
    assert.match(expired[0]?.message ?? '', /expiry .* has passed/);
    const host = await boot(replica, token, hash, 3000);
    assert.notEqual(host.code, 0);
    assert.ok(!existsSync(join(host.root, 'etc/kindling/release.json')));
  });

  it('when the config cannot be merged, it should say why on the token Secret and answer 511', async () => {
    const bad = { ...MACHINE_CONFIG, metadata: { name: '50-bad' }, spec: { osImageURL: 'quay.io/os@sha256:0' } };
    const { name, hash } = await createTokenSecret([bad]);
    const secret = await eventually('the payload result', async () => {
      const s = await readSecret(name);
      return s.metadata?.annotations?.[ANNOTATIONS.payloadReason] ? s : undefined;
    });
    assert.equal(secret.metadata?.annotations?.[ANNOTATIONS.payloadReason], 'InvalidConfig');
    assert.match(
      secret.metadata?.annotations?.[ANNOTATIONS.payloadMessage] ?? '',
      /MachineConfig 50-bad: spec.osImageURL is not supported/,
    );
    const token = (await tokenOf(name)) as string;
    for (const r of replicas) assert.equal(await answerOnceKnown(r, token, hash), 511);
    const failed = await eventually('the failure Event', async () =>
      (await eventsOf(name, 'InvalidConfig')).length > 0 ? eventsOf(name, 'InvalidConfig') : undefined,
    );
    assert.equal(failed.length, 1, 'one Event, from the leader only');
    assert.equal(failed[0]?.type, 'Warning');
    assert.match(failed[0]?.message ?? '', /^Payload generation failed: .*spec.osImageURL is not supported/);
  });

  it('when labelled Secrets appear in a namespace the servers are not told, it should leave them alone, and serve each listed namespace', async () => {
    const { name: outside } = await createTokenSecret([], { namespace: OUTSIDE });
    const { name: listed } = await createTokenSecret([], { namespace: NS2 });
    await eventually('a token in the second listed namespace', async () =>
      dataOf(await core.readNamespacedSecret({ name: listed, namespace: NS2 }), SECRET_KEYS.token),
    );
    // Created first, so it had every chance; informers of other namespaces are not ordered with this one, so wait a little more.
    await new Promise((r) => setTimeout(r, 2000));
    const untouched = await core.readNamespacedSecret({ name: outside, namespace: OUTSIDE });
    assert.equal(dataOf(untouched, SECRET_KEYS.token), undefined, 'no token minted outside the listed namespaces');
    assert.deepEqual(
      untouched.metadata?.annotations ?? {},
      {},
      'no payload generated or reported outside the listed namespaces',
    );
    const logs = replicas.map((r) => readFileSync(r.log, 'utf8')).join('\n');
    assert.ok(!logs.includes(`${OUTSIDE}/`), 'no replica saw it');
    assert.match(logs, /"namespaces":\["clusters","clusters-b"\]/, 'each replica says which namespaces it serves');
  });

  it('when a release names a local layout or a registry not allowed, it should refuse it with InvalidConfig on the token Secret, in an Event, and with 511', async () => {
    // Each a pool of that release: a token Secret naming a release its pool does not use is refused earlier.
    const cases = [
      { pool: 'local', release: layoutRef, message: /names a file on the ignition server .*--allow-local-releases/ },
      {
        pool: 'metadata-service',
        release: '169.254.169.254/latest/meta-data:v1',
        message: /registry 169\.254\.169\.254 is not in the ignition server's --allowed-registries/,
      },
      // The allowed registry under another name is another host.
      {
        pool: 'registry-alias',
        release: releaseRef.replace('127.0.0.1', 'localhost'),
        message: /registry localhost:\d+ is not in/,
      },
    ];
    for (const c of cases) {
      const { name, hash } = await createTokenSecret([MACHINE_CONFIG], { pool: c.pool, release: c.release });
      const secret = await eventually(`the payload result of ${c.pool}`, async () => {
        const s = await readSecret(name);
        return s.metadata?.annotations?.[ANNOTATIONS.payloadReason] ? s : undefined;
      });
      assert.equal(secret.metadata?.annotations?.[ANNOTATIONS.payloadReason], 'InvalidConfig', c.pool);
      assert.match(secret.metadata?.annotations?.[ANNOTATIONS.payloadMessage] ?? '', c.message);
      const token = (await tokenOf(name)) as string;
      for (const r of replicas) assert.equal(await answerOnceKnown(r, token, hash, c.pool), 511);
      const failed = await eventually('the failure Event', async () =>
        (await eventsOf(name, 'InvalidConfig')).length > 0 ? eventsOf(name, 'InvalidConfig') : undefined,
      );
      assert.match(failed[0]?.message ?? '', c.message);
    }
  });

  it("when the registry refuses the pull, it should report the registry and the status on the token Secret and in the Event, and nothing of the registry's answer", async () => {
    // A private repository: the anonymous token the servers get grants nothing, so the registry answers 401 with its JSON errors.
    const { name } = await createTokenSecret([MACHINE_CONFIG], {
      pool: 'private',
      release: `${registry.host}/private/release:v1`,
    });
    const secret = await eventually('the payload result', async () => {
      const s = await readSecret(name);
      return s.metadata?.annotations?.[ANNOTATIONS.payloadReason] ? s : undefined;
    });
    const message = secret.metadata?.annotations?.[ANNOTATIONS.payloadMessage] ?? '';
    assert.equal(secret.metadata?.annotations?.[ANNOTATIONS.payloadReason], 'ReleaseUnavailable');
    assert.equal(message, `fetching manifest v1 of private/release on registry ${registry.host} failed: HTTP 401`);
    const [event] = await eventually('the failure Event', async () =>
      (await eventsOf(name, 'ReleaseUnavailable')).length > 0 ? eventsOf(name, 'ReleaseUnavailable') : undefined,
    );
    const eventMessage = String(event?.message);
    assert.equal(eventMessage, `Payload generation failed: ${message}`);
    const logs = replicas.map((r) => readFileSync(r.log, 'utf8')).join('\n');
    for (const body of ['UNAUTHORIZED', 'authentication required', '"errors"']) {
      for (const [where, text] of [
        ['annotation', message],
        ['Event', eventMessage],
        ['logs', logs],
      ] as const)
        assert.ok(!text.includes(body), `${where} echoes the registry's body (${body})`);
    }
  });

  it('when token Secrets carry their config, it should hold no config bytes in memory and still generate the payload from it', async () => {
    const marker = `kindling-marker-${randomBytes(16).toString('hex')}`;
    // The marker sits in metadata, which no payload carries: after generation nothing in the process may hold it.
    const config = [
      {
        metadata: { name: '98-marked', labels: { 'kindling.dev/test-marker': marker } },
        apiVersion: MACHINE_CONFIG.apiVersion,
        kind: MACHINE_CONFIG.kind,
        spec: MACHINE_CONFIG.spec,
      },
    ];
    const { name, hash } = await createTokenSecret(config);
    // A replica of its own: writing a snapshot stops the process for seconds, which would cost a leader its Lease.
    const replica = await startReplica('c');
    // The current token on every try: with an 8 s TTL a slow start outlives the first one.
    const served = await eventually('served', async () => {
      const token = await tokenOf(name);
      const r = token === undefined ? undefined : await get(replica.port, ca.certPem, headers(token, hash));
      return r?.status === 200 ? r : undefined;
    });
    assert.match(
      served.body,
      /hello%20from%20kindling/,
      'the payload was generated from the config read at that moment',
    );
    const heap = await heapSnapshot(replica).finally(() => replica.proc.stop());
    assert.ok(
      heap.includes(`${NS}/${name}`),
      "the snapshot holds what the server keeps (the Secret's key): the search works",
    );
    assert.ok(!heap.includes(marker), 'no copy of the config documents');
    const base64Prefix = Buffer.from(JSON.stringify(config)).toString('base64').slice(0, 120);
    assert.ok(!heap.includes(base64Prefix), "no copy of the Secret's config value");
    // Gone before the restart test: a replica that reads this Secret in full (its token rotates every 8 s)
    // generates its payload, which would be a generation that test does not expect.
    await core.deleteNamespacedSecret({ name, namespace: NS });
  });

  it('when a replica restarts on its cache directory, it should serve at once and generate nothing', async () => {
    const b = replicas[1] as Replica;
    const generatedBy = (text: string): Set<string> =>
      new Set(
        text
          .split('\n')
          .filter((l) => l.includes('Generated a payload'))
          .map((l) => String((JSON.parse(l) as { payload?: string }).payload)),
      );
    const before = generatedBy(readFileSync(b.log, 'utf8'));
    assert.ok(before.size > 0, 'the replica generated payloads before its restart');
    await b.proc.stop();
    // The old process has exited, so its lines all precede this offset; the serving threads may answer
    // before the new process logs "Started", so its lines are told apart by where they sit, not by that line.
    const oldLength = readFileSync(b.log).length;
    const restarted = await startReplica('b');
    replicas[1] = restarted;
    const token = (await tokenOf(booted.name)) as string;
    await eventually('served after restart', async () =>
      (await get(restarted.port, ca.certPem, headers(token, booted.hash))).status === 200 ? true : undefined,
    );
    const sinceRestart = readFileSync(restarted.log).subarray(oldLength).toString('utf8');
    // Secrets it never served may be read and generated in the background (its warm-up); what it had is not.
    const again = [...generatedBy(sinceRestart)].filter((key) => before.has(key));
    assert.deepEqual(again, [], 'no payload it had generated before is generated again after the restart');
    const metrics = await opsMetrics(restarted.opsPort);
    assert.match(metrics, /kindling_ignition_requests_total\{code="200"/);
    const counted = [
      ...metrics.matchAll(/kindling_ignition_payload_generation_seconds_count\{outcome="success"[^}]*\} (\d+)/g),
    ].reduce((n, m) => n + Number(m[1]), 0);
    assert.equal(
      counted,
      sinceRestart.split('Generated a payload').length - 1,
      'the metric counts the generations the log shows',
    );
    assert.match(metrics, /kindling_ignition_tokens_live\{[^}]*\} [1-9]/);
  });
});
