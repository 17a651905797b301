import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { SignJWT } from 'jose';
import request from 'supertest';
import { createLogger } from '../../support/src/logger.js';
import { createApp, FIRST_SERVED_MESSAGE, type AppDeps } from './app.js';
import { createTokenAuthority, type TokenAuthority } from './tokens.js';
import { joinFor, TokenIndex, type TokenRef, type TokenSecret, type TokenSecretEntry } from './token-index.js';
import { payloadBytes, type Payload } from './payload/store.js';
import { ecKeyPem, manualClock, memoryDestination } from '../testing/index.js';

const POOL = 'clusters/workers';
const HASH = 'abc123';
const ACCEPT = 'application/vnd.coreos.ignition+json;version=3.3.0, */*;q=0.1';
const TAIL = '"},"storage":{"files":[{"path":"/etc/secret-payload-marker","contents":{"source":"data:,x"}}]}}';
const PAYLOAD: Payload = { key: 'a'.repeat(64), minVersion: '3.0.0', tail: Buffer.from(TAIL), joinAt: TAIL.length - 3 };
const JOIN = {
  joinServer: 'https://guest.example:6443',
  joinCa: '-----BEGIN CERTIFICATE-----\nguest\n-----END CERTIFICATE-----\n',
  bootstrapToken: 'abcdef.0123456789abcdef',
};
const MARKER = 'secret-payload-marker';

interface Harness {
  app: ReturnType<typeof createApp>;
  deps: AppDeps;
  clock: ReturnType<typeof manualClock>;
  authority: TokenAuthority;
  index: TokenIndex;
  logs: string[];
  served: TokenSecretEntry[];
  missing: TokenSecretEntry[];
  secret(name: string, over?: Partial<TokenSecret>): Promise<{ token: string; entry: TokenSecretEntry }>;
}

async function harness(): Promise<Harness> {
  const clock = manualClock();
  const authority = await createTokenAuthority(ecKeyPem(), clock);
  const index = new TokenIndex();
  const dest = memoryDestination();
  const log = createLogger({ name: 'test', destination: dest });
  const served: TokenSecretEntry[] = [];
  const missing: TokenSecretEntry[] = [];
  const payloads = new Map([[PAYLOAD.key, PAYLOAD]]);
  const deps: AppDeps = {
    authority,
    tokens: index,
    payloads: { peek: (k) => payloads.get(k), lookup: (k) => Promise.resolve(payloads.get(k)) },
    onServed: (e) => void served.push(e),
    logFirstServed: (line) => log.info(line, FIRST_SERVED_MESSAGE),
    onPayloadMissing: (e) => void missing.push(e),
    load: () => Promise.resolve(),
    log,
    metrics: { request: () => undefined },
    now: () => clock.now(),
    busy: () => false,
  };
  return {
    app: createApp(deps),
    deps,
    clock,
    authority,
    index,
    logs: dest.lines,
    served,
    missing,
    async secret(name, over = {}) {
      const { token } = await authority.mint({ pool: over.pool ?? POOL, hash: over.hash ?? HASH, ttlMs: 3_600_000 });
      const entry = index.upsert({
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
      });
      entry.payload = { state: 'ready', key: PAYLOAD.key };
      return { token, entry };
    },
  };
}

