/**
 * End to end on a real node (issue 25): a management cluster from the test bed with one real node — containerd,
 * the kubelet, kube-proxy, the CNI bridge and CoreDNS (test/bed/src/node.ts) — on which Kindling is installed
 * from deploy/ as Pods. Only this file builds the node (test/bed/node/build.sh, cached like the test bed).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Resolver } from 'node:dns/promises';
import { request } from 'node:http';
import { request as httpsRequest } from 'node:https';
import * as k8s from '#k8s';
import { startCluster, eventually, installCapiCrds, type Cluster } from '../bed/src/index.js';
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

const MINUTES = 60_000;

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

describe('Kindling installed from deploy/ on a real node', { timeout: 30 * MINUTES }, () => {
  let mgmt: Cluster;
  let node: KubeNode;

  before(async () => {
    await createNodeNetwork();
    mgmt = await startCluster({
      name: 'management',
      scheduler: true,
      podNetwork: { address: NODE_NETWORK.hostAddress },
    });
    node = await startNode({ mgmt });
  });

  after(async () => {
    await node?.stop();
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
    await provideOperatorInputs(mgmt, NODE_NETWORK.hostAddress);
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

  it('when Kindling is rolled to a new image tag, every Deployment should be Available on it and lead again', async () => {
    const leases = mgmt.kubeConfig.makeApiClient(k8s.CoordinationV1Api);
    const holderOf = async (component: string): Promise<string> =>
      (await leases.readNamespacedLease({ name: `kindling-${component}`, namespace: SYSTEM_NS })).spec
        ?.holderIdentity ?? '';
    const before = await Promise.all(COMPONENTS.map(holderOf));
    await loadKindlingImage(node, NEXT_TAG);
    await applyOverlayWithTag(mgmt, NEXT_TAG);
    await waitAvailable(mgmt, 6 * MINUTES, `kindling:${NEXT_TAG}`).catch(async (err: unknown) => {
      throw new Error(`Kindling's Pods:\n${await podProblems(mgmt)}`, { cause: err });
    });
    for (const [i, component] of COMPONENTS.entries()) {
      const holder = await eventually(`a new holder of kindling-${component}`, async () => {
        const h = await holderOf(component);
        return h !== '' && h !== before[i] ? h : undefined;
      });
      assert.notEqual(holder, before[i]);
    }
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
