import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'node:https';
import { connect as netConnect, type Socket } from 'node:net';
import { connect as tlsConnect, type TLSSocket } from 'node:tls';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger } from '../../../support/src/logger.js';
import { createCertificateAuthority } from '../../../test/bed/src/pki.js';
import { createTokenAuthority, type TokenAuthority } from '../tokens.js';
import { TokenIndex, type TokenSecret } from '../token-index.js';
import { payloadBytes, type Payload } from '../payload/payload.js';
import type { PayloadObserver } from '../payload/store.js';
import { ecKeyPem, memoryDestination } from '../../testing/index.js';
import { eventually } from '../../../test/bed/src/eventually.js';
import { FIRST_SERVED_MESSAGE } from '../app.js';
import type { ThreadStats } from './messages.js';
import { answerWithin, profilingFlags, ServingPool } from './pool.js';

const POOL = 'clusters/workers';
const HASH = 'h1';

/** The main thread's payloads in memory, as the store holds them: bytes in shared memory, observed. */
class Payloads {
  readonly held = new Map<string, Payload>();
  /** Payloads the store would read back from disk. */
  readonly disk = new Map<string, Payload>();
  readonly lookups: string[] = [];
  /** Payloads larger than the memory cache: read back from disk for each lookup, never held. */
  readonly tooLarge = new Set<string>();
  readonly touched = new Map<string, number>();
  #observer: PayloadObserver | undefined;

  observe(o: PayloadObserver): void {
    this.#observer = o;
    for (const p of this.held.values()) o.cached(p);
  }

  add(key: string, text: string): Payload {
    const tail = Buffer.from(new SharedArrayBuffer(Buffer.byteLength(text)));
    tail.write(text);
    const p: Payload = { key, minVersion: '3.0.0', tail, joinAt: text.length - 3 };
    this.held.set(key, p);
    this.disk.set(key, p);
    this.#observer?.cached(p);
    return p;
  }

  evict(key: string): void {
    this.held.delete(key);
    this.#observer?.evicted(key);
  }

  async lookup(key: string): Promise<Payload | undefined> {
    this.lookups.push(key);
    const p = this.disk.get(key);
    if (p && !this.tooLarge.has(key)) {
      this.held.set(key, p);
      this.#observer?.cached(p);
    }
    return p;
  }

  touch(key: string, hits: number): void {
    this.touched.set(key, (this.touched.get(key) ?? 0) + hits);
  }
}

function get(
  port: number,
  ca: string,
  headers: Record<string, string>,
): Promise<{ status: number; body: Buffer; code?: string }> {
  return new Promise((resolve, reject) => {
    const r = request(
      { host: '127.0.0.1', port, path: '/ignition', ca, headers, servername: 'localhost', agent: false },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          resolve({
            status: res.statusCode ?? 0,
            body: Buffer.concat(chunks),
            code: res.headers['kindling-error'] as string | undefined,
          }),
        );
      },
    );
    r.on('error', reject);
    r.end();
  });
}

/** A server certificate for localhost, tls.crt and tls.key in `dir`; its CA's certificate. */
async function serverCertificate(dir: string): Promise<string> {
  const authorityCa = await createCertificateAuthority('serving CA');
  const pair = await authorityCa.issue({ commonName: 'ignition', dnsNames: ['localhost'], usage: 'server' });
  await writeFile(join(dir, 'tls.crt'), pair.certPem);
  await writeFile(join(dir, 'tls.key'), pair.keyPem);
  return authorityCa.certPem;
}

/** A connection that has had one answer (so the server counted it) and stays open, kept alive. */
function answeredConnection(port: number, ca: string): Promise<TLSSocket> {
  return new Promise((resolve, reject) => {
    const s = tlsConnect({ host: '127.0.0.1', port, ca, servername: 'localhost' }, () =>
      s.write('GET /ignition HTTP/1.1\r\nHost: x\r\n\r\n'),
    );
    let seen = '';
    s.on('data', (d: Buffer) => {
      seen += d.toString('latin1');
      if (/\r\n\r\n[\s\S]*\n$/.test(seen)) resolve(s);
    });
    s.on('error', reject);
  });
}

/**
 * A child process holding `n` TCP connections to the port that never start a handshake (a test process
 * holding both ends would need twice the descriptors). It prints `open` once all are connected, and the
 * number still open on each line it reads.
 */
const IDLE_HOLDER = `
const { connect } = require('node:net');
const [port, n] = process.argv.slice(1).map(Number);
let connected = 0, closed = 0;
for (let i = 0; i < n; i++) {
  const s = connect(port, '127.0.0.1', () => { if (++connected === n) console.log('open'); });
  s.on('error', () => {});
  s.on('close', () => closed++);
}
require('node:readline').createInterface({ input: process.stdin }).on('line', () => console.log(n - closed));
`;

