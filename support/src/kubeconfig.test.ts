import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer as createHttpServer, type Server as HttpServer } from 'node:http';
import { createServer as createHttpsServer, type Server as HttpsServer } from 'node:https';
import { createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import * as k8s from '#k8s';
import { createSecureServer, type Http2SecureServer } from 'node:http2';
import { getCACertificates, setDefaultCACertificates } from 'node:tls';
import { ApiKubeConfig, makeApiClient, setRequestGate, withSignal } from './kubeconfig.js';
import { createApplier, secretRef } from './apply.js';
import { plainHttpKubeConfig } from '../testing/index.js';
import { createCertificateAuthority, type CertificateAuthority } from '../../test/bed/src/pki.js';

/** A server that accepts connections and never answers: an apiserver that hangs (paused, partitioned). */
async function blackHole(): Promise<{ server: Server; port: number; sockets: Socket[] }> {
  const sockets: Socket[] = [];
  const server = createServer((s) => void sockets.push(s));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { server, port: (server.address() as { port: number }).port, sockets };
}

async function elapsed(call: () => Promise<unknown>): Promise<{ ms: number; err: unknown }> {
  const start = performance.now();
  const err = await call().then(
    () => undefined,
    (e: unknown) => e,
  );
  return { ms: performance.now() - start, err };
}

describe('ApiKubeConfig', () => {
  let hole: Awaited<ReturnType<typeof blackHole>>;
  before(async () => {
    hole = await blackHole();
  });
  after(() => {
    hole.sockets.forEach((s) => s.destroy());
    hole.server.close();
    setRequestGate(undefined);
  });

  it('when the apiserver never answers, it should fail every call after the request timeout', async () => {
    const kc = plainHttpKubeConfig(hole.port, 300);
    const core = kc.makeApiClient(k8s.CoreV1Api);
    const objects = k8s.KubernetesObjectApi.makeApiClient(kc);
    for (const call of [
      () => core.listNamespace(),
      () => objects.read({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'default' } }),
    ]) {
      const { ms, err } = await elapsed(call);
      assert.equal((err as Error | undefined)?.name, 'TimeoutError');
      assert.ok(ms >= 250 && ms < 3000, `failed after ${ms} ms`);
    }
  });

  it('when a call brings its own signal, it should abort on that signal instead', async () => {
    const core = plainHttpKubeConfig(hole.port, 60_000).makeApiClient(k8s.CoreV1Api);
    const { ms, err } = await elapsed(() => core.listNamespace({}, withSignal(AbortSignal.timeout(200))));
    assert.equal((err as Error | undefined)?.name, 'TimeoutError');
    assert.ok(ms < 3000, `failed after ${ms} ms`);
  });

  it("when the request gate refuses, it should send nothing and fail with the gate's error", async () => {
    const before = hole.sockets.length;
    setRequestGate(() => new Error('fenced'));
    const { err } = await elapsed(() =>
      plainHttpKubeConfig(hole.port, 300).makeApiClient(k8s.CoreV1Api).listNamespace(),
    );
    setRequestGate(undefined);
    assert.equal((err as Error | undefined)?.message, 'fenced');
    assert.equal(hole.sockets.length, before, 'a connection was opened although the gate refused');
  });
});

