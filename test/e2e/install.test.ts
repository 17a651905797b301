/**
 * End to end on a real node (issue 25): a management cluster from the test bed with one real node — containerd,
 * the kubelet, kube-proxy, the CNI bridge and CoreDNS (test/bed/src/node.ts) — on which Kindling is installed
 * from deploy/ as Pods, with the Cluster API manager as a Pod beside it (install-capi.ts), then a tenant whose
 * hosts boot through the ignition Service (install-tenant.ts), updated in place (one pool by Kindling, one by the
 * Cluster API manager calling the extension), and Kindling upgraded in the middle of that tenant's next rollout
 * (install-rollout.ts). Only this file builds the node (test/bed/node/build.sh,
 * cached like the test bed).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Resolver } from 'node:dns/promises';
import { request } from 'node:http';
import { request as httpsRequest } from 'node:https';
import * as k8s from '#k8s';
import { join } from 'node:path';
import { startCluster, eventually, installCapiCrds, type Cluster, type ManagedProcess } from '../bed/src/index.js';
import { createNodeNetwork, NODE_NETWORK, removeNodeNetwork, startNode, type KubeNode } from '../bed/src/node.js';
import {
  applyOverlay,
  applyOverlayWithTag,
  COMPONENTS,
  createTenantNamespace,
  FIRST_TAG,
  IGNITION_SERVICE,
  loadKindlingImage,
  NEXT_TAG,
  podProblems,
  provideOperatorInputs,
  SYSTEM_NS,
  waitAvailable,
} from './install.js';
import { discoveredExtension, extensionHookCalls, installCapiManager } from './install-capi.js';
import { addMotd, GenerationSampler, holdOneNode, releaseHold } from './install-rollout.js';
import { AvailabilityWatcher } from '../../inplace-upgrader/testing/index.js';
import { DrainWatcher } from './disruption.js';
import {
  applyTenant,
  CAPI_POOL,
  hostFiles,
  patchPool,
  poolMachines,
  poolReady,
  POOL,
  startGuest,
  startHosts,
  startReleaseRegistry,
  type ReleaseRegistry,
} from './install-tenant.js';

const MINUTES = 60_000;
const osRelease = (version: string): string => `Kindling Linux ${version}\n`;

/** GET /ignition over HTTPS at an address, verifying the certificate for the Service's name. */
function getIgnition(address: string, caPem: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = httpsRequest(
      { host: address, port: 443, path: '/ignition', servername: IGNITION_SERVICE, ca: caPem, timeout: 3000 },
      (res) => (res.resume(), resolve(res.statusCode ?? 0)),
    );
    req.on('timeout', () => req.destroy(new Error('GET /ignition timed out')));
    req.on('error', reject);
    req.end();
  });
}

/** GET over plain HTTP from the machine; resolves with the status code and body. */
function get(url: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { timeout: 3000 }, (res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('timeout', () => req.destroy(new Error(`GET ${url} timed out`)));
    req.on('error', reject);
    req.end();
  });
}

const POOL_NODES = 'kindling.dev/pool=inplace';
const MOTD = 'Welcome to a node of an upgraded Kindling\n';
/** deploy/base's ignition-server replicas. */
const IGNITION_PODS = 2;
/**
 * Payloads each ignition-server Pod must generate, by image tag. Without a shared payload repository (deploy/base's
 * default) every Pod generates the payload of each token Secret it admits, once per (release digest, config),
 * whichever pools share it: a container restart reads them back from its emptyDir, a new Pod starts with an
 * empty one. The first tag's Pods generate the tenant's three: 1.36.2, 1.36.3 (both pools' Secrets of each
 * share one payload), and 1.36.3 with the inplace pool's motd. The next tag's Pods start mid-rollout and need
 * 1.36.3 (the capi pool's, and the inplace pool's rollout's start) and 1.36.3 with the motd; the 1.36.2 token
 * Secrets, still in their grace period, are no longer ones their pools report, so they refuse them.
 */
const GENERATIONS = { [FIRST_TAG]: 3, [NEXT_TAG]: 2 } as const;

async function holderOf(mgmt: Cluster, component: string): Promise<string> {
  const leases = mgmt.kubeConfig.makeApiClient(k8s.CoordinationV1Api);
  const lease = await leases.readNamespacedLease({ name: `kindling-${component}`, namespace: SYSTEM_NS });
  return lease.spec?.holderIdentity ?? '';
}

/** Each component's Lease held by another holder than `before` (index by COMPONENTS): a leader on the new tag. */
async function newLeaders(mgmt: Cluster, before: string[]): Promise<void> {
  for (const [i, component] of COMPONENTS.entries()) {
    await eventually(`a new holder of kindling-${component}`, async () => {
      const h = await holderOf(mgmt, component);
      return h !== '' && h !== before[i] ? h : undefined;
    });
  }
}