describe('serving threads', () => {
  let dir: string;
  let ca: string;
  let authority: TokenAuthority;
  let index: TokenIndex;
  let payloads: Payloads;
  let pool: ServingPool;
  const served: string[] = [];
  const servedAt = new Map<string, number>();
  /** The main thread's log (the threads' own log nothing: their level is silent). */
  const logged = memoryDestination();
  const missing: string[] = [];
  const loads: string[] = [];
  let onLoad: (pool: string, hash: string) => void = () => undefined;

  const secret = async (
    name: string,
    over: Partial<TokenSecret> = {},
  ): Promise<{ token: string; secret: TokenSecret }> => {
    const { token } = await authority.mint({ pool: POOL, hash: over.hash ?? HASH, ttlMs: 3_600_000 });
    return {
      token,
      secret: {
        key: `clusters/${name}`,
        namespace: 'clusters',
        name,
        uid: name,
        pool: POOL,
        hash: HASH,
        release: 'r',
        configSha256: 'c',
        inputsHash: 'h',
        token,
        resourceVersion: '1',
        ...over,
      },
    };
  };
  const headers = (token: string): Record<string, string> => ({
    authorization: `Bearer ${token}`,
    nodepool: POOL,
    accept: 'application/vnd.coreos.ignition+json;version=3.3.0',
  });
  /** Fresh connections, so both threads take some of them. */
  const many = async (token: string, n = 20): Promise<{ status: number; body: Buffer; code?: string }[]> =>
    Promise.all(Array.from({ length: n }, () => get(pool.port, ca, headers(token))));

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'serving-'));
    ca = await serverCertificate(dir);
    authority = await createTokenAuthority(ecKeyPem());
    index = new TokenIndex();
    payloads = new Payloads();
    pool = new ServingPool({
      threads: 2,
      address: '127.0.0.1:0',
      certFile: join(dir, 'tls.crt'),
      keyFile: join(dir, 'tls.key'),
      publicKeyPem: authority.publicKeyPem,
      index,
      store: payloads,
      onServed: (key, atMs) => {
        served.push(key);
        servedAt.set(key, atMs);
      },
      onPayloadMissing: (key) => void missing.push(key),
      load: (p, h) => {
        loads.push(`${p} ${h}`);
        onLoad(p, h);
        return Promise.resolve();
      },
      onFailed: (err) => assert.fail(err),
      log: createLogger({ name: 'test', destination: logged }),
      logName: 'test',
      logLevel: 'silent',
      reloadIntervalMs: 60_000,
      statsIntervalMs: 100,
      maxConnections: 4096,
    });
    pool.start();
    await pool.listen();
  });

  after(async () => {
    await pool?.drain(1000);
    await rm(dir, { recursive: true, force: true });
  });

  it('when the index changes on the main thread, every thread should answer from it: the payload, then 401 once the Secret is gone', async () => {
    const p = payloads.add('a'.repeat(64), '"},"storage":{"files":[{"path":"/etc/marker"}]}}');
    const { token, secret: s } = await secret('changes');
    index.upsert(s, { state: 'ready', key: p.key });
    const ok = await many(token);
    assert.deepEqual(
      ok.map((r) => r.status),
      Array(20).fill(200),
    );
    for (const r of ok) assert.ok(r.body.equals(payloadBytes(p, '3.3.0')));
    index.remove(s.key);
    const refused = await many(token);
    assert.deepEqual(
      refused.map((r) => r.code),
      Array(20).fill('IGN_TOKEN_REVOKED'),
      'revoked on every thread',
    );
  });

  it('when a first payload is served, the main thread should hear of it with its time, write its log line (no token), and count every request of every thread', async () => {
    const p = payloads.add('b'.repeat(64), '"},"storage":{"files":[{"path":"/etc/b"}]}}');
    const { token, secret: s } = await secret('first');
    index.upsert(s, { state: 'ready', key: p.key });
    const before = await pool.requests();
    const sent = Date.now();
    const earlier = logged.lines.length;
    await many(token, 10);
    // Told after the response went out: it may arrive a little after the client has its bytes.
    await eventually(
      'the first fetch heard of',
      () => Promise.resolve(served.includes(s.key) ? true : undefined),
      20_000,
      50,
    );
    assert.ok(served.filter((k) => k === s.key).length <= 2, 'once per thread at most');
    const at = servedAt.get(s.key) ?? 0;
    assert.ok(at >= sent && at <= Date.now(), 'the time it was served, from the thread');
    const lines = logged.lines
      .slice(earlier)
      .map((l) => JSON.parse(l) as { msg: string; status?: number; nodePool?: string; thread?: number })
      .filter((l) => l.msg === FIRST_SERVED_MESSAGE);
    assert.ok(lines.length >= 1 && lines.length <= 2, 'a line per thread that served it first');
    for (const l of lines) assert.deepEqual([l.status, l.nodePool, typeof l.thread], [200, POOL, 'number']);
    assert.ok(!logged.lines.join('\n').includes(token.split('.')[1] as string), 'no token in any line');
    // Counted on the threads, summed when asked (as a metrics scrape does).
    await eventually(
      'the 200s counted',
      async () => (((await pool.requests())['200'] ?? 0) - (before['200'] ?? 0) === 10 ? true : undefined),
      20_000,
      100,
    );
    await eventually(
      'the store told which payloads are used',
      () => Promise.resolve((payloads.touched.get(p.key) ?? 0) >= 1 ? true : undefined),
      20_000,
      100,
    );
  });

  it('when the threads listen (on Linux each on a socket of its own on the port, elsewhere on one shared socket), every thread should take a share of new connections', async () => {
    const p = payloads.add('e'.repeat(64), '"},"storage":{"files":[{"path":"/etc/e"}]}}');
    const { token, secret: s } = await secret('spread');
    index.upsert(s, { state: 'ready', key: p.key });
    const before = (await pool.stats()).map((t) => t.requests['200'] ?? 0);
    await many(token, 40);
    // A thread counts a response when it has finished writing it, which may come after the client has its bytes.
    const took = await eventually(
      'the 40 responses counted',
      async () => {
        const took = (await pool.stats()).map((t, i) => (t.requests['200'] ?? 0) - (before[i] ?? 0));
        return took.reduce((a, b) => a + b) === 40 ? took : undefined;
      },
      20_000,
      50,
    );
    assert.ok(
      took.every((n) => n > 0),
      `every thread took some (${took.join(', ')})`,
    );
  });

  it('when asked for the pauses, it should give each thread with a connection open its event-loop delay and GC pauses since the last ask, and no delay once none is open', async () => {
    // Sixteen connections: the kernel spreads them over the threads' sockets, so each thread holds some (all on one: 2^-15).
    const sockets = await Promise.all(
      Array.from(
        { length: 16 },
        () =>
          new Promise<Socket>((resolve, reject) => {
            const socket = netConnect(pool.port, '127.0.0.1', () => resolve(socket)).once('error', reject);
          }),
      ),
    );
    try {
      await pool.pauses();
      await new Promise((r) => setTimeout(r, 100));
      const pauses = await pool.pauses();
      assert.equal(pauses.length, 2);
      for (const p of pauses) {
        assert.ok(p, 'every thread answered');
        // Sampled every 10 ms while a connection is open: a loop never late shows about that.
        assert.ok(p.delayP50Ms >= 5 && p.delayP50Ms <= p.delayP99Ms && p.delayP99Ms <= p.delayMaxMs, JSON.stringify(p));
        assert.ok(p.gcCount >= 0 && p.gcTotalMs >= p.gcMaxMs, JSON.stringify(p));
      }
    } finally {
      for (const socket of sockets) socket.destroy();
    }
    // Each thread's sampler stops at its first sample with no connection open (earlier tests' kept-alive ones
    // close within the server's keep-alive timeout), and an idle thread is not woken again.
    await eventually(
      'every thread idle and not sampled',
      async () => {
        await pool.pauses();
        await new Promise((r) => setTimeout(r, 100));
        return (await pool.pauses()).every((p) => p?.delayMaxMs === 0);
      },
      15_000,
    );
  });

  it('when asked to collect, every thread should collect its own heap and answer, each in turn', async () => {
    await pool.pauses();
    const started = performance.now();
    await pool.collect();
    // An unanswered thread is given up after 5 s: far quicker means each answered.
    assert.ok(performance.now() - started < 4000, `answered in ${performance.now() - started} ms`);
    // A thread's GC entries reach its observer a moment after the collection.
    await new Promise((r) => setTimeout(r, 100));
    const pauses = await pool.pauses();
    for (const p of pauses)
      assert.ok(p && p.gcMajorCount >= 1, `the thread made a full collection: ${JSON.stringify(p)}`);
  });

  it("when a token's Secret is known by metadata only, a thread should have the main thread read it, then serve", async () => {
    const p = payloads.add('c'.repeat(64), '"},"storage":{"files":[{"path":"/etc/c"}]}}');
    const { token, secret: s } = await secret('lazy', { hash: 'lazy1' });
    index.markUnloaded({ key: s.key, pool: POOL, hash: 'lazy1' });
    onLoad = (_p, h) => {
      if (h === 'lazy1') index.upsert(s, { state: 'ready', key: p.key });
    };
    const r = await get(pool.port, ca, headers(token));
    assert.equal(r.status, 200);
    assert.ok(r.body.equals(payloadBytes(p, '3.3.0')));
    assert.deepEqual(loads, [`${POOL} lazy1`]);
  });

  it('when a payload leaves memory, the threads should let go of it and ask the main thread for it again', async () => {
    const p = payloads.add('d'.repeat(64), '"},"storage":{"files":[{"path":"/etc/d"}]}}');
    const { token, secret: s } = await secret('evicted');
    index.upsert(s, { state: 'ready', key: p.key });
    assert.equal((await get(pool.port, ca, headers(token))).status, 200);
    payloads.evict(p.key);
    const again = await many(token, 6);
    assert.deepEqual(
      again.map((r) => r.status),
      Array(6).fill(200),
    );
    assert.ok(payloads.lookups.includes(p.key), 'read back through the main thread');
    payloads.evict(p.key);
    payloads.disk.delete(p.key);
    const gone = await get(pool.port, ca, headers(token));
    assert.equal(gone.code, 'IGN_PAYLOAD_REGENERATING');
    await eventually(
      'the main thread told to regenerate',
      () => Promise.resolve(missing.includes(s.key) ? true : undefined),
      20_000,
      50,
    );
  });

  it('when a ready payload is larger than the memory cache, a thread should serve it from the bytes the main thread read back, not report it missing', async () => {
    const p = payloads.add('f'.repeat(64), '"},"storage":{"files":[{"path":"/etc/f"}]}}');
    payloads.tooLarge.add(p.key);
    payloads.evict(p.key);
    const { token, secret: s } = await secret('large');
    index.upsert(s, { state: 'ready', key: p.key });
    const lookupsBefore = payloads.lookups.length;
    for (const r of await many(token, 6)) {
      assert.equal(r.status, 200, r.code);
      assert.ok(r.body.equals(payloadBytes(p, '3.3.0')));
    }
    assert.ok(payloads.lookups.length > lookupsBefore, 'read back through the main thread');
    assert.ok(!missing.includes(s.key), 'never reported missing, so never regenerated');
  });

  it('when 10,000 connections sit idle before their handshake, a real /ignition fetch should still be served', async () => {
    const p = payloads.add('e'.repeat(64), '"},"storage":{"files":[{"path":"/etc/e"}]}}');
    const { token, secret: s } = await secret('flooded');
    index.upsert(s, { state: 'ready', key: p.key });
    const holder = spawn(process.execPath, ['-e', IDLE_HOLDER, String(pool.port), '10000'], {
      stdio: ['pipe', 'pipe', 'inherit'],
    });
    try {
      const lines = createInterface({ input: holder.stdout })[Symbol.asyncIterator]();
      assert.equal((await lines.next()).value, 'open');
      const r = await get(pool.port, ca, headers(token));
      assert.equal(r.status, 200);
      assert.ok(r.body.equals(payloadBytes(p, '3.3.0')));
      holder.stdin.write('\n');
      const still = Number((await lines.next()).value);
      assert.ok(still >= 9_000, `served while ${still} idle connections were open`);
    } finally {
      holder.kill();
    }
  });
});