describe('GET /ignition', () => {
  let h: Harness;
  before(async () => (h = await harness()));

  it('when the token is valid and the payload ready, it should serve the payload at the highest version the client accepts', async () => {
    const { token, entry } = await h.secret('ok');
    const res = await request(h.app)
      .get('/ignition')
      .set('Authorization', `Bearer ${token}`)
      .set('NodePool', POOL)
      .set('TargetConfigVersionHash', HASH)
      .set('Accept', ACCEPT);
    assert.equal(res.status, 200);
    assert.equal(res.headers['content-type'], 'application/vnd.coreos.ignition+json;version=3.3.0');
    assert.deepEqual(Buffer.from(res.text), payloadBytes(PAYLOAD, '3.3.0'));
    assert.deepEqual(h.served, [entry]);
    const again = await request(h.app)
      .get('/ignition')
      .set('Authorization', `Bearer ${token}`)
      .set('Accept', 'application/vnd.coreos.ignition+json;version=3.1.0');
    assert.equal(again.status, 200);
    assert.match(again.text, /"version":"3\.1\.0"/);
    assert.equal(h.served.length, 1, 'the first fetch is recorded once');
  });

  it("when the token Secret holds join material, it should splice the pool's join files into the payload, for the bootstrap token paired with the presented token", async () => {
    const { token } = await h.secret('joined', JOIN);
    const res = await request(h.app).get('/ignition').set('Authorization', `Bearer ${token}`).set('Accept', ACCEPT);
    assert.equal(res.status, 200);
    const body = JSON.parse(res.text) as { storage: { files: { path: string; contents: { source: string } }[] } };
    assert.deepEqual(
      body.storage.files.map((f) => f.path),
      ['/etc/secret-payload-marker', '/etc/kubernetes/pki/ca.crt', '/etc/kubernetes/bootstrap-kubeconfig'],
    );
    const kubeconfig = JSON.parse(
      Buffer.from(body.storage.files[2]?.contents.source.split(',')[1] ?? '', 'base64').toString(),
    ) as { clusters: { cluster: { server: string } }[]; users: { user: { token: string } }[] };
    assert.equal(kubeconfig.users[0]?.user.token, 'abcdef.0123456789abcdef');
    assert.equal(kubeconfig.clusters[0]?.cluster.server, 'https://guest.example:6443');
    assert.equal(Number(res.headers['content-length']), Buffer.byteLength(res.text));
  });

  it('when the rotated token is presented, it should get the rotated bootstrap token, and with Kindling-Join: omit no join files at all', async () => {
    const { token: rotated } = await h.authority.mint({ pool: POOL, hash: HASH, ttlMs: 3_600_000 });
    const { token } = await h.secret('rotated', {
      ...JOIN,
      rotatedToken: rotated,
      rotatedBootstrapToken: 'zyxwvu.0123456789zyxwvu',
    });
    const old = await request(h.app).get('/ignition').set('Authorization', `Bearer ${rotated}`).set('Accept', ACCEPT);
    const files = (text: string): string[] =>
      (JSON.parse(text) as { storage: { files: { path: string; contents: { source: string } }[] } }).storage.files.map(
        (f) => Buffer.from(f.contents.source.split(',')[1] ?? '', 'base64').toString(),
      );
    assert.ok(
      files(old.text).some((f) => f.includes('zyxwvu.0123456789zyxwvu')),
      'the rotated token gets the rotated bootstrap token',
    );
    const current = await request(h.app).get('/ignition').set('Authorization', `Bearer ${token}`).set('Accept', ACCEPT);
    assert.ok(
      files(current.text).some((f) => f.includes('abcdef.0123456789abcdef')),
      'the current token gets the current bootstrap token',
    );
    const omitted = await request(h.app)
      .get('/ignition')
      .set('Authorization', `Bearer ${token}`)
      .set('Kindling-Join', 'omit')
      .set('Accept', ACCEPT);
    assert.deepEqual(Buffer.from(omitted.text), payloadBytes(PAYLOAD, '3.3.0'));
  });

  it('when the payload is large and join files are spliced in, it should send the same bytes as the small path would, with its length', async () => {
    const big = `"},"storage":{"files":[{"path":"/opt/big","contents":{"source":"data:,${'x'.repeat(600_000)}"}}]},"systemd":{"units":[{"name":"${'u'.repeat(70_000)}"}]}}`;
    const joinAt = big.indexOf(']},"systemd"');
    const payload: Payload = { key: 'c'.repeat(64), minVersion: '3.0.0', tail: Buffer.from(big), joinAt };
    const deps: AppDeps = {
      ...h.deps,
      payloads: { peek: (k) => (k === payload.key ? payload : undefined), lookup: () => Promise.resolve(undefined) },
    };
    const app = createApp(deps);
    const { token, entry } = await h.secret('big', JOIN);
    entry.payload = { state: 'ready', key: payload.key };
    const res = await request(app)
      .get('/ignition')
      .set('Authorization', `Bearer ${token}`)
      .set('Accept', ACCEPT)
      .buffer(true)
      .parse((r, cb) => {
        const chunks: Buffer[] = [];
        r.on('data', (c: Buffer) => chunks.push(c));
        r.on('end', () => cb(null, Buffer.concat(chunks)));
      });
    assert.equal(res.status, 200);
    const expected = payloadBytes(payload, '3.3.0', joinFor(h.index.lookup(token, 0) as TokenRef));
    assert.equal(Number(res.headers['content-length']), expected.length);
    assert.ok((res.body as Buffer).equals(expected));
    const files = (
      JSON.parse((res.body as Buffer).toString()) as { storage: { files: { path: string }[] } }
    ).storage.files.map((f) => f.path);
    assert.deepEqual(files, ['/opt/big', '/etc/kubernetes/pki/ca.crt', '/etc/kubernetes/bootstrap-kubeconfig']);
    const head = await request(app).head('/ignition').set('Authorization', `Bearer ${token}`).set('Accept', ACCEPT);
    assert.equal(head.status, 200);
    assert.equal(Number(head.headers['content-length']), expected.length);
  });

  it('when a small payload is asked for at several versions, with and without join files, it should send the exact bytes of each every time', async () => {
    const { token } = await h.secret('versions', JOIN);
    const join = joinFor(h.index.lookup(token, 0) as TokenRef);
    const cases = [
      ['3.2.0', join],
      ['3.3.0', join],
      ['3.3.0', undefined],
      ['3.2.0', undefined],
      ['3.2.0', join],
    ] as const;
    for (const [version, joined] of cases) {
      let r = request(h.app)
        .get('/ignition')
        .set('Authorization', `Bearer ${token}`)
        .set('Accept', `application/vnd.coreos.ignition+json;version=${version}`);
      if (!joined) r = r.set('Kindling-Join', 'omit');
      const res = await r;
      const expected = payloadBytes(PAYLOAD, version, joined);
      assert.ok(Buffer.from(res.text).equals(expected), `${version}, join files ${joined ? 'in' : 'out'}`);
      assert.equal(Number(res.headers['content-length']), expected.length);
    }
  });

  it("when the token's Secret is known by metadata only, it should have it read, then serve; a token it does not hold stays refused", async () => {
    const { token, entry } = await h.secret('unloaded');
    const { token: stranger } = await h.authority.mint({ pool: POOL, hash: 'later', ttlMs: 3_600_000 });
    h.index.remove(entry.secret.key);
    h.index.markUnloaded({ key: entry.secret.key, pool: POOL, hash: HASH });
    h.index.markUnloaded({ key: 'clusters/later', pool: POOL, hash: 'later' });
    const loads: string[] = [];
    const app = createApp({
      ...h.deps,
      load: (pool, hash) => {
        loads.push(`${pool} ${hash}`);
        if (hash === HASH) h.index.upsert(entry.secret, entry.payload);
        return Promise.resolve();
      },
    });
    const res = await request(app).get('/ignition').set('Authorization', `Bearer ${token}`).set('Accept', ACCEPT);
    assert.equal(res.status, 200);
    assert.deepEqual(Buffer.from(res.text), payloadBytes(PAYLOAD, '3.3.0'));
    assert.equal((await request(app).get('/ignition').set('Authorization', `Bearer ${token}`)).status, 200);
    assert.deepEqual(loads, [`${POOL} ${HASH}`], 'read once: then it is known');
    const refused = await request(app).get('/ignition').set('Authorization', `Bearer ${stranger}`);
    assert.equal(refused.status, 401);
    assert.equal(refused.headers['kindling-error'], 'IGN_TOKEN_REVOKED');
    assert.deepEqual(loads, [`${POOL} ${HASH}`, `${POOL} later`]);
  });

  it('when the bearer token is missing, garbled, forged or expired, it should answer 401 without echoing it', async () => {
    const { token } = await h.secret('auth');
    const forger = await createTokenAuthority(ecKeyPem(), h.clock);
    const forged = (await forger.mint({ pool: POOL, hash: HASH, ttlMs: 3_600_000 })).token;
    const cases: [string | undefined, string][] = [
      [undefined, 'missing'],
      [`Basic ${Buffer.from('a:b').toString('base64')}`, 'basic'],
      ['Bearer', 'empty'],
      [`Bearer ${token} extra`, 'two words'],
      [`Bearer not-a-jwt`, 'garbled'],
      [`Bearer ${forged}`, 'forged'],
      [`Bearer ${token.slice(0, -4)}AAAA`, 'bad signature'],
    ];
    for (const [auth, what] of cases) {
      let r = request(h.app).get('/ignition');
      if (auth !== undefined) r = r.set('Authorization', auth);
      const res = await r;
      assert.equal(res.status, 401, what);
      assert.equal(res.headers['www-authenticate'], 'Bearer realm="ignition"');
      assert.match(res.headers['kindling-error'] ?? '', /^IGN_TOKEN_(MISSING|MALFORMED|INVALID)$/, what);
      assert.ok(res.text.startsWith(`${res.headers['kindling-error']}: `), `${what}: the body starts with the code`);
      assert.ok(
        !res.text.includes(token.slice(20)) && !res.text.includes(forged.slice(20)),
        `${what}: body echoes nothing`,
      );
    }
    h.clock.advance(3_600_000);
    const expired = await request(h.app).get('/ignition').set('Authorization', `Bearer ${token}`);
    assert.equal(expired.status, 401);
    assert.equal(expired.text, 'IGN_TOKEN_INVALID: invalid or expired token\n');
  });

  it('when the bearer is not of the token syntax, even as a token Secret holds it, it should answer IGN_TOKEN_MALFORMED and verify nothing', async () => {
    const garbled = 'not a token';
    await h.secret('garbled', { token: garbled });
    const { token } = await h.secret('syntax');
    let verifies = 0;
    const app = createApp({
      ...h.deps,
      authority: {
        remembered: (t) => h.authority.remembered(t),
        verify: (t) => {
          verifies++;
          return h.authority.verify(t);
        },
      },
    });
    for (const auth of [`Bearer ${garbled}`, `Bearer ${token}!`, `bearer ${token}`, 'Bearer ', `Bearer ${token},x`]) {
      const res = await request(app).get('/ignition').set('Authorization', auth);
      assert.equal(res.status, 401, auth);
      assert.equal(res.headers['kindling-error'], 'IGN_TOKEN_MALFORMED', auth);
    }
    assert.equal(verifies, 0);
    assert.equal((await request(app).get('/ignition').set('Authorization', `Bearer ${token}`)).status, 200);
  });

  it('when the token Secret was deleted or its expiry annotation passed, it should answer 401', async () => {
    const { token, entry } = await h.secret('revoked');
    assert.equal((await request(h.app).get('/ignition').set('Authorization', `Bearer ${token}`)).status, 200);
    h.index.remove(entry.secret.key);
    assert.equal((await request(h.app).get('/ignition').set('Authorization', `Bearer ${token}`)).status, 401);
    const { token: t2 } = await h.secret('expiring', { expiresAtMs: h.clock.now() + 1000 });
    assert.equal((await request(h.app).get('/ignition').set('Authorization', `Bearer ${t2}`)).status, 200);
    h.clock.advance(1000);
    assert.equal((await request(h.app).get('/ignition').set('Authorization', `Bearer ${t2}`)).status, 401);
  });

  it('when a served token is remembered as verified, it should still refuse it once its Secret is deleted or its exp passes', async () => {
    const { token, entry } = await h.secret('remembered');
    const get = (): request.Test => request(h.app).get('/ignition').set('Authorization', `Bearer ${token}`);
    for (let i = 0; i < 2; i++) assert.equal((await get()).status, 200);
    h.index.remove(entry.secret.key);
    const revoked = await get();
    assert.equal(revoked.status, 401);
    assert.equal(revoked.text, 'IGN_TOKEN_REVOKED: token revoked or unknown\n');
    assert.equal(revoked.headers['kindling-error'], 'IGN_TOKEN_REVOKED');
    h.index.upsert(entry.secret).payload = entry.payload;
    assert.equal((await get()).status, 200, 'the Secret back: served again');
    h.clock.advance(3_600_000);
    const expired = await get();
    assert.equal(expired.status, 401);
    assert.equal(expired.text, 'IGN_TOKEN_INVALID: invalid or expired token\n');
  });

  it('when the main thread verified a token as it was indexed, it should serve it without verifying it again, until its exp passes', async () => {
    const { token } = await h.secret('preverified');
    const claims = await h.authority.verify(token);
    let verifies = 0;
    const app = createApp({
      ...h.deps,
      authority: {
        remembered: () => undefined,
        verify: (t) => {
          verifies++;
          return h.authority.verify(t);
        },
      },
    });
    h.index.verified(token, claims as NonNullable<typeof claims>);
    const get = (): request.Test => request(app).get('/ignition').set('Authorization', `Bearer ${token}`);
    assert.equal((await get()).status, 200);
    assert.equal(verifies, 0, 'the claims handed over with the token');
    h.clock.advance(3_600_000);
    assert.equal((await get()).status, 401, 'claims past their exp are not used');
    assert.equal(verifies, 1, 'verified again, and refused');
  });

  it('when a token Secret holds a token signed by another key, it should refuse it though the token is indexed', async () => {
    const forger = await createTokenAuthority(ecKeyPem(), h.clock);
    const { token } = await forger.mint({ pool: POOL, hash: HASH, ttlMs: 3_600_000 });
    await h.secret('forged', { token });
    const res = await request(h.app).get('/ignition').set('Authorization', `Bearer ${token}`);
    assert.equal(res.status, 401);
    assert.equal(res.headers['kindling-error'], 'IGN_TOKEN_INVALID');
    assert.equal(h.index.lookup(token, h.clock.now())?.claims, undefined, 'no claims recorded for it');
  });

  it('when a valid token of another pool, or of another hash, sits in a Secret, it should answer 401', async () => {
    const other = 'clusters/other';
    // Each token is signed by this server and current; only the Secret holding it belongs elsewhere.
    const cases: [string, { pool: string; hash: string }][] = [
      ['a token of another pool', { pool: other, hash: HASH }],
      ['a token of another hash', { pool: POOL, hash: 'different' }],
    ];
    for (const [what, claims] of cases) {
      const { token } = await h.authority.mint({ ...claims, ttlMs: 3_600_000 });
      const put = (name: string, pool: string, hash: string): void => {
        h.index.upsert({
          key: `clusters/${name}`,
          namespace: 'clusters',
          name,
          uid: name,
          pool,
          hash,
          release: 'r',
          configSha256: 'c',
          inputsHash: 'h',
          token,
          resourceVersion: '1',
        }).payload = { state: 'ready', key: PAYLOAD.key };
      };
      const get = (): request.Test => request(h.app).get('/ignition').set('Authorization', `Bearer ${token}`);
      // The control: in a Secret of its own pool and hash, the same token is served.
      put(`own-${claims.hash}`, claims.pool, claims.hash);
      assert.equal((await get()).status, 200, `${what}, in its own Secret`);
      // A second Secret holding a token never takes it over (token-index.ts): the first one goes first.
      h.index.remove(`clusters/own-${claims.hash}`);
      put(`mismatch-${claims.hash}`, POOL, HASH);
      const res = await get();
      assert.equal(res.status, 401, `${what}, in a Secret of ${POOL} at ${HASH}`);
      assert.equal(res.text, 'IGN_TOKEN_REVOKED: token revoked or unknown\n');
      assert.ok(!res.text.includes(MARKER));
    }
  });

  it('when the NodePool or TargetConfigVersionHash header names another pool or hash, it should answer 403', async () => {
    const { token } = await h.secret('cross');
    const other = await request(h.app)
      .get('/ignition')
      .set('Authorization', `Bearer ${token}`)
      .set('NodePool', 'clusters/other');
    assert.equal(other.status, 403);
    assert.ok(!other.text.includes(MARKER));
    assert.equal(
      (
        await request(h.app)
          .get('/ignition')
          .set('Authorization', `Bearer ${token}`)
          .set('TargetConfigVersionHash', 'zzz')
      ).status,
      403,
    );
  });

  it('when the payload is pending, failed, or gone from memory and disk, it should answer 511', async () => {
    const { token, entry } = await h.secret('pending');
    entry.payload = { state: 'pending' };
    assert.equal((await request(h.app).get('/ignition').set('Authorization', `Bearer ${token}`)).status, 511);
    entry.payload = { state: 'failed', reason: 'InvalidConfig', message: 'bad' };
    const failed = await request(h.app).get('/ignition').set('Authorization', `Bearer ${token}`);
    assert.equal(failed.status, 511);
    assert.match(failed.text, /^IGN_PAYLOAD_INVALID_CONFIG: .*InvalidConfig/);
    entry.payload = { state: 'ready', key: 'b'.repeat(64) };
    const gone = await request(h.app).get('/ignition').set('Authorization', `Bearer ${token}`);
    assert.equal(gone.status, 511);
    assert.equal(gone.headers['kindling-error'], 'IGN_PAYLOAD_REGENERATING');
    assert.deepEqual(h.missing, [entry]);
  });

  it('when the client accepts no spec version the payload fits, it should answer 406', async () => {
    const { token } = await h.secret('old-client');
    assert.equal(
      (
        await request(h.app)
          .get('/ignition')
          .set('Authorization', `Bearer ${token}`)
          .set('Accept', 'application/vnd.coreos.ignition+json;version=2.2.0')
      ).status,
      406,
    );
  });

  it('when another path or method is asked for, it should answer 404 whatever the token', async () => {
    const { token } = await h.secret('paths');
    for (const path of ['/', '/ignition/', '/ignitionx', '/config/worker', '/healthz']) {
      assert.equal((await request(h.app).get(path).set('Authorization', `Bearer ${token}`)).status, 404, path);
    }
    assert.equal((await request(h.app).post('/ignition').set('Authorization', `Bearer ${token}`)).status, 404);
    assert.equal(
      (
        await request(h.app)
          .get('/ignition')
          .set('Authorization', `Bearer ${token}`)
          .set('Content-Length', '100000')
          .send('x'.repeat(100000))
      ).status,
      413,
    );
  });

  it('when requests are logged, it should give the pool and status and never a token', async () => {
    const { token } = await h.secret('logged');
    await request(h.app).get('/ignition').set('Authorization', `Bearer ${token}`);
    await request(h.app).get('/ignition').set('Authorization', `Bearer ${token}`).set('NodePool', 'x/y');
    const lines = h.logs.map((l) => JSON.parse(l) as { status?: number; nodePool?: string });
    assert.ok(lines.some((l) => l.status === 200 && l.nodePool === POOL));
    assert.ok(lines.some((l) => l.status === 403 && l.nodePool === POOL));
    const all = h.logs.join('\n');
    assert.ok(!all.includes(token.split('.')[1] as string), 'no token payload in any log line');
    assert.ok(!/Bearer\s+ey/i.test(all));
  });
});