interface RolloutWatchers {
  availability: AvailabilityWatcher;
  drains: DrainWatcher;
  stop(): void;
}

/** Independent watchers of the guest's Nodes, started before the rollout. */
async function startRolloutWatchers(guest: Cluster, nodes: k8s.V1Node[]): Promise<RolloutWatchers> {
  const names = nodes.map((n) => n.metadata?.name ?? '');
  const availability = new AvailabilityWatcher(guest.kubeConfig, names);
  const drains = new DrainWatcher(guest.kubeConfig, names);
  await Promise.all([availability.start(), drains.start()]);
  return {
    availability,
    drains,
    stop: () => {
      availability.stop();
      drains.stop();
    },
  };
}

/** Exactly GENERATIONS per Pod of each tag, IGNITION_PODS Pods of each, and no generation by any other Pod. */
function assertGenerations(sampler: GenerationSampler): void {
  const all = JSON.stringify(sampler.generations);
  for (const [tag, count] of Object.entries(GENERATIONS))
    assert.deepEqual([...sampler.byPod(tag).values()], Array<number>(IGNITION_PODS).fill(count), `${tag}: ${all}`);
  const total = sampler.generations.reduce((n, g) => n + g.count, 0);
  assert.equal(total, IGNITION_PODS * (GENERATIONS[FIRST_TAG] + GENERATIONS[NEXT_TAG]), all);
}

function assertRollout(w: RolloutWatchers, nodes: k8s.V1Node[]): void {
  const { availability, drains } = w;
  assert.ok(availability.max >= 1, `the watcher never saw a node unavailable (${availability.events} events)`);
  assert.ok(availability.max <= 2, `at most 2 unavailable (maxUnavailable), saw ${availability.max}`);
  for (const node of nodes.map((n) => n.metadata?.name ?? '')) {
    assert.equal(drains.cordons.get(node), 1, `${node} cordoned once`);
    assert.equal(drains.drains.get(node)?.length, 1, `${node} drained once: ${drains.drains.get(node)?.join(', ')}`);
  }
}

