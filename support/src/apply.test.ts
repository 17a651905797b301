import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type * as k8s from '#k8s';
import { createApplier, secretRef } from './apply.js';
import { ApiKubeConfig } from './kubeconfig.js';
import { plainHttpKubeConfig } from '../testing/index.js';
import { asRefusal, isConflict, statusCode } from './errors.js';

interface Seen {
  method: string;
  url: string;
  contentType: string;
  body: string;
}

const DISCOVERY: Record<string, object> = {
  '/api/v1': {
    kind: 'APIResourceList',
    groupVersion: 'v1',
    resources: [{ name: 'secrets', kind: 'Secret', namespaced: true, singularName: '', verbs: [] }],
  },
  '/apis/kindling.dev/v1beta1': {
    kind: 'APIResourceList',
    groupVersion: 'kindling.dev/v1beta1',
    resources: [{ name: 'nodepools', kind: 'NodePool', namespaced: true, singularName: '', verbs: [] }],
  },
};

describe('createApplier', () => {
  let server: Server;
  let kc: ApiKubeConfig;
  const seen: Seen[] = [];
  /** The answer to the next PATCH: status and body, or none at all. */
  let answer: { status: number; body: object } | 'never' = { status: 200, body: {} };

  before(async () => {
    server = createServer((req, res) => {
      let body = '';
      req.on('data', (chunk: Buffer) => (body += chunk.toString()));
      req.on('end', () => {
        const path = req.url ?? '';
        res.setHeader('Content-Type', 'application/json');
        if (req.method === 'GET') return void res.end(JSON.stringify(DISCOVERY[path] ?? {}));
        seen.push({ method: req.method ?? '', url: path, contentType: req.headers['content-type'] ?? '', body });
        if (answer === 'never') return;
        res.statusCode = answer.status;
        res.end(JSON.stringify(answer.body));
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    kc = plainHttpKubeConfig((server.address() as AddressInfo).port);
  });
  after(() => {
    server.closeAllConnections();
    server.close();
  });

  it('when it applies, it should send the object as it is and return the answer as the server wrote it', async () => {
    const secret: k8s.V1Secret = {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { name: 's', namespace: 'ns', labels: { a: 'b' } },
      stringData: { key: 'value' },
    };
    const live = { ...secret, metadata: { ...secret.metadata, creationTimestamp: '2026-11-27T00:00:00Z' } };
    answer = { status: 200, body: live };
    const got = await createApplier(kc, 'kindling-test').apply(secret);
    const last = seen.at(-1);
    assert.equal(last?.method, 'PATCH');
    assert.equal(last?.url, '/api/v1/namespaces/ns/secrets/s?fieldManager=kindling-test&force=true');
    assert.equal(last?.contentType, 'application/apply-patch+yaml');
    assert.deepEqual(JSON.parse(last?.body ?? ''), secret);
    // The wire's timestamp, not a Date: what the informers hold too.
    assert.deepEqual(got, live);
  });

  it('when it applies a status or a dry run, it should send it to the subresource or with dryRun', async () => {
    const pool = { apiVersion: 'kindling.dev/v1beta1', kind: 'NodePool', metadata: { name: 'p', namespace: 'ns' } };
    answer = { status: 200, body: pool };
    const applier = createApplier(kc, 'kindling-test');
    await applier.applyStatus({ ...pool, status: { replicas: 1 } } as k8s.KubernetesObject);
    assert.equal(
      seen.at(-1)?.url,
      '/apis/kindling.dev/v1beta1/namespaces/ns/nodepools/p/status?fieldManager=kindling-test&force=true',
    );
    await applier.apply(pool, { dryRun: true });
    assert.equal(
      seen.at(-1)?.url,
      '/apis/kindling.dev/v1beta1/namespaces/ns/nodepools/p?fieldManager=kindling-test&force=true&dryRun=All',
    );
  });

  it('when it merge-patches, it should send the patch as it is under its field manager and return the answer', async () => {
    const live = { apiVersion: 'v1', kind: 'Secret', metadata: { name: 's', namespace: 'ns', resourceVersion: '8' } };
    answer = { status: 200, body: live };
    const patch = { metadata: { resourceVersion: '7', annotations: { a: 'b' } }, data: { k: 'dg==' } };
    const got = await createApplier(kc, 'kindling-test').mergePatch(secretRef({ namespace: 'ns', name: 's' }), patch);
    const last = seen.at(-1);
    assert.equal(last?.url, '/api/v1/namespaces/ns/secrets/s?fieldManager=kindling-test');
    assert.equal(last?.contentType, 'application/merge-patch+json');
    assert.deepEqual(JSON.parse(last?.body ?? ''), patch);
    assert.deepEqual(got, live);
  });

  it('when a patch conflicts, it should fail with the 409 the apiserver answered', async () => {
    answer = {
      status: 409,
      body: { kind: 'Status', code: 409, reason: 'Conflict', message: 'the object has been modified' },
    };
    const err = await createApplier(kc, 'kindling-test')
      .mergePatch(secretRef({ namespace: 'ns', name: 's' }), { metadata: { resourceVersion: '1' } })
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    assert.equal(statusCode(err), 409);
    assert.ok(isConflict(err));
  });

  it('when the apiserver refuses, it should fail with its status code and message, as a refusal', async () => {
    answer = { status: 422, body: { kind: 'Status', code: 422, message: 'spec.x: Invalid value' } };
    const err = await createApplier(kc, 'kindling-test')
      .apply({ apiVersion: 'v1', kind: 'Secret', metadata: { name: 's', namespace: 'ns' } })
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    assert.equal(asRefusal(err, 'Secret', 'ns/s')?.refusal.message, 'spec.x: Invalid value');
    assert.equal(asRefusal(err, 'Secret', 'ns/s')?.refusal.code, 422);
  });

  it('when the kubeconfig has a deadline of its own and the apiserver never answers, it should give up at that deadline', async () => {
    answer = 'never';
    const short = new ApiKubeConfig(300);
    short.loadFromString(kc.exportConfig());
    const started = Date.now();
    await assert.rejects(
      createApplier(short, 'kindling-test').apply({
        apiVersion: 'v1',
        kind: 'Secret',
        metadata: { name: 's', namespace: 'ns' },
      }),
      { name: 'TimeoutError' },
    );
    assert.ok(Date.now() - started < 5_000, `gave up after ${Date.now() - started} ms`);
  });
});
