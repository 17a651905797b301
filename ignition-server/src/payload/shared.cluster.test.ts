/**
 * Payloads shared through an OCI repository (shared.ts) by real `kindling ignition-server` processes: two
 * replicas (one leader) against a real apiserver and a real registry (Debian docker-registry with token
 * authentication), then both restarted on empty cache directories as rescheduled pods are. The count of
 * generations is read from each process's metrics.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'node:https';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as k8s from '#k8s';
import { startCluster, eventually, installKindlingCrds, type Cluster } from '../../../test/bed/src/index.js';
import { IGNITION_HEADERS, SECRET_KEYS } from '../../../api/src/keys.js';
import { IgnitionServer, opsMetrics, writeIgnitionServerFiles, type IgnitionServerFiles } from '../../testing/index.js';
import { ensureNodePool, ownedTokenSecret } from '../../testing/pools.js';
import { startRegistry, type RegistryFixture } from '../../testing/registry-fixture.js';
import { parsePullSecret, RegistryClient } from '../release/registry.js';
import { sha256Digest } from '../release/digest.js';
import { MEDIA_TYPES } from '../release/types.js';

const NS = 'clusters';

function fetchIgnition(
  port: number,
  ca: string,
  headers: Record<string, string>,
): Promise<{ status: number; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const r = request({ host: '127.0.0.1', port, path: '/ignition', ca, headers, servername: 'localhost' }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks) }));
    });
    r.on('error', reject);
    r.end();
  });
}

/** A sample of the metric with this label (the component adds its own). */
const sample = (text: string, name: string, label: string): number =>
  Number(new RegExp(`^${name}\\{[^}]*${label.replace(/"/g, '\\"')}[^}]*\\} (\\d+)$`, 'm').exec(text)?.[1] ?? 0);
/** Payloads this process generated (one read from the shared store or the cache directory is none). */
const generations = async (s: IgnitionServer): Promise<number> =>
  sample(await opsMetrics(s.opsPort), 'kindling_ignition_payload_generation_seconds_count', 'outcome="success"');
const sharedReads = async (s: IgnitionServer): Promise<number> =>
  sample(await opsMetrics(s.opsPort), 'kindling_ignition_payload_shared_total', 'event="read"');
const rejections = async (s: IgnitionServer, reason: string): Promise<number> =>
  sample(await opsMetrics(s.opsPort), 'kindling_ignition_shared_payload_rejected_total', `reason="${reason}"`);