describe('serving threads under a connection cap', () => {
  let dir: string;
  let ca: string;
  let pool: ServingPool;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'serving-cap-'));
    ca = await serverCertificate(dir);
    pool = new ServingPool({
      threads: 2,
      address: '127.0.0.1:0',
      certFile: join(dir, 'tls.crt'),
      keyFile: join(dir, 'tls.key'),
      publicKeyPem: (await createTokenAuthority(ecKeyPem())).publicKeyPem,
      index: new TokenIndex(),
      store: new Payloads(),
      onServed: () => undefined,
      onPayloadMissing: () => undefined,
      load: () => Promise.resolve(),
      onFailed: (err) => assert.fail(err),
      log: createLogger({ name: 'test', level: 'silent' }),
      logName: 'test',
      logLevel: 'silent',
      reloadIntervalMs: 60_000,
      maxConnections: 3,
    });
    pool.start();
    await pool.listen();
  });

  after(async () => {
    await pool?.drain(1000);
    await rm(dir, { recursive: true, force: true });
  });

  it('when the process holds --max-connections connections over its threads, it should answer the next one 503 IGN_SERVER_BUSY, and serve again once one closes', async () => {
    const held = [];
    for (let i = 0; i < 3; i++) held.push(await answeredConnection(pool.port, ca));
    const refused = await get(pool.port, ca, {});
    assert.equal(refused.status, 503);
    assert.equal(refused.code, 'IGN_SERVER_BUSY');
    assert.equal(refused.body.toString(), 'IGN_SERVER_BUSY: too many connections to this server, retry later\n');
    held.pop()?.destroy();
    await eventually(
      'a connection served again',
      async () => ((await get(pool.port, ca, {})).code === 'IGN_TOKEN_MISSING' ? true : undefined),
      20_000,
      50,
    );
    for (const s of held) s.destroy();
    const requests = await pool.requests();
    assert.ok((requests['503'] ?? 0) >= 1, 'the 503s counted');
  });
});

