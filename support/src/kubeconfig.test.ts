import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server, type Socket } from 'node:net';
import * as k8s from '@kubernetes/client-node';
import { ApiKubeConfig, setRequestGate, withSignal } from './kubeconfig.js';

/** A server that accepts connections and never answers: an apiserver that hangs (paused, partitioned). */
async function blackHole(): Promise<{ server: Server; port: number; sockets: Socket[] }> {
  const sockets: Socket[] = [];
  const server = createServer((s) => void sockets.push(s));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { server, port: (server.address() as { port: number }).port, sockets };
}

function configFor(port: number, timeoutMs: number): ApiKubeConfig {
  const kc = new ApiKubeConfig(timeoutMs);
  kc.loadFromOptions({
    clusters: [{ name: 'c', server: `http://127.0.0.1:${port}`, skipTLSVerify: true }],
    users: [{ name: 'u', token: 'x' }],
    contexts: [{ name: 'c', cluster: 'c', user: 'u' }],
    currentContext: 'c',
  });
  return kc;
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
    const kc = configFor(hole.port, 300);
    const core = kc.makeApiClient(k8s.CoreV1Api);
    const objects = k8s.KubernetesObjectApi.makeApiClient(kc);
    for (const call of [() => core.listNamespace(), () => objects.read({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'default' } })]) {
      const { ms, err } = await elapsed(call);
      assert.equal((err as Error | undefined)?.name, 'TimeoutError');
      assert.ok(ms >= 250 && ms < 3000, `failed after ${ms} ms`);
    }
  });

  it('when a call brings its own signal, it should abort on that signal instead', async () => {
    const core = configFor(hole.port, 60_000).makeApiClient(k8s.CoreV1Api);
    const { ms, err } = await elapsed(() => core.listNamespace({}, withSignal(AbortSignal.timeout(200))));
    assert.equal((err as Error | undefined)?.name, 'TimeoutError');
    assert.ok(ms < 3000, `failed after ${ms} ms`);
  });

  it('when the request gate refuses, it should send nothing and fail with the gate\'s error', async () => {
    const before = hole.sockets.length;
    setRequestGate(() => new Error('fenced'));
    const { err } = await elapsed(() => configFor(hole.port, 300).makeApiClient(k8s.CoreV1Api).listNamespace());
    setRequestGate(undefined);
    assert.equal((err as Error | undefined)?.message, 'fenced');
    assert.equal(hole.sockets.length, before, 'a connection was opened although the gate refused');
  });
});