describe('Kindling installed from deploy/ on a real node', { timeout: 30 * MINUTES }, () => {
  let mgmt: Cluster;
  let node: KubeNode;
  let releases: ReleaseRegistry;
  let guest: Cluster | undefined;
  let hosts: ManagedProcess | undefined;
  // Started once Kindling is installed, so every generation of every ignition-server container is counted.
  let generations: GenerationSampler | undefined;
  const tenantDir = (): string => join(mgmt.dir, 'tenant');

  before(async () => {
    await createNodeNetwork();
    mgmt = await startCluster({
      name: 'management',
      scheduler: true,
      podNetwork: { address: NODE_NETWORK.hostAddress },
    });
    node = await startNode({ mgmt });
    releases = await startReleaseRegistry(mgmt, tenantDir());
  });

  after(async () => {
    await generations?.stop();
    await hosts?.stop();
    await node?.stop();
    await guest?.stop();
    await releases?.registry.process.stop();
    await mgmt?.stop();
    await removeNodeNetwork();
  });

  it('when the node is up, a Service name should resolve through CoreDNS and answer through kube-proxy', async () => {
    // The kube-dns Service itself: its name resolves by its own address (through kube-proxy to the CoreDNS Pod),
    // and its health port answers through the same translation.
    const resolver = new Resolver({ timeout: 2000, tries: 1 });
    resolver.setServers([NODE_NETWORK.dnsAddress]);
    const [address] = await eventually(
      'kube-dns.kube-system resolved by CoreDNS',
      () => resolver.resolve4('kube-dns.kube-system.svc.cluster.local'),
      3 * MINUTES,
      1000,
    );
    assert.equal(address, NODE_NETWORK.dnsAddress);
    const health = await eventually('CoreDNS health through its Service', () => get(`http://${address}:8080/health`));
    assert.equal(health.status, 200);
    const [kubernetes] = await resolver.resolve4('kubernetes.default.svc.cluster.local');
    assert.equal(kubernetes, '10.0.0.1');
  });

  it('when installed with kubectl apply -k, every Deployment should become Available through its own probes', async () => {
    await loadKindlingImage(node, FIRST_TAG);
    await installCapiCrds(mgmt);
    await createTenantNamespace(mgmt);
    await applyOverlay(mgmt);
    await provideOperatorInputs(mgmt, releases.registry.host);
    await waitAvailable(mgmt, 6 * MINUTES).catch(async (err: unknown) => {
      throw new Error(`Kindling's Pods:\n${await podProblems(mgmt)}`, { cause: err });
    });
    generations = new GenerationSampler(mgmt);
    generations.start();
  });

  it('when installed, each component should elect its leader by pod name', async () => {
    const core = mgmt.kubeConfig.makeApiClient(k8s.CoreV1Api);
    const leases = mgmt.kubeConfig.makeApiClient(k8s.CoordinationV1Api);
    for (const component of COMPONENTS) {
      const { items } = await core.listNamespacedPod({
        namespace: SYSTEM_NS,
        labelSelector: `app.kubernetes.io/name=kindling-${component}`,
      });
      const pods = items.map((p) => p.metadata?.name ?? '');
      const holder = await eventually(`a holder of kindling-${component}`, async () => {
        const lease = await leases.readNamespacedLease({ name: `kindling-${component}`, namespace: SYSTEM_NS });
        return lease.spec?.holderIdentity;
      });
      assert.ok(
        pods.some((pod) => holder.startsWith(`${pod}-`)),
        `${component}'s Lease is held by ${holder}, none of its Pods ${pods.join(', ')}`,
      );
    }
  });

  it('when a booting host resolves the ignition Service, it should reach the server and be refused without a token', async () => {
    const resolver = new Resolver({ timeout: 2000, tries: 2 });
    resolver.setServers([NODE_NETWORK.dnsAddress]);
    const [address] = await resolver.resolve4(IGNITION_SERVICE);
    assert.ok(address?.startsWith('10.0.0.'), `${IGNITION_SERVICE} resolved to ${address}`);
    // kube-proxy programs a Service's rules a moment after its endpoints are ready: refused until then.
    const status = await eventually('the ignition Service answering', () =>
      getIgnition(address ?? '', mgmt.ca.certPem),
    );
    assert.equal(status, 401);
  });

  it("when the Cluster API manager runs as a Pod, it should reach the extension through the ExtensionConfig's Service with the injected CA", async () => {
    await installCapiManager(mgmt, node.capiManagerImage);
    const config = await discoveredExtension(mgmt, 'kindling-inplace');
    assert.equal(config.spec?.clientConfig?.caBundle, Buffer.from(mgmt.ca.certPem).toString('base64'));
    assert.ok((config.status?.handlers ?? []).length > 0, 'the extension was discovered with no handler');
  });

  it("when a tenant's pools are created, their hosts should boot from the ignition Service's name and the pools become Ready", async () => {
    guest = await startGuest();
    hosts = await startHosts(mgmt, tenantDir());
    await applyTenant(mgmt, guest, releases.releases['1.36.2'] ?? '');
    const ready = async (): Promise<boolean> => (await poolReady(mgmt)) && poolReady(mgmt, CAPI_POOL);
    await eventually('the pools Ready', ready, 8 * MINUTES, 2000).catch((err: unknown) => {
      throw new Error(`hosts: ${hosts?.tail() ?? ''}`, { cause: err });
    });
    for (const [pool, size] of [
      [POOL, 6],
      [CAPI_POOL, 1],
    ] as const) {
      const booted = await hostFiles(tenantDir(), 'etc/kindling/os-release', pool);
      assert.equal(booted.size, size, pool);
      for (const [host, release] of booted) assert.equal(release, osRelease('1.36.2'), host);
      // The stub each host booted with sends it to the ignition Service by name (--ignition-endpoint of deploy/).
      for (const [host, stub] of await hostFiles(tenantDir(), 'run/ignition/user-data.ign', pool))
        assert.match(stub ?? '', /https:\/\/kindling-ignition-server\.kindling-system\.svc(:443)?\//, host);
    }
  });

  it('when the pool moves to the next release, every host should be updated in place', async () => {
    await patchPool(mgmt, { spec: { release: { image: releases.releases['1.36.3'] } } });
    await eventually(
      'every host at 1.36.3',
      async () => {
        const files = [...(await hostFiles(tenantDir(), 'etc/kindling/os-release')).values()];
        return files.length === 6 && files.every((f) => f === osRelease('1.36.3'));
      },
      10 * MINUTES,
      2000,
    );
    await eventually('the pool Ready again', () => poolReady(mgmt), 5 * MINUTES, 2000);
  });

  it("when the ClusterAPI-engine pool moves to the next release, the Cluster API manager's Pod should update its Machine in place through the extension's hooks behind its Service", async (t) => {
    const before = await poolMachines(mgmt, CAPI_POOL);
    // When each step was first seen, reported with the result: where the file's time goes.
    const started = Date.now();
    const reached = new Map<string, number>();
    const at = (step: string, done: boolean): boolean => {
      if (done && !reached.has(step)) reached.set(step, Date.now() - started);
      return done;
    };
    await patchPool(mgmt, { spec: { release: { image: releases.releases['1.36.3'] } } }, CAPI_POOL);
    await eventually(
      'the capi host at 1.36.3, its Machine UpToDate, the pool Ready',
      async () => {
        const files = [...(await hostFiles(tenantDir(), 'etc/kindling/os-release', CAPI_POOL)).values()];
        const machines = await poolMachines(mgmt, CAPI_POOL);
        const updated = at('host at 1.36.3', files.length === 1 && files[0] === osRelease('1.36.3'));
        const upToDate = at('Machine UpToDate', machines.length === 1 && machines.every((m) => m.upToDate));
        const ready = at('pool Ready', await poolReady(mgmt, CAPI_POOL).catch(() => false));
        return updated && upToDate && ready;
      },
      5 * MINUTES,
      1000,
    );
    assert.deepEqual(
      await poolMachines(mgmt, CAPI_POOL),
      before.map((m) => ({ ...m, upToDate: true })),
      'the same Machine',
    );
    const calls = await extensionHookCalls(mgmt);
    const summary = JSON.stringify([...calls]);
    t.diagnostic(`ms after the patch: ${JSON.stringify(Object.fromEntries(reached))}; hook calls: ${summary}`);
    assert.ok((calls.get('CanUpdateMachineSet Success') ?? 0) >= 1, `the manager asked what it can update: ${summary}`);
    assert.ok((calls.get('UpdateMachine Success') ?? 0) >= 1, `the manager had the Machine updated: ${summary}`);
  });

  it('when Kindling is rolled to a new image tag during an in-place rollout, every component should lead again on the new tag and the rollout complete with never more than 2 unavailable, no node drained twice, and each payload generated once per ignition-server Pod that needs it', async () => {
    const tenant = guest ?? assert.fail('no guest cluster');
    const sampler = generations ?? assert.fail('no generation sampler');
    const nodes = (await tenant.kubeConfig.makeApiClient(k8s.CoreV1Api).listNode({ labelSelector: POOL_NODES })).items;
    assert.equal(nodes.length, 6);
    const before = await Promise.all(COMPONENTS.map((c) => holderOf(mgmt, c)));
    // Built and imported first: the upgrade is what happens mid-rollout, not the image build.
    await loadKindlingImage(node, NEXT_TAG);
    const held = await holdOneNode(tenant);
    const watch = await startRolloutWatchers(tenant, nodes);
    try {
      await addMotd(mgmt, MOTD);
      await eventually(
        `${held} cordoned, its drain held`,
        async () => watch.drains.cordons.has(held),
        3 * MINUTES,
        250,
      );
      // Scraped before the upgrade takes them away: the old Pods have generated all they ever will.
      await sampler.until(FIRST_TAG, IGNITION_PODS, GENERATIONS[FIRST_TAG], MINUTES);
      await applyOverlayWithTag(mgmt, NEXT_TAG);
      await waitAvailable(mgmt, 6 * MINUTES, `kindling:${NEXT_TAG}`).catch(async (err: unknown) => {
        throw new Error(`Kindling's Pods:\n${await podProblems(mgmt)}`, { cause: err });
      });
      await newLeaders(mgmt, before);
      // Read while the rollout is held: the new Pods' generations are complete before it ends.
      await sampler.until(NEXT_TAG, IGNITION_PODS, GENERATIONS[NEXT_TAG], MINUTES);
      assert.notEqual((await hostFiles(tenantDir(), 'etc/motd')).get(held), MOTD, `${held} updated through its budget`);
      await releaseHold(tenant);
      await eventually(
        'every host with the new motd',
        async () => [...(await hostFiles(tenantDir(), 'etc/motd')).values()].every((m) => m === MOTD),
        10 * MINUTES,
        2000,
      );
      await eventually('the pool Ready again', () => poolReady(mgmt), 5 * MINUTES, 2000);
    } finally {
      watch.stop();
    }
    await sampler.stop();
    assertRollout(watch, nodes);
    assertGenerations(sampler);
  });

  it('when installed, the NetworkPolicies should be applied', async () => {
    const net = mgmt.kubeConfig.makeApiClient(k8s.NetworkingV1Api);
    const { items } = await net.listNamespacedNetworkPolicy({ namespace: SYSTEM_NS });
    assert.deepEqual(items.map((p) => p.metadata?.name).sort(), [
      'kindling-default-deny-ingress',
      'kindling-ignition-server',
      'kindling-inplace-extension',
      'kindling-ops',
    ]);
  });
});