describe("serving threads' use of payloads", () => {
  let dir: string;
  let ca: string;
  let authority: TokenAuthority;
  const index = new TokenIndex();
  const payloads = new Payloads();
  let pool: ServingPool;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'serving-used-'));
    ca = await serverCertificate(dir);
    authority = await createTokenAuthority(ecKeyPem());
    pool = new ServingPool({
      threads: 1,
      address: '127.0.0.1:0',
      certFile: join(dir, 'tls.crt'),
      keyFile: join(dir, 'tls.key'),
      publicKeyPem: authority.publicKeyPem,
      index,
      store: payloads,
      onServed: () => undefined,
      onPayloadMissing: () => undefined,
      load: () => Promise.resolve(),
      onFailed: (err) => assert.fail(err),
      log: createLogger({ name: 'test', level: 'silent' }),
      logName: 'test',
      logLevel: 'silent',
      reloadIntervalMs: 60_000,
      // Uses reach the store only when stats are asked for, by the test.
      statsIntervalMs: 3_600_000,
      maxConnections: 4096,
    });
    pool.start();
    await pool.listen();
  });

  after(async () => {
    await pool?.drain(1000);
    await rm(dir, { recursive: true, force: true });
  });

  it('when the pauses are asked for, the payloads served since the last look should still count as used, once', async () => {
    const p = payloads.add('a'.repeat(64), '"},"storage":{"files":[{"path":"/etc/a"}]}}');
    const { token } = await authority.mint({ pool: POOL, hash: HASH, ttlMs: 3_600_000 });
    index.upsert(
      {
        key: 'clusters/used',
        namespace: 'clusters',
        name: 'used',
        uid: 'used',
        pool: POOL,
        hash: HASH,
        release: 'r',
        configSha256: 'c',
        inputsHash: 'h',
        token,
        resourceVersion: '1',
      },
      { state: 'ready', key: p.key },
    );
    const headers = {
      authorization: `Bearer ${token}`,
      nodepool: POOL,
      accept: 'application/vnd.coreos.ignition+json;version=3.3.0',
    };
    assert.equal((await get(pool.port, ca, headers)).status, 200);
    await pool.pauses();
    assert.equal(payloads.touched.get(p.key), 1, 'told to the store');
    await pool.requests();
    assert.equal(payloads.touched.get(p.key), 1, 'and not told again');
  });
});

