/**
 * End to end on a real node (issue 25): a management cluster from the test bed with one real node — containerd,
 * the kubelet, kube-proxy, the CNI bridge and CoreDNS (test/bed/src/node.ts) — on which Kindling is installed
 * from deploy/ as Pods, with the Cluster API manager as a Pod beside it (install-capi.ts), then a tenant whose
 * hosts boot through the ignition Service (install-tenant.ts), updated in place, and Kindling upgraded in the
 * middle of that tenant's next rollout (install-rollout.ts). Only this file builds the node (test/bed/node/build.sh,
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
import { discoveredExtension, installCapiManager } from './install-capi.js';
import { addMotd, GenerationSampler, holdOneNode, releaseHold } from './install-rollout.js';
import { AvailabilityWatcher } from '../../inplace-upgrader/testing/index.js';
import { DrainWatcher } from './disruption.js';
import {
  applyTenant,
  hostFiles,
  patchPool,
  poolReady,
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
/** Each of the tenant's payloads (release 1.36.2, 1.36.3, then 1.36.3 with the motd) at most once per Pod. */
const PAYLOADS = 3;

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
  generated: Map<string, number>;
  stop(): Promise<void>;
}

/** Independent watchers of the guest's Nodes and of the ignition server's generations, started before the rollout. */
async function startRolloutWatchers(mgmt: Cluster, guest: Cluster, nodes: k8s.V1Node[]): Promise<RolloutWatchers> {
  const names = nodes.map((n) => n.metadata?.name ?? '');
  const availability = new AvailabilityWatcher(guest.kubeConfig, names);
  const drains = new DrainWatcher(guest.kubeConfig, names);
  await Promise.all([availability.start(), drains.start()]);
  const sampler = new GenerationSampler(mgmt);
  await sampler.sample();
  sampler.start();
  return {
    availability,
    drains,
    generated: sampler.generated,
    stop: async () => {
      availability.stop();
      drains.stop();
      await sampler.stop();
    },
  };
}

function assertRollout(w: RolloutWatchers, nodes: k8s.V1Node[]): void {
  const { availability, drains } = w;
  assert.ok(availability.max >= 1, `the watcher never saw a node unavailable (${availability.events} events)`);
  assert.ok(availability.max <= 2, `at most 2 unavailable (maxUnavailable), saw ${availability.max}`);
  for (const node of nodes.map((n) => n.metadata?.name ?? '')) {
    assert.equal(drains.cordons.get(node), 1, `${node} cordoned once`);
    assert.equal(drains.drains.get(node)?.length, 1, `${node} drained once: ${drains.drains.get(node)?.join(', ')}`);
  }
  const generated = [...w.generated.entries()];
  // A Pod that generated nothing has no sample (its histogram has no count yet).
  assert.ok(generated.length >= 2, `generations sampled from the ignition-server Pods: ${generated.join('; ')}`);
  for (const [pod, count] of generated) assert.ok(count <= PAYLOADS, `${pod} generated ${count} payloads`);
}

describe('Kindling installed from deploy/ on a real node', { timeout: 30 * MINUTES }, () => {
  let mgmt: Cluster;
  let node: KubeNode;
  let releases: ReleaseRegistry;
  let guest: Cluster | undefined;
  let hosts: ManagedProcess | undefined;
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
    assert.equal(await getIgnition(address ?? '', mgmt.ca.certPem), 401);
  });

  it("when the Cluster API manager runs as a Pod, it should reach the extension through the ExtensionConfig's Service with the injected CA", async () => {
    await installCapiManager(mgmt, node.capiManagerImage);
    const config = await discoveredExtension(mgmt, 'kindling-inplace');
    assert.equal(config.spec?.clientConfig?.caBundle, Buffer.from(mgmt.ca.certPem).toString('base64'));
    assert.ok((config.status?.handlers ?? []).length > 0, 'the extension was discovered with no handler');
  });

  it("when a tenant's pool is created, its hosts should boot from the ignition Service's name and the pool become Ready", async () => {
    guest = await startGuest();
    hosts = await startHosts(mgmt, tenantDir());
    await applyTenant(mgmt, guest, releases.releases['1.36.2'] ?? '');
    await eventually('the pool Ready', () => poolReady(mgmt), 8 * MINUTES, 2000).catch((err: unknown) => {
      throw new Error(`hosts: ${hosts?.tail() ?? ''}`, { cause: err });
    });
    const booted = await hostFiles(tenantDir(), 'etc/kindling/os-release');
    assert.equal(booted.size, 6);
    for (const [host, release] of booted) assert.equal(release, osRelease('1.36.2'), host);
    // The stub each host booted with sends it to the ignition Service by name (--ignition-endpoint of deploy/).
    for (const [host, stub] of await hostFiles(tenantDir(), 'run/ignition/user-data.ign'))
      assert.match(stub ?? '', /https:\/\/kindling-ignition-server\.kindling-system\.svc(:443)?\//, host);
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

  it('when Kindling is rolled to a new image tag during an in-place rollout, every component should lead again on the new tag and the rollout complete with never more than 2 unavailable, no node drained twice, no Pod generating more payloads than the tenant has', async () => {
    const tenant = guest ?? assert.fail('no guest cluster');
    const nodes = (await tenant.kubeConfig.makeApiClient(k8s.CoreV1Api).listNode({ labelSelector: POOL_NODES })).items;
    assert.equal(nodes.length, 6);
    const before = await Promise.all(COMPONENTS.map((c) => holderOf(mgmt, c)));
    // Built and imported first: the upgrade is what happens mid-rollout, not the image build.
    await loadKindlingImage(node, NEXT_TAG);
    const held = await holdOneNode(tenant);
    const watch = await startRolloutWatchers(mgmt, tenant, nodes);
    try {
      await addMotd(mgmt, MOTD);
      await eventually(
        `${held} cordoned, its drain held`,
        async () => watch.drains.cordons.has(held),
        3 * MINUTES,
        250,
      );
      await applyOverlayWithTag(mgmt, NEXT_TAG);
      await waitAvailable(mgmt, 6 * MINUTES, `kindling:${NEXT_TAG}`).catch(async (err: unknown) => {
        throw new Error(`Kindling's Pods:\n${await podProblems(mgmt)}`, { cause: err });
      });
      await newLeaders(mgmt, before);
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
      await watch.stop();
    }
    assertRollout(watch, nodes);
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
