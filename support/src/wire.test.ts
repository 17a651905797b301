import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { WATCH_SILENCE_MS, wireWatch, type WatchRequest } from './informer.js';
import { createApplier, secretRef } from './apply.js';
import { Lines } from './wire.js';
import { plainHttpKubeConfig } from '../testing/index.js';
import { ApiKubeConfig } from './kubeconfig.js';
import { statusCode } from './errors.js';

const SECRETS_RESOURCE = { name: 'secrets', kind: 'Secret', namespaced: true, singularName: '', verbs: [] };

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
    kc = plainHttpKubeConfig((server.address() as AddressInfo).port);
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

  it('when the apiserver takes the watch and never answers, it should fail with a timeout too', async () => {
    script = () => undefined;
    const got = await watch(300);
    assert.equal(got.connected, false);
    assert.equal((got.error as Error | undefined)?.name, 'TimeoutError');
  });

  it("when a watch is quiet, it should outlast the apiserver's minute between bookmarks", () => {
    assert.ok(WATCH_SILENCE_MS > 61_000, `a watch gives up after ${WATCH_SILENCE_MS} ms of silence`);
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

  it('when its signal aborts on an event, it should deliver nothing after it, even from the same chunk', async () => {
    const stop = new AbortController();
    script = (_req, res) => {
      res.writeHead(200);
      res.write(line('ADDED', 'a') + line('ADDED', 'b'));
    };
    const seen: string[] = [];
    const started = Date.now();
    await wireWatch(
      kc,
      '/api/v1/configmaps',
    )({
      query: {},
      signal: stop.signal,
      onConnected: () => undefined,
      onEvent: (type, object) => {
        seen.push(`${type} ${(object as { metadata: { name: string } }).metadata.name}`);
        stop.abort();
      },
    });
    assert.deepEqual(seen, ['ADDED a']);
    assert.ok(Date.now() - started < 2_000, 'resolved once aborted, the connection still open');
  });

  it('when a character is split across chunks, it should decode it whole', async () => {
    const name = 'é€😀';
    script = (_req, res) => {
      res.writeHead(200);
      const bytes = Buffer.from(line('ADDED', name));
      const cut = bytes.indexOf(Buffer.from('€')) + 1;
      res.write(bytes.subarray(0, cut));
      setTimeout(() => res.write(bytes.subarray(cut, cut + 2)), 20);
      setTimeout(() => res.end(bytes.subarray(cut + 2)), 40);
    };
    const got = await watch();
    assert.equal(got.error, undefined);
    assert.deepEqual(got.events, [`ADDED ${name}`]);
  });

  it('when the answer ends inside an event, it should fail the watch', async () => {
    script = (_req, res) => {
      res.writeHead(200);
      res.end(line('ADDED', 'a') + line('ADDED', 'b').slice(0, 20));
    };
    const got = await watch();
    assert.deepEqual(got.events, ['ADDED a']);
    assert.match((got.error as Error | undefined)?.message ?? '', /inside an event/);
  });
});

describe('Lines', () => {
  it('when a long line comes in small chunks, it should give it whole, once', () => {
    const lines = new Lines(2 * 1024 * 1024);
    const long = 'x'.repeat(1024 * 1024);
    const got: number[] = [];
    for (let i = 0; i < long.length; i += 1024) lines.push(long.slice(i, i + 1024), (l) => got.push(l.length));
    lines.push('\n\nshort\nrest', (l) => got.push(l.length));
    assert.deepEqual(got, [1024 * 1024, 5]);
    assert.ok(lines.pending, '"rest" waits for its end');
  });

  it('when a long line comes in many chunks, it should take time in proportion to its length', () => {
    const lines = new Lines(8 * 1024 * 1024);
    const chunk = 'x'.repeat(1024);
    const started = performance.now();
    for (let i = 0; i < 4 * 1024; i++) lines.push(chunk, () => undefined);
    let length = 0;
    lines.push('\n', (l) => (length = l.length));
    assert.equal(length, 4 * 1024 * 1024);
    // Joining and scanning the pending text again at each chunk took seconds here.
    assert.ok(performance.now() - started < 2_000, `${Math.round(performance.now() - started)} ms`);
  });

  it('when a line comes a character at a time, it should count each piece against the bound', () => {
    const lines = new Lines(1024 * 1024);
    assert.throws(() => {
      for (let i = 0; i < 100_000; i++) lines.push('z', () => undefined);
    }, /more than/);
  });

  it('when a line passes the bound, it should fail instead of holding more', () => {
    const lines = new Lines(10_000);
    assert.throws(() => {
      for (let i = 0; i < 20; i++) lines.push('y'.repeat(1_000), () => undefined);
    }, /more than 10000 characters/);
  });
});

describe('sendJson, through an applier', () => {
  let server: Server;
  let kc: ApiKubeConfig;
  let answer: { status: number; bytes: number } = { status: 200, bytes: 0 };

  before(async () => {
    server = createServer((req, res) => {
      res.setHeader('content-type', 'application/json');
      if (req.method === 'GET')
        return void res.end(JSON.stringify({ groupVersion: 'v1', resources: [SECRETS_RESOURCE] }));
      res.writeHead(answer.status);
      // A JSON string of the size asked for: an answer no object makes.
      const chunk = Buffer.alloc(64 * 1024, 'z');
      res.write('"');
      let left = answer.bytes;
      const more = (): void => {
        while (left > 0 && res.write(chunk.subarray(0, Math.min(left, chunk.length)))) left -= chunk.length;
        if (left > 0) return void res.once('drain', () => ((left -= chunk.length), more()));
        res.end('"');
      };
      more();
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    kc = plainHttpKubeConfig((server.address() as AddressInfo).port);
  });
  after(() => {
    server.closeAllConnections();
    server.close();
  });

  const patch = (): Promise<unknown> =>
    createApplier(kc, 'kindling-test').mergePatch(secretRef({ namespace: 'ns', name: 's' }), {});

  it('when an answer passes its bound, it should fail rather than hold it', async () => {
    answer = { status: 200, bytes: 20 * 1024 * 1024 };
    await assert.rejects(patch(), /an answer of more than/);
  });

  it('when an error answer is large, it should fail with its status and the start of its body', async () => {
    answer = { status: 500, bytes: 1024 * 1024 };
    const err = await patch().then(
      () => undefined,
      (e: unknown) => e,
    );
    assert.equal(statusCode(err), 500);
    assert.ok(String((err as { body?: unknown }).body).length <= 4 * 1024, 'a page that is not a Status: its start');
  });
});
