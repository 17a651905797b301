import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import * as k8s from '#k8s';
import { IGNITION_ERROR_HEADER, SECRET_KEYS, tokenSecretName } from '../../api/src/keys.js';
import { NotReadyError } from '../../support/src/errors.js';
import { IgnitionServerPayloadSource } from './payload.js';

const REQ = { namespace: 'clusters', pool: 'pool', hash: 'h1' };

/**
 * One local HTTP server answering both sides the source talks to: the token Secret as the apiserver
 * would, and /ignition with whatever the case sets.
 */
function fakeEnds(): { server: Server; answer: { status: number; code?: string } } {
  const answer: { status: number; code?: string } = { status: 200 };
  const server = createServer((req, res) => {
    if (req.url === `/api/v1/namespaces/${REQ.namespace}/secrets/${tokenSecretName(REQ.pool, REQ.hash)}`) {
      res.setHeader('content-type', 'application/json');
      res.end(
        JSON.stringify({
          apiVersion: 'v1',
          kind: 'Secret',
          metadata: { name: 'x' },
          data: { [SECRET_KEYS.token]: Buffer.from('tok').toString('base64') },
        }),
      );
      return;
    }
    res.statusCode = answer.status;
    if (answer.code) res.setHeader(IGNITION_ERROR_HEADER, answer.code);
    res.end(answer.status === 200 ? '{"ignition":{"version":"3.4.0"}}' : `${answer.code}: refused\n`);
  });
  return { server, answer };
}

describe('IgnitionServerPayloadSource', () => {
  const { server, answer } = fakeEnds();
  let source: IgnitionServerPayloadSource;

  before(async () => {
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const kubeConfig = new k8s.KubeConfig();
    // client-node refuses a plain-HTTP server unless TLS verification is off.
    kubeConfig.loadFromOptions({
      clusters: [{ name: 'c', server: url, skipTLSVerify: true }],
      users: [{ name: 'u' }],
      contexts: [{ name: 'x', cluster: 'c', user: 'u' }],
      currentContext: 'x',
    });
    source = new IgnitionServerPayloadSource({ kubeConfig, url, timeoutMs: 2_000 });
  });
  after(() => new Promise<void>((r) => server.close(() => r())));

  it('when the server answers 200, it should return the payload', async () => {
    Object.assign(answer, { status: 200, code: undefined });
    assert.equal((await source.fetch(REQ)).toString(), '{"ignition":{"version":"3.4.0"}}');
  });

  it('when the server does not know the token yet (its cache lags the Secret), it should be not-ready and ask again within a second', async () => {
    Object.assign(answer, { status: 401, code: 'IGN_TOKEN_REVOKED' });
    const err = await source.fetch(REQ).then(
      () => undefined,
      (e: unknown) => e,
    );
    assert.ok(err instanceof NotReadyError, String(err));
    assert.equal(err.retryAfterMs, 1_000);
    assert.match(err.message, /does not know the token of clusters\/pool@h1 yet/);
  });

  it('when the server refuses the token as forged or expired, it should fail with the status and code', async () => {
    Object.assign(answer, { status: 401, code: 'IGN_TOKEN_INVALID' });
    const err = await source.fetch(REQ).then(
      () => undefined,
      (e: unknown) => e,
    );
    assert.ok(err instanceof Error && !(err instanceof NotReadyError), String(err));
    assert.match(err.message, /refused the payload of clusters\/pool@h1: HTTP 401 IGN_TOKEN_INVALID$/);
  });

  it('when the payload is not generated yet (511), it should be not-ready', async () => {
    Object.assign(answer, { status: 511, code: 'IGN_PAYLOAD_PENDING' });
    assert.ok(
      (await source.fetch(REQ).then(
        () => undefined,
        (e: unknown) => e,
      )) instanceof NotReadyError,
    );
  });
});
