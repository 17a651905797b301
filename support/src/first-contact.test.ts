import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { Writable } from 'node:stream';
import * as k8s from '#k8s';
import { createLogger } from './logger.js';
import { awaitFirstContact, contactDelayMs, contactError } from './first-contact.js';

function capturedLogger(): { log: ReturnType<typeof createLogger>; lines: () => Record<string, unknown>[] } {
  const raw: string[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _enc, cb) {
      raw.push(chunk.toString());
      cb();
    },
  });
  return {
    log: createLogger({ name: 't', destination: stream }),
    lines: () => raw.map((l) => JSON.parse(l) as Record<string, unknown>),
  };
}

function kubeConfigFor(server: string): k8s.KubeConfig {
  const kc = new k8s.KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'm', server, skipTLSVerify: true }],
    users: [{ name: 'u', token: 'not-a-real-token-value' }],
    contexts: [{ name: 'c', cluster: 'm', user: 'u' }],
    currentContext: 'c',
  });
  return kc;
}

/** A loopback port nothing listens on: a real connection refused. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as { port: number };
  await new Promise((r) => server.close(r));
  return port;
}

describe('first contact with the management cluster', () => {
  it('when attempts keep failing, it should wait 1 s, then twice as long each time, up to 30 s', () => {
    assert.deepEqual(
      [1, 2, 3, 4, 5, 6, 7, 20].map(contactDelayMs),
      [1_000, 2_000, 4_000, 8_000, 16_000, 30_000, 30_000, 30_000],
    );
  });

  it('when the apiserver answers with a status, it should say what the status means for the credentials', () => {
    assert.match(contactError(Object.assign(new Error('x'), { code: 401 })), /HTTP 401: .*credentials/);
    assert.equal(contactError(Object.assign(new Error('x'), { code: 503 })), 'HTTP 503');
    assert.equal(
      contactError(new Error('request failed', { cause: new Error('connect ECONNREFUSED 127.0.0.1:1') })),
      'request failed: connect ECONNREFUSED 127.0.0.1:1',
    );
  });

  it('when nothing listens at the server, it should log the address and the error at each attempt, with backoff, until the cluster answers', async () => {
    const server = `https://127.0.0.1:${await closedPort()}`;
    const { log, lines } = capturedLogger();
    const kc = kubeConfigFor(server);
    const waits: number[] = [];
    const api = kc.makeApiClient(k8s.VersionApi);
    let attempts = 0;
    const reached = await awaitFirstContact({
      kubeConfig: kc,
      log,
      stopped: new Promise(() => {}),
      // The real request twice (refused by the real socket), then an answer.
      probe: async () => (++attempts <= 2 ? (await api.getCode()).gitVersion : 'v1.36.3'),
      sleep: async (ms) => void waits.push(ms),
    });
    assert.equal(reached, true);
    assert.deepEqual(waits, [1_000, 2_000]);
    const messages = lines().map((l) => String(l.msg));
    assert.equal(messages[0], `Contacting the management cluster at ${server}`);
    assert.match(
      messages[1] ?? '',
      new RegExp(`^Cannot reach the management cluster at ${server}: .*ECONNREFUSED.*; retrying in 1 s$`),
    );
    assert.match(messages[2] ?? '', /retrying in 2 s$/);
    assert.equal(messages[3], `Reached the management cluster at ${server} (Kubernetes v1.36.3)`);
    assert.equal(JSON.stringify(lines()).includes('not-a-real-token-value'), false);
  });

  it('when the component is shut down while the cluster is unreachable, it should stop trying and say it never reached it', async () => {
    const { log } = capturedLogger();
    const { promise: stopped, resolve: stop } = Promise.withResolvers<void>();
    let attempts = 0;
    const reached = await awaitFirstContact({
      kubeConfig: kubeConfigFor('https://127.0.0.1:1'),
      log,
      stopped,
      probe: () => {
        attempts++;
        return Promise.reject(new Error('connect ECONNREFUSED'));
      },
      sleep: () => {
        stop();
        return new Promise(() => {});
      },
    });
    assert.equal(reached, false);
    assert.equal(attempts, 1);
  });
});
