import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import * as k8s from '#k8s';
import { Writable } from 'node:stream';
import { gunzipSync } from 'node:zlib';
import { ANNOTATIONS, IGNITION_ERROR_HEADER, SECRET_KEYS, tokenSecretName } from '../../api/src/keys.js';
import { MAX_PAYLOAD_SECRET_BYTES } from '../../api/src/limits.js';
import { NotReadyError } from '../../support/src/errors.js';
import { createLogger } from '../../support/src/logger.js';
import { PAYLOAD_KEYS } from '../../api/src/node-agent.js';
import { payloadSecret } from './desired.js';
import {
  bootedPayload,
  BootedWaits,
  IgnitionServerPayloadSource,
  type PayloadRequest,
  type PayloadSource,
} from './payload.js';

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

describe('The config a node booted with, beside its target', () => {
  const fetched: PayloadRequest[] = [];
  const payloads: PayloadSource = {
    fetch: (req) => {
      fetched.push(req);
      if (req.hash === 'pending') return Promise.reject(new NotReadyError('ignition server answered 511'));
      return req.hash === 'refused'
        ? Promise.reject(new Error('ignition server refused the payload of clusters/pool@refused: HTTP 403'))
        : Promise.resolve(Buffer.from(`config at ${req.hash}`));
    },
  };
  const lines: string[] = [];
  const log = createLogger({
    name: 'booted-test',
    level: 'warn',
    destination: new Writable({ write: (chunk: Buffer, _e, done) => (lines.push(chunk.toString()), done()) }),
  });
  const node = (annotations: Record<string, string> = {}): k8s.V1Node => ({ metadata: { name: 'n1', annotations } });
  const at = (n: k8s.V1Node, booted: string | undefined): Parameters<typeof bootedPayload>[1] => ({
    namespace: 'clusters',
    pool: 'pool',
    target: 'h2',
    node: n,
    booted,
  });

  it('when a node was never updated in place, it should fetch the payload at the hash it booted with', async () => {
    assert.deepEqual(await bootedPayload(payloads, at(node(), 'h0'), new BootedWaits(), log), {
      hash: 'h0',
      config: Buffer.from('config at h0'),
    });
    assert.deepEqual(fetched.at(-1), { namespace: 'clusters', pool: 'pool', hash: 'h0' });
  });

  it('when the agent updated the node before, or the node booted at the target, it should hand over nothing', async () => {
    fetched.length = 0;
    assert.equal(
      await bootedPayload(payloads, at(node({ [ANNOTATIONS.currentConfig]: 'h1' }), 'h0'), new BootedWaits(), log),
      undefined,
    );
    assert.equal(await bootedPayload(payloads, at(node(), 'h2'), new BootedWaits(), log), undefined);
    assert.equal(await bootedPayload(payloads, at(node(), undefined), new BootedWaits(), log), undefined);
    assert.deepEqual(fetched, []);
  });

  it('when the ignition server refuses the booted payload, it should hand over nothing at once and say why', async () => {
    assert.equal(await bootedPayload(payloads, at(node(), 'refused'), new BootedWaits(), log), undefined);
    const [line] = lines.map((l) => JSON.parse(l) as { msg: string; reason: string });
    assert.match(line?.msg ?? '', /^No payload the node booted with/);
    assert.match(line?.reason ?? '', /HTTP 403/);
  });

  it('when the booted payload is not ready yet, it should have the hand-out wait for it, and hand over nothing once the node has waited long enough', async () => {
    let now = 0;
    const waits = new BootedWaits(60_000, () => now);
    await assert.rejects(bootedPayload(payloads, at(node(), 'pending'), waits, log), NotReadyError);
    now = 59_999;
    await assert.rejects(bootedPayload(payloads, at(node(), 'pending'), waits, log), NotReadyError);
    now = 60_000;
    assert.equal(await bootedPayload(payloads, at(node(), 'pending'), waits, log), undefined);
    // Another node waits on its own account.
    await assert.rejects(
      bootedPayload(payloads, at({ metadata: { name: 'n2' } }, 'pending'), waits, log),
      NotReadyError,
    );
  });

  it('when the booted config fits beside the target, it should be in the payload Secret as gzip; when it does not, it should be left out', () => {
    const booted = { hash: 'h0', config: Buffer.from('{"ignition":{"version":"3.4.0"}}') };
    const secret = payloadSecret({ node: 'n1', pool: 'pool', hash: 'h2', config: Buffer.from('{}'), booted });
    const data = secret.data ?? {};
    assert.equal(Buffer.from(data[PAYLOAD_KEYS.bootedHash] ?? '', 'base64').toString(), 'h0');
    assert.deepEqual(gunzipSync(Buffer.from(data[PAYLOAD_KEYS.bootedConfig] ?? '', 'base64')), booted.config);

    // Random bytes do not compress: the two would pass what the apiserver takes in one Secret.
    const big = Buffer.from(
      Array.from({ length: MAX_PAYLOAD_SECRET_BYTES / 2 }, () => Math.floor(Math.random() * 256)),
    );
    const full = payloadSecret({
      node: 'n1',
      pool: 'pool',
      hash: 'h2',
      config: big,
      booted: { hash: 'h0', config: big },
    });
    assert.deepEqual(Object.keys(full.data ?? {}).sort(), [PAYLOAD_KEYS.config, PAYLOAD_KEYS.hash].sort());
  });

  it('when the booted config inflates past what the agent inflates, it should be left out however well it compresses', () => {
    const booted = { hash: 'h0', config: Buffer.alloc(MAX_PAYLOAD_SECRET_BYTES + 1, 'a') };
    const secret = payloadSecret({ node: 'n1', pool: 'pool', hash: 'h2', config: Buffer.from('{}'), booted });
    assert.deepEqual(Object.keys(secret.data ?? {}).sort(), [PAYLOAD_KEYS.config, PAYLOAD_KEYS.hash].sort());
  });
});