describe('serving thread questions', () => {
  const fallback: ThreadStats = { requests: {}, used: {} };

  it('when a thread answers, it should resolve with its answer and let go of the waiter', async () => {
    const waiting = new Map<number, (s: ThreadStats) => void>();
    const answer = answerWithin(waiting, 1, 60_000, fallback);
    waiting.get(1)?.({ requests: { 200: 3 }, used: {} });
    assert.deepEqual(await answer, { requests: { 200: 3 }, used: {} });
    assert.equal(waiting.size, 0);
  });

  it('when a thread does not answer in time, it should resolve with the fallback and let go of the waiter', async () => {
    const waiting = new Map<number, (s: ThreadStats) => void>();
    assert.equal(await answerWithin(waiting, 1, 10, fallback), fallback);
    assert.equal(waiting.size, 0);
  });
});

describe('serving thread flags', () => {
  it('when the process profiles its CPU, it should give the threads the profiling flags with their values and no other flag', () => {
    assert.deepEqual(
      profilingFlags([
        '--cpu-prof',
        '--cpu-prof-dir',
        '/tmp/prof',
        '--max-old-space-size=512',
        '--cpu-prof-interval=500',
      ]),
      ['--cpu-prof', '--cpu-prof-dir=/tmp/prof', '--cpu-prof-interval=500'],
    );
    assert.deepEqual(profilingFlags(['--enable-source-maps']), []);
  });
});
