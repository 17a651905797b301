import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import * as k8s from '@kubernetes/client-node';
import { makeApiClient, makeObjectApi } from './clients.js';

describe('makeApiClient', () => {
  let server: Server;
  let kc: k8s.KubeConfig;
  const seen: string[] = [];

  before(async () => {
    // Accepts every request and never answers: what a hung apiserver looks like to a client.
    server = createServer((req) => seen.push(`${req.method ?? ''} ${req.url ?? ''}`));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    kc = new k8s.KubeConfig();
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    kc.loadFromOptions({ clusters: [{ name: 'c', server: url, skipTLSVerify: true }], users: [{ name: 'u', token: 't' }], contexts: [{ name: 'x', cluster: 'c', user: 'u' }], currentContext: 'x' });
  });
  after(() => {
    server.closeAllConnections();
    server.close();
  });

  it('when the apiserver never answers, it should fail the request at the deadline', async () => {
    const started = Date.now();
    await assert.rejects(makeApiClient(kc, k8s.CoreV1Api, 200).readNode({ name: 'n1' }), (err: Error) => err.name === 'TimeoutError');
    const took = Date.now() - started;
    assert.ok(took >= 190 && took < 2_000, `failed after ${took} ms`);
    assert.ok(seen.includes('GET /api/v1/nodes/n1'), 'the request reached the server, authenticated as the kubeconfig says');
  });

  it('when a per-call option adds a header, it should keep the deadline', async () => {
    const api = makeApiClient(kc, k8s.CoreV1Api, 200);
    await assert.rejects(api.patchNode({ name: 'n2', body: {} }, k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch)), (err: Error) => err.name === 'TimeoutError');
  });

  it('when its stop signal aborts, it should tear down the request in flight before the deadline', async () => {
    const stop = new AbortController();
    const started = Date.now();
    const request = makeApiClient(kc, k8s.CoreV1Api, 60_000, stop.signal).readNode({ name: 'n4' });
    setTimeout(() => stop.abort(), 100);
    await assert.rejects(request, (err: Error) => err.name === 'AbortError');
    assert.ok(Date.now() - started < 2_000, 'the request waited for its deadline');
  });

  it('when the object API is used, it should have the deadline too', async () => {
    const started = Date.now();
    // Its resource discovery fails first; client-node then trips over the abort error's read-only message, so
    // what surfaces is a TypeError, at the deadline all the same.
    await assert.rejects(makeObjectApi(kc, 200).read({ apiVersion: 'v1', kind: 'Node', metadata: { name: 'n3' } }));
    assert.ok(Date.now() - started < 2_000);
    assert.ok(seen.includes('GET /api/v1'), 'the discovery request reached the server');
  });
});
