import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { wireWatch, type WatchRequest } from './informer.js';
import { ApiKubeConfig } from './kubeconfig.js';
import { statusCode } from './errors.js';

/** How the fake apiserver answers the next watch. */
type Script = (req: IncomingMessage, res: ServerResponse) => void;

const line = (type: string, name: string): string =>
  `${JSON.stringify({ type, object: { metadata: { name, resourceVersion: name } } })}\n`;

describe("watchEvents, through the informer's wireWatch", () => {
  let server: Server;
  let kc: ApiKubeConfig;
  let script: Script = (_req, res) => res.end();
  let lastUrl = '';

  before(async () => {
    server = createServer((req, res) => {
      lastUrl = req.url ?? '';
      script(req, res);
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    kc = new ApiKubeConfig(5_000);
    kc.loadFromOptions({
      clusters: [
        { name: 'c', server: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, skipTLSVerify: true },
      ],
      users: [{ name: 'u', token: 't' }],
      contexts: [{ name: 'c', cluster: 'c', user: 'u' }],
      currentContext: 'c',
    });
  });
  after(() => {
    server.closeAllConnections();
    server.close();
  });

  /** Runs one watch; resolves with what it delivered and how it ended. */
  async function watch(
    silenceMs = 5_000,
    query: WatchRequest['query'] = {},
    signal = new AbortController().signal,
  ): Promise<{ events: string[]; connected: boolean; error?: unknown }> {
    const seen = { events: [] as string[], connected: false };
    const fn = wireWatch(kc, '/api/v1/configmaps', silenceMs);
    try {
      await fn({
        query,
        signal,
        onConnected: () => (seen.connected = true),
        onEvent: (type, object) =>
          seen.events.push(`${type} ${(object as { metadata: { name: string } }).metadata.name}`),
      });
      return seen;
    } catch (error) {
      return { ...seen, error };
    }
  }

  it('when events come split across chunks, it should deliver each whole, in order, and end with the answer', async () => {
    script = (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      const text = line('ADDED', 'a') + line('MODIFIED', 'b') + '\n' + line('DELETED', 'c');
      res.write(text.slice(0, 10));
      setTimeout(() => res.write(text.slice(10, 70)), 20);
      setTimeout(() => res.end(text.slice(70)), 40);
    };
    const got = await watch(5_000, { resourceVersion: '7', labelSelector: 'a=b,c in (d)', allowWatchBookmarks: true });
    assert.equal(got.error, undefined);
    assert.ok(got.connected);
    assert.deepEqual(got.events, ['ADDED a', 'MODIFIED b', 'DELETED c']);
    const query = new URL(lastUrl, 'http://x').searchParams;
    assert.equal(query.get('watch'), 'true');
    assert.equal(query.get('labelSelector'), 'a=b,c in (d)');
    assert.equal(query.get('allowWatchBookmarks'), 'true');
  });

  it('when a connected watch stays silent, it should fail with a timeout after the silence it tolerates', async () => {
    script = (_req, res) => {
      res.writeHead(200);
      res.write(line('ADDED', 'a'));
    };
    const started = Date.now();
    const got = await watch(300);
    assert.deepEqual(got.events, ['ADDED a']);
    assert.equal((got.error as Error | undefined)?.name, 'TimeoutError');
    assert.ok(Date.now() - started < 3_000);
  });

  it('when the apiserver does not answer the connect, it should fail with a timeout too', async () => {
    script = () => undefined;
    const got = await watch(300);
    assert.equal(got.connected, false);
    assert.equal((got.error as Error | undefined)?.name, 'TimeoutError');
  });

  it('when the apiserver refuses the watch, it should fail with its status code', async () => {
    script = (_req, res) => {
      res.writeHead(410, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ kind: 'Status', code: 410, reason: 'Expired' }));
    };
    const got = await watch();
    assert.equal(got.connected, false);
    assert.equal(statusCode(got.error), 410);
  });

  it('when a line is not JSON, it should fail the watch', async () => {
    script = (_req, res) => {
      res.writeHead(200);
      res.end(`${line('ADDED', 'a')}<html>\n`);
    };
    const got = await watch();
    assert.deepEqual(got.events, ['ADDED a']);
    assert.ok(got.error instanceof SyntaxError);
  });

  it('when its signal aborts, it should resolve at once and deliver nothing more', async () => {
    const stop = new AbortController();
    script = (_req, res) => {
      res.writeHead(200);
      res.write(line('ADDED', 'a'));
      setTimeout(() => stop.abort(), 50);
      setTimeout(() => res.end(line('ADDED', 'b')), 200);
    };
    const got = await watch(5_000, {}, stop.signal);
    assert.equal(got.error, undefined);
    assert.deepEqual(got.events, ['ADDED a']);
  });
});