/** Deterministic pseudo-random numbers, so a failing fuzz case can be replayed. */
function prng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

describe('fuzz', () => {
  let h: Harness;
  let server: Server;
  before(async () => {
    h = await harness();
    server = createServer(h.app);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  });
  after(() => new Promise<void>((r) => server.close(() => r())));

  it('when 10,000 malformed, forged, expired, revoked and cross-pool requests arrive, it should serve no payload byte, no 500, and keep running', async () => {
    const rand = prng(42);
    const pick = <T>(xs: T[]): T => xs[Math.floor(rand() * xs.length)] as T;
    const { token: good } = await h.secret('fuzz-good');
    const { token: revoked, entry: revokedEntry } = await h.secret('fuzz-revoked');
    h.index.remove(revokedEntry.secret.key);
    const { token: short } = await h.authority.mint({ pool: POOL, hash: HASH, ttlMs: 1000 });
    h.index.upsert({
      key: 'clusters/fuzz-short',
      namespace: 'clusters',
      name: 'fuzz-short',
      uid: 's',
      pool: POOL,
      hash: HASH,
      release: 'r',
      configSha256: 'c',
      inputsHash: 'h',
      token: short,
      resourceVersion: '1',
    }).payload = { state: 'ready', key: PAYLOAD.key };
    h.clock.advance(1000);
    const otherKey = ecKeyPem();
    const forger = await createTokenAuthority(otherKey, h.clock);
    const forged = (await forger.mint({ pool: POOL, hash: HASH, ttlMs: 3_600_000 })).token;
    const [hd, body, sig] = good.split('.') as [string, string, string];
    const noneAlg = `${Buffer.from('{"alg":"none","typ":"JWT"}').toString('base64url')}.${body}.`;
    const hs256 = await new SignJWT(JSON.parse(Buffer.from(body, 'base64url').toString()) as Record<string, unknown>)
      .setProtectedHeader({ alg: 'HS256' })
      .sign(Buffer.from('x'.repeat(32)));
    const mutate = (t: string): string => {
      const i = Math.floor(rand() * t.length);
      return t.slice(0, i) + pick(['A', '_', '-', '.', '', '==', 'é'.normalize('NFD').slice(0, 1)]) + t.slice(i + 1);
    };
    const tokens = (): string =>
      pick([
        revoked,
        short,
        forged,
        noneAlg,
        hs256,
        mutate(good),
        mutate(good),
        `${hd}.${body}`,
        `${hd}..${sig}`,
        `${body}.${hd}.${sig}`,
        '',
        'x'.repeat(Math.floor(rand() * 5000)),
        good.toUpperCase(),
        `${good}.${sig}`,
      ]);
    const authorization = (): string | undefined =>
      pick([
        undefined,
        `Bearer ${tokens()}`,
        `bearer ${good}`,
        `Bearer  ${good}`,
        `Bearer ${good} `,
        `Token ${good}`,
        tokens(),
        `Bearer ${good}`,
      ]);
    const poolHeader = (): string | undefined =>
      pick([
        undefined,
        'clusters/other',
        'clusters/workers ',
        '',
        'x'.repeat(300),
        '../../etc',
        'clusters/workers\u0000',
      ]);
    let served = 0;
    const statuses = new Map<number, number>();
    const build = (auth: string | undefined, pool: string | undefined): request.Test => {
      let r = request(server).get(
        rand() < 0.85
          ? '/ignition'
          : pick(['/ignition?x=1', '/Ignition', '/ignition/../ignition', '/%00', '/ignition/']),
      );
      if (auth !== undefined) r = r.set('Authorization', auth);
      if (pool !== undefined && !pool.includes('\u0000')) r = r.set('NodePool', pool);
      if (rand() < 0.2)
        r = r.set(
          'Accept',
          pick(['text/html', 'application/vnd.coreos.ignition+json;version=9', '*/*;q=abc', ',,,;;']),
        );
      return r;
    };
    const one = async (): Promise<void> => {
      const auth = authorization();
      const pool = poolHeader();
      // The only requests allowed to succeed: the good token (the HTTP parser trims outer blanks) with no or
      // its own pool header; they are not counted.
      const legit =
        auth?.trim() === `Bearer ${good}` && (pool === undefined || pool.includes('\u0000') || pool.trim() === POOL);
      const res = await build(auth, pool).ok(() => true);
      statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
      if (!legit && res.text.includes(MARKER)) served++;
      assert.ok(res.status < 500 || res.status === 511, `status ${res.status} for ${auth?.slice(0, 30)}`);
    };
    for (let i = 0; i < 10_000; i += 50) await Promise.all(Array.from({ length: 50 }, one));
    assert.equal(served, 0);
    assert.ok(!statuses.has(500));
    assert.ok((statuses.get(401) ?? 0) > 5000, JSON.stringify([...statuses]));
    assert.ok((statuses.get(403) ?? 0) > 0 && (statuses.get(404) ?? 0) > 0);
    // Raw bytes the HTTP client would not send: the server's parser answers, the process stays up.
    for (const raw of [
      'GET /ignition HTTP/1.1\r\nAuthorization: Bearer \x01\x02\r\n\r\n',
      'GET /ignition HTTP/1.1\r\nHost: x\r\nAuthorization: ' + 'A'.repeat(70_000) + '\r\n\r\n',
      '\x16\x03\x01garbage\r\n\r\n',
    ]) {
      const answer = await new Promise<string>((resolve) => {
        const s = connect((server.address() as AddressInfo).port, '127.0.0.1', () => s.end(raw));
        let data = '';
        s.on('data', (d: Buffer) => (data += d.toString()));
        s.on('close', () => resolve(data));
        s.on('error', () => resolve(data));
      });
      assert.ok(!answer.includes(MARKER) && !/^HTTP\/1\.1 (200|500)/.test(answer), answer.slice(0, 60));
    }
    assert.equal(
      (await request(server).get('/ignition').set('Authorization', `Bearer ${good}`)).status,
      200,
      'still serving',
    );
  });
});