describe('payloads shared between replicas through an OCI repository', { timeout: 300_000 }, () => {
  let dir: string;
  let cluster: Cluster;
  /** The pools' cluster: each token is minted with a bootstrap token there. */
  let guest: Cluster;
  let core: k8s.CoreV1Api;
  let registry: RegistryFixture;
  let files: IgnitionServerFiles;
  const replicas: IgnitionServer[] = [];
  /** Four token Secrets over two configs (two pools on each): two payloads. */
  const secrets = [
    { pool: 'workers', config: 'a', hash: '' },
    { pool: 'infra', config: 'a', hash: '' },
    { pool: 'workers', config: 'b', hash: '' },
    { pool: 'infra', config: 'b', hash: '' },
  ];
  type Served = (typeof secrets)[number];
  /** By pool and hash. */
  const tokens = new Map<string, string>();
  const keyOf = (s: Served): string => `${s.pool}/${s.hash}`;

  const machineConfig = (text: string): unknown[] => [
    {
      apiVersion: 'machineconfiguration.openshift.io/v1',
      kind: 'MachineConfig',
      metadata: { name: '99-worker-motd' },
      spec: {
        config: {
          ignition: { version: '3.2.0' },
          storage: { files: [{ path: '/etc/motd', mode: 420, contents: { source: `data:,${text}%0A` } }] },
        },
      },
    },
  ];

  const headers = (s: Served): Record<string, string> => ({
    authorization: `Bearer ${tokens.get(keyOf(s)) ?? ''}`,
    [IGNITION_HEADERS.nodePool]: `${NS}/${s.pool}`,
    [IGNITION_HEADERS.targetConfigVersionHash]: s.hash,
    accept: 'application/vnd.coreos.ignition+json;version=3.3.0',
  });

  /** The payload of a token from a replica, once it answers 200 (511 while the payload is on its way). */
  const payloadFrom = (server: IgnitionServer, s: Served): Promise<Buffer> =>
    eventually(
      `a 200 from ${server.name} for ${keyOf(s)}`,
      async () => {
        const r = await fetchIgnition(server.port, files.caPem, headers(s));
        if (r.status !== 200 && r.status !== 511)
          throw new Error(`${server.name} answered ${r.status} for ${keyOf(s)}: ${r.body.toString()}`);
        return r.status === 200 ? r.body : undefined;
      },
      120_000,
      100,
    );

  const replica = (name: string): Promise<IgnitionServer> =>
    IgnitionServer.spawn(files, {
      kubeconfigPath: cluster.kubeconfigPath,
      namespace: NS,
      name,
      leaderElectionNamespace: 'kindling-system',
      args: [
        '--payload-repository',
        `${registry.host}/kindling/payloads`,
        '--registry-ca-file',
        join(dir, 'registry-ca.pem'),
        '--pull-secret-file',
        join(dir, 'pull-secret.json'),
      ],
    });

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'shared-payloads-'));
    cluster = await startCluster({ name: 'mgmt', controllerManager: false });
    core = cluster.kubeConfig.makeApiClient(k8s.CoreV1Api);
    for (const name of [NS, 'kindling-system']) await core.createNamespace({ body: { metadata: { name } } });
    await installKindlingCrds(cluster);
    guest = await startCluster({ name: 'guest', controllerManager: false, management: { cluster, namespace: NS } });
    registry = await startRegistry();
    await writeFile(join(dir, 'registry-ca.pem'), registry.ca.certPem);
    // The repository is not public: pushing and pulling take the pull secret's credentials.
    await writeFile(join(dir, 'pull-secret.json'), registry.pullSecret);
    files = await writeIgnitionServerFiles(join(dir, 'files'));
    replicas.push(await replica('a'), await replica('b'));
  });

  after(async () => {
    await Promise.all(replicas.map((r) => r.stop()));
    await registry?.stop();
    await guest?.stop();
    await cluster?.stop();
    if (process.env.KEEP_TEST_DIR === undefined) await rm(dir, { recursive: true, force: true });
  });

  it('when two replicas serve token Secrets of two configs, it should generate each payload once between them and serve the same bytes from both', async () => {
    const release = files.releases.v1 ?? '';
    const names = new Map<Served, string>();
    for (const s of secrets) {
      const pool = await ensureNodePool(cluster.kubeConfig, { namespace: NS, name: s.pool, release });
      const owned = ownedTokenSecret(pool, release, machineConfig(s.config));
      s.hash = owned.hash;
      names.set(s, owned.secret.metadata?.name as string);
      await core.createNamespacedSecret({ namespace: NS, body: owned.secret });
    }
    for (const s of secrets) {
      tokens.set(
        keyOf(s),
        await eventually(
          `the token of ${keyOf(s)}`,
          async () => {
            const data = (await core.readNamespacedSecret({ name: names.get(s) as string, namespace: NS })).data?.[
              SECRET_KEYS.token
            ];
            return data === undefined ? undefined : Buffer.from(data, 'base64').toString();
          },
          60_000,
          100,
        ),
      );
    }
    for (const s of secrets) {
      const [a, b] = await Promise.all(replicas.map((r) => payloadFrom(r, s)));
      assert.ok(a?.equals(b as Buffer), `both replicas serve the same payload for ${keyOf(s)}`);
      assert.ok(a?.includes(`data:,${s.config}%0A`), `the payload of ${keyOf(s)} holds its config`);
    }
    const counts = await Promise.all(replicas.map(generations));
    assert.equal(
      counts.reduce((x, y) => x + y, 0),
      2,
      `two payloads generated between the two replicas (a: ${counts[0]}, b: ${counts[1]})`,
    );
    assert.ok(counts.includes(0), 'the replica that does not lead read every payload from the repository');
    // What the repository holds: an artifact per payload, tagged by its content key.
    const client = new RegistryClient(registry.host, 'kindling/payloads', {
      ca: registry.ca.certPem,
      credentials: parsePullSecret(registry.pullSecret),
    });
    const tags = await client.listTags();
    assert.equal(
      tags.filter((t) => t.startsWith('payload-')).length,
      2,
      `two payload artifacts in the repository: ${tags.join(', ')}`,
    );
  });

  it('when both replicas restart on empty cache directories, as rescheduled pods do, it should serve every token again and generate nothing', async () => {
    for (const [i, r] of replicas.entries()) {
      await r.stop();
      await rm(join(files.dir, `cache-${r.name}`), { recursive: true, force: true });
      replicas[i] = await replica(r.name);
    }
    // A third pod that never ran before joins them.
    replicas.push(await replica('c'));
    for (const s of secrets) {
      const bodies = await Promise.all(replicas.map((r) => payloadFrom(r, s)));
      assert.ok(
        bodies.every((b) => b.equals(bodies[0] as Buffer)),
        `every replica serves the same payload for ${keyOf(s)}`,
      );
    }
    assert.deepEqual(await Promise.all(replicas.map(generations)), [0, 0, 0], 'no generation after the restarts');
    for (const r of replicas) assert.ok((await sharedReads(r)) >= 2, `${r.name} read the payloads from the repository`);
  });

  it('when someone who can push to the repository swaps or replaces the payload artifacts, it should serve none of them from a replica that reads the repository, and count each refusal', async () => {
    // The attacker holds the pull secret's push rights: a genuine artifact goes under the other payload's tag,
    // and foreign bytes go under the second tag with the genuine signature still in the manifest.
    const client = new RegistryClient(registry.host, 'kindling/payloads', {
      ca: registry.ca.certPem,
      credentials: parsePullSecret(registry.pullSecret),
    });
    const [first, second] = (await client.listTags()).filter((t) => t.startsWith('payload-'));
    assert.ok(first !== undefined && second !== undefined);
    const manifestOf = async (tag: string): Promise<Buffer> =>
      (await client.findManifest(tag))?.bytes ?? Buffer.from('');
    const [firstManifest, secondManifest] = [await manifestOf(first), await manifestOf(second)];
    const evil = Buffer.from(
      '3.0.0 0\n,"storage":{"files":[{"path":"/etc/evil","contents":{"source":"data:,owned"}}]}}',
    );
    const forged = JSON.parse(secondManifest.toString()) as { layers: { digest: string; size: number }[] };
    forged.layers = [{ ...forged.layers[0]!, digest: sha256Digest(evil), size: evil.length }];
    await client.putBlob(sha256Digest(evil), evil);
    await client.putManifest(first, secondManifest, MEDIA_TYPES.ociManifest);
    await client.putManifest(second, Buffer.from(JSON.stringify(forged)), MEDIA_TYPES.ociManifest);
    assert.ok(!firstManifest.equals(secondManifest));
    // A new pod on an empty cache directory reads the repository; it does not lead (the first replicas do).
    const fresh = await replica('d');
    replicas.push(fresh);
    const served: string[] = [];
    await eventually(
      'both refusals counted by the new replica',
      async () => {
        for (const s of secrets) {
          const r = await fetchIgnition(fresh.port, files.caPem, headers(s));
          if (r.status === 200) served.push(`${s.hash}: ${r.body.toString().slice(0, 200)}`);
        }
        const counts = [await rejections(fresh, 'other_entry'), await rejections(fresh, 'other_bytes')];
        return counts.every((n) => n > 0) ? counts : undefined;
      },
      60_000,
      200,
    );
    assert.deepEqual(served, [], 'the new replica served nothing of the repository as it now is');
    for (const s of secrets) {
      const r = await fetchIgnition(fresh.port, files.caPem, headers(s));
      assert.equal(r.status, 511, `the new replica waits for the leader rather than serve ${s.hash}`);
    }
    assert.equal(await generations(fresh), 0);
  });
});