describe('makeApiClient', () => {
  let server: HttpServer;
  let kc: k8s.KubeConfig;
  const seen: string[] = [];

  before(async () => {
    // Accepts every request and never answers: what a hung apiserver looks like to a client.
    server = createHttpServer((req) => seen.push(`${req.method ?? ''} ${req.url ?? ''}`));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    kc = new k8s.KubeConfig();
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    kc.loadFromOptions({
      clusters: [{ name: 'c', server: url, skipTLSVerify: true }],
      users: [{ name: 'u', token: 't' }],
      contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
      currentContext: 'x',
    });
  });
  after(() => {
    server.closeAllConnections();
    server.close();
  });

  it('when the apiserver never answers, it should fail the request at the deadline', async () => {
    const started = Date.now();
    await assert.rejects(
      // A deadline long enough for the request to reach the server on a loaded machine.
      makeApiClient(kc, k8s.CoreV1Api, 1_000).readNode({ name: 'n1' }),
      (err: Error) => err.name === 'TimeoutError',
    );
    const took = Date.now() - started;
    assert.ok(took >= 990 && took < 5_000, `failed after ${took} ms`);
    assert.ok(
      seen.includes('GET /api/v1/nodes/n1'),
      'the request reached the server, authenticated as the kubeconfig says',
    );
  });

  it('when a per-call option adds a header, it should keep the deadline', async () => {
    const api = makeApiClient(kc, k8s.CoreV1Api, 200);
    await assert.rejects(
      api.patchNode({ name: 'n2', body: {} }, k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch)),
      (err: Error) => err.name === 'TimeoutError',
    );
  });

  it('when its stop signal aborts, it should tear down the request in flight before the deadline', async () => {
    const stop = new AbortController();
    const started = Date.now();
    const request = makeApiClient(kc, k8s.CoreV1Api, 60_000, stop.signal).readNode({ name: 'n4' });
    setTimeout(() => stop.abort(), 100);
    await assert.rejects(request, (err: Error) => err.name === 'AbortError');
    assert.ok(Date.now() - started < 2_000, 'the request waited for its deadline');
  });

  it('when an applier is given a deadline, it should have it too', async () => {
    const started = Date.now();
    // Its resource discovery fails first; client-node then trips over the abort error's read-only message, so
    // what surfaces is a TypeError, at the deadline all the same.
    await assert.rejects(
      createApplier(kc, 'kindling-test', 200).apply({ apiVersion: 'v1', kind: 'Node', metadata: { name: 'n3' } }),
    );
    assert.ok(Date.now() - started < 2_000);
    assert.ok(seen.includes('GET /api/v1'), 'the discovery request reached the server');
  });
});

describe('ApiKubeConfig connections', () => {
  let ca: CertificateAuthority;
  let server: HttpsServer;
  let port: number;
  /** TLS handshakes the server completed: one per connection. */
  let handshakes = 0;

  before(async () => {
    ca = await createCertificateAuthority('test apiserver CA');
    const serving = await ca.issue({ commonName: 'apiserver', ipAddresses: ['127.0.0.1'], usage: 'server' });
    server = createHttpsServer({ cert: serving.certPem, key: serving.keyPem }, (req, res) => {
      res.setHeader('Content-Type', 'application/json');
      // The discovery of Secrets (an applier's path), and a list for any other request.
      const secrets = { name: 'secrets', kind: 'Secret', namespaced: true, singularName: '', verbs: [] };
      if (req.url === '/api/v1') return void res.end(JSON.stringify({ groupVersion: 'v1', resources: [secrets] }));
      res.end(JSON.stringify({ kind: 'NamespaceList', apiVersion: 'v1', metadata: {}, items: [] }));
    });
    server.on('secureConnection', () => void handshakes++);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    port = (server.address() as AddressInfo).port;
  });
  after(() => {
    server.closeAllConnections();
    server.close();
  });

  const tlsConfig = (caPem: string): ApiKubeConfig => {
    const kc = new ApiKubeConfig(5_000);
    kc.loadFromOptions({
      clusters: [{ name: 'c', server: `https://127.0.0.1:${port}`, caData: Buffer.from(caPem).toString('base64') }],
      users: [{ name: 'u', token: 'x' }],
      contexts: [{ name: 'c', cluster: 'c', user: 'u' }],
      currentContext: 'c',
    });
    return kc;
  };

  // A connection goes back to the pool a moment after its answer was read, so the request right after may
  // open a second one: the bounds below allow that, and fail a connection per request.
  it('when requests follow one another, it should send them over kept-alive connections', async () => {
    const core = tlsConfig(ca.certPem).makeApiClient(k8s.CoreV1Api);
    const before = handshakes;
    for (let i = 0; i < 10; i++) await core.listNamespace();
    assert.ok(handshakes - before <= 2, `${handshakes - before} connections for 10 requests`);
  });

  it('when writes follow one another, it should send them over the same kept-alive connections', async () => {
    const applier = createApplier(tlsConfig(ca.certPem), 'kindling-test');
    const before = handshakes;
    for (let i = 0; i < 10; i++) await applier.mergePatch(secretRef({ namespace: 'ns', name: 's' }), {});
    assert.ok(handshakes - before <= 2, `${handshakes - before} connections for 10 writes`);
  });

  it('when the kubeconfig names no CA (a token to a server of public trust), it should reach it through the shared pool', async () => {
    const kc = new ApiKubeConfig(5_000);
    kc.loadFromOptions({
      clusters: [{ name: 'c', server: `https://127.0.0.1:${port}` }],
      users: [{ name: 'u', token: 'x' }],
      contexts: [{ name: 'c', cluster: 'c', user: 'u' }],
      currentContext: 'c',
    });
    // The system's trust, with the test CA in it for this test.
    const system = getCACertificates('default');
    setDefaultCACertificates([...system, ca.certPem]);
    try {
      const before = handshakes;
      const applier = createApplier(kc, 'kindling-test');
      for (let i = 0; i < 5; i++) await applier.mergePatch(secretRef({ namespace: 'ns', name: 's' }), {});
      assert.ok(handshakes - before <= 2, `${handshakes - before} connections for 5 writes and a discovery`);
    } finally {
      setDefaultCACertificates(system);
    }
  });

  it('when requests run at once, it should open connections for those in flight and reuse them after', async () => {
    const core = tlsConfig(ca.certPem).makeApiClient(k8s.CoreV1Api);
    const before = handshakes;
    for (let i = 0; i < 4; i++) await Promise.all(Array.from({ length: 4 }, () => core.listNamespace()));
    assert.ok(handshakes - before <= 8, `${handshakes - before} connections for 16 requests, 4 at a time`);
  });

  it('when requests follow one another, it should make their connection pool once, not per request', async () => {
    const proto = k8s.KubeConfig.prototype as unknown as { createDispatcher: (...a: unknown[]) => unknown };
    const original = proto.createDispatcher;
    let made = 0;
    proto.createDispatcher = function (this: unknown, ...a: unknown[]) {
      made++;
      return original.apply(this, a);
    };
    try {
      const core = tlsConfig(ca.certPem).makeApiClient(k8s.CoreV1Api);
      for (let i = 0; i < 5; i++) await core.listNamespace();
    } finally {
      proto.createDispatcher = original;
    }
    assert.equal(made, 1);
  });

  it("when the kubeconfig's TLS material changes, it should connect anew with it", async () => {
    const kc = tlsConfig(ca.certPem);
    const core = kc.makeApiClient(k8s.CoreV1Api);
    await core.listNamespace();
    const before = handshakes;
    const other = await createCertificateAuthority('another CA');
    // The same server CA plus another: a new TLS identity that still trusts the server.
    const cluster = kc.getCurrentCluster();
    assert.ok(cluster);
    Object.assign(cluster, { caData: Buffer.from(ca.certPem + other.certPem).toString('base64') });
    await core.listNamespace();
    assert.equal(handshakes - before, 1, 'the request after the change did not connect anew');
    Object.assign(cluster, { caData: Buffer.from(other.certPem).toString('base64') });
    await assert.rejects(
      core.listNamespace(),
      'a CA that does not sign the server is not bypassed by a kept connection',
    );
  });
});

describe('ApiKubeConfig protocol', () => {
  let server: Http2SecureServer;
  let port: number;
  const versions: string[] = [];

  before(async () => {
    const ca = await createCertificateAuthority('test apiserver CA');
    const serving = await ca.issue({ commonName: 'apiserver', ipAddresses: ['127.0.0.1'], usage: 'server' });
    // Offers HTTP/2 first, as the apiserver does.
    server = createSecureServer({ cert: serving.certPem, key: serving.keyPem, allowHTTP1: true }, (req, res) => {
      versions.push(req.httpVersion);
      res.setHeader('Content-Type', 'application/json');
      res.end(JSON.stringify({ kind: 'NamespaceList', apiVersion: 'v1', metadata: {}, items: [] }));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    port = (server.address() as AddressInfo).port;
  });
  after(() => server.close());

  it('when the server offers HTTP/2, it should still send every request over HTTP/1.1', async () => {
    const kc = new ApiKubeConfig(5_000);
    kc.loadFromOptions({
      clusters: [{ name: 'c', server: `https://127.0.0.1:${port}`, skipTLSVerify: true }],
      users: [{ name: 'u', token: 'x' }],
      contexts: [{ name: 'c', cluster: 'c', user: 'u' }],
      currentContext: 'c',
    });
    const core = kc.makeApiClient(k8s.CoreV1Api);
    await Promise.all(Array.from({ length: 4 }, () => core.listNamespace()));
    assert.deepEqual(versions, ['1.1', '1.1', '1.1', '1.1']);
  });
});
