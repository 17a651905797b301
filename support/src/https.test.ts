import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { connect as tlsConnect, createServer as createTlsServer, type ConnectionOptions } from 'node:tls';
import type { AddressInfo } from 'node:net';
import { connect } from 'node:net';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { X509Certificate } from 'node:crypto';
import { fstatSync } from 'node:fs';
import { Agent, request as httpsRequest } from 'node:https';
import { createLogger } from './logger.js';
import { createCertificateAuthority, type CertificateAuthority } from '../../test/bed/src/pki.js';
import { startHttpsServer, type HttpsServer } from './https.js';

function peerSerial(port: number, ca: string, opts: { maxVersion?: 'TLSv1.1' | 'TLSv1.3' } = {}): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = tlsConnect({ host: '127.0.0.1', port, ca, servername: 'localhost', ...opts }, () => {
      const serial = s.getPeerX509Certificate()?.serialNumber ?? '';
      s.end();
      resolve(serial);
    });
    s.on('error', reject);
  });
}

/**
 * A client that really offers TLS 1.1 and nothing newer. OpenSSL 3 allows TLS 1.1 only at security level 0,
 * so without it the client would refuse by itself and a "refused" test would prove nothing about the server.
 */
const TLS11_CLIENT: ConnectionOptions = { minVersion: 'TLSv1.1', maxVersion: 'TLSv1.1', ciphers: 'DEFAULT@SECLEVEL=0' };

/** The protocol and cipher suite a handshake settled on (`TLSv1.3 TLS_AES_128_GCM_SHA256`), or its error. */
function handshake(port: number, opts: ConnectionOptions): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = tlsConnect({ host: '127.0.0.1', port, rejectUnauthorized: false, ...opts }, () => {
      resolve(`${s.getProtocol() ?? ''} ${s.getCipher().name}`);
      s.end();
    });
    s.on('error', reject);
  });
}

/**
 * Whether a client that comes back with the session its first connection was given (a TLS 1.3 ticket, or a
 * TLS 1.2 session) gets it resumed; undefined when the first connection was given none before it closed
 * (the server sends a TLS 1.3 ticket or session name before it answers the client's close).
 */
async function resumes(port: number, ca: string, maxVersion: 'TLSv1.2' | 'TLSv1.3'): Promise<boolean | undefined> {
  const opts: ConnectionOptions = { host: '127.0.0.1', port, ca, servername: 'localhost', maxVersion };
  const session = await new Promise<Buffer | undefined>((resolve, reject) => {
    let given: Buffer | undefined;
    const s = tlsConnect(opts, () => s.end());
    s.on('session', (b: Buffer) => void (given = b));
    s.on('close', () => resolve(given));
    s.on('error', reject);
  });
  if (session === undefined) return undefined;
  return new Promise((resolve, reject) => {
    const s = tlsConnect({ ...opts, session }, () => {
      resolve(s.isSessionReused());
      s.end();
    });
    s.on('error', reject);
  });
}

/** TLS 1.2 clients offering one suite only; OpenSSL names them without the TLS_ prefix. */
const TLS12_OFFERING = (suite: string): ConnectionOptions => ({ maxVersion: 'TLSv1.2', ciphers: suite });

/**
 * How long the server keeps a connection that never finishes its handshake (3 s when it would keep it
 * longer): silent, or `trickling` a record header then a byte every 100 ms, as a slow-loris client would.
 */
function heldFor(port: number, trickling: boolean): Promise<number> {
  const started = Date.now();
  return new Promise((resolve) => {
    let timer: NodeJS.Timeout | undefined;
    const s = connect(port, '127.0.0.1', () => {
      if (!trickling) return;
      s.write(Buffer.from([0x16, 0x03, 0x01, 0x02, 0x00]));
      timer = setInterval(() => s.write(Buffer.from([0x01])), 100);
    });
    const giveUp = setTimeout(() => s.destroy(), 3000);
    s.on('error', () => {});
    s.on('close', () => {
      clearInterval(timer);
      clearTimeout(giveUp);
      resolve(Date.now() - started);
    });
  });
}

describe('HTTPS serving port', () => {
  let dir: string;
  let ca: CertificateAuthority;
  let server: HttpsServer;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'https-'));
    ca = await createCertificateAuthority('serving CA');
    const pair = await ca.issue({ commonName: 'a', dnsNames: ['localhost'], usage: 'server' });
    await writeFile(join(dir, 'tls.crt'), pair.certPem);
    await writeFile(join(dir, 'tls.key'), pair.keyPem);
    server = await startHttpsServer({
      address: '127.0.0.1:0',
      certFile: join(dir, 'tls.crt'),
      keyFile: join(dir, 'tls.key'),
      app: (_req, res) => res.end('ok'),
      log: createLogger({ name: 'test', level: 'silent' }),
      reloadIntervalMs: 100,
      headersTimeoutMs: 500,
      requestTimeoutMs: 1000,
      handshakeTimeoutMs: 300,
    });
  });
  after(async () => {
    await server?.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('when the certificate files change, it should serve the new certificate to new connections', async () => {
    const before = await peerSerial(server.port, ca.certPem);
    const next = await ca.issue({ commonName: 'b', dnsNames: ['localhost'], usage: 'server' });
    await writeFile(join(dir, 'tls.key'), next.keyPem);
    await writeFile(join(dir, 'tls.crt'), next.certPem);
    const expected = new X509Certificate(next.certPem).serialNumber;
    const deadline = Date.now() + 5000;
    let now = before;
    while (now !== expected && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 100));
      now = await peerSerial(server.port, ca.certPem);
    }
    assert.notEqual(before, expected);
    assert.equal(now, expected);
  });

  it('when the new key does not match the certificate, it should keep serving the old pair', async () => {
    const current = await peerSerial(server.port, ca.certPem);
    const other = await ca.issue({ commonName: 'c', dnsNames: ['localhost'], usage: 'server' });
    await writeFile(join(dir, 'tls.crt'), other.certPem);
    assert.equal(await server.reload(), false);
    assert.equal(await peerSerial(server.port, ca.certPem), current);
  });

  it('when a client offers at most TLS 1.1, it should refuse the handshake', async () => {
    // The control: the same client completes a TLS 1.1 handshake with a server that allows it.
    const pair = await ca.issue({ commonName: 'tls11', dnsNames: ['localhost'], usage: 'server' });
    const permissive = createTlsServer(
      { cert: pair.certPem, key: pair.keyPem, minVersion: 'TLSv1.1', ciphers: 'DEFAULT@SECLEVEL=0' },
      (s) => s.end(),
    );
    await new Promise<void>((r) => permissive.listen(0, '127.0.0.1', r));
    try {
      assert.match(await handshake((permissive.address() as AddressInfo).port, TLS11_CLIENT), /^TLSv1\.1 /);
    } finally {
      permissive.close();
    }
    // Against the serving port, the server ends it with a protocol_version alert (70): the refusal is the server's.
    await assert.rejects(handshake(server.port, TLS11_CLIENT), (err: Error & { code?: string }) => {
      assert.equal(err.code, 'ERR_SSL_TLSV1_ALERT_PROTOCOL_VERSION', err.message);
      return true;
    });
    assert.match(
      await handshake(server.port, { minVersion: 'TLSv1.2', ciphers: 'DEFAULT@SECLEVEL=0' }),
      /^TLSv1\.3 /,
      'a modern client still gets through',
    );
  });

  it('when a client comes back with the session or ticket of its last connection, TLS 1.2 or 1.3, it should get a full handshake, not a resumption', async () => {
    for (const version of ['TLSv1.2', 'TLSv1.3'] as const)
      assert.equal(await resumes(server.port, ca.certPem, version), false, version);
  });

  it('when a client never finishes its handshake, silent or trickling its hello, it should close the connection after the handshake timeout', async () => {
    const [silent, trickling] = await Promise.all([heldFor(server.port, false), heldFor(server.port, true)]);
    assert.ok(silent >= 250 && silent < 2000, `a silent client held for ${silent} ms`);
    assert.ok(trickling >= 250 && trickling < 2000, `a trickling client held for ${trickling} ms`);
  });

  it('when a client finishes its handshake and sends no request, it should close the connection after the headers timeout', async () => {
    const closed = await new Promise<number>((resolve) => {
      let secured = Number.NaN;
      const s = tlsConnect({ host: '127.0.0.1', port: server.port, ca: ca.certPem, servername: 'localhost' }, () => {
        secured = Date.now();
      });
      const giveUp = setTimeout(() => s.destroy(), 5000);
      s.on('error', () => {});
      s.on('close', () => {
        clearTimeout(giveUp);
        resolve(Date.now() - secured);
      });
    });
    assert.ok(closed < 2500, `held for ${closed} ms after its handshake`);
  });

  it('when a client sends its headers too slowly, it should drop the connection', async () => {
    const started = Date.now();
    const closed = await new Promise<number>((resolve) => {
      const s = tlsConnect({ host: '127.0.0.1', port: server.port, ca: ca.certPem, servername: 'localhost' }, () =>
        s.write('GET /ignition HTTP/1.1\r\nHost: x\r\n'),
      );
      s.on('data', () => {});
      s.on('error', () => {});
      s.on('close', () => resolve(Date.now() - started));
    });
    assert.ok(closed < 5000, `closed after ${closed} ms`);
    // Plain HTTP on the TLS port gets nothing served.
    const plain = await new Promise<string>((resolve) => {
      const s = connect(server.port, '127.0.0.1', () => s.write('GET /ignition HTTP/1.1\r\nHost: x\r\n\r\n'));
      let data = '';
      s.on('data', (d: Buffer) => (data += d.toString('latin1')));
      s.on('error', () => resolve(data));
      s.on('close', () => resolve(data));
    });
    assert.ok(!plain.includes('ok'));
  });

  it('when drained, it should close idle keep-alive connections and drop new ones, and leave the listening socket open for the servers sharing it', async () => {
    const pair = await ca.issue({ commonName: 'drained', dnsNames: ['localhost'], usage: 'server' });
    await writeFile(join(dir, 'drained.crt'), pair.certPem);
    await writeFile(join(dir, 'drained.key'), pair.keyPem);
    const drained = await startHttpsServer({
      address: '127.0.0.1:0',
      certFile: join(dir, 'drained.crt'),
      keyFile: join(dir, 'drained.key'),
      app: (_req, res) => res.end('ok'),
      log: createLogger({ name: 'test', level: 'silent' }),
    });
    const agent = new Agent({ keepAlive: true, ca: ca.certPem });
    const fetchOk = (a: Agent | false): Promise<string> =>
      new Promise((resolve, reject) => {
        const r = httpsRequest(
          { host: '127.0.0.1', port: drained.port, path: '/', servername: 'localhost', ca: ca.certPem, agent: a },
          (res) => {
            let body = '';
            res.on('data', (c: Buffer) => (body += c.toString()));
            res.on('end', () => resolve(body));
          },
        );
        r.on('error', reject);
        r.end();
      });
    assert.equal(await fetchOk(agent), 'ok');
    const [kept] = Object.values(agent.freeSockets).flat();
    assert.ok(kept, 'a keep-alive connection is open');
    const closed = new Promise<void>((resolve) => kept.once('close', () => resolve()));
    await drained.drain(2000);
    await closed;
    await assert.rejects(fetchOk(false), 'a new connection is dropped');
    assert.ok(fstatSync(drained.fd).isSocket(), 'the listening socket is still open');
    agent.destroy();
    await drained.close();
  });
});

describe('HTTPS serving port with an RSA certificate', () => {
  let dir: string;
  let pair: { certPem: string; keyPem: string };
  let server: HttpsServer;
  /** Node's defaults with the same certificate: proves each client below really offers what it claims. */
  let permissive: ReturnType<typeof createTlsServer>;
  let permissivePort: number;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'https-rsa-'));
    const ca = await createCertificateAuthority('serving CA');
    pair = await ca.issue({ commonName: 'rsa', dnsNames: ['localhost'], usage: 'server', keyType: 'RSA' });
    await writeFile(join(dir, 'tls.crt'), pair.certPem);
    await writeFile(join(dir, 'tls.key'), pair.keyPem);
    server = await startHttpsServer({
      address: '127.0.0.1:0',
      certFile: join(dir, 'tls.crt'),
      keyFile: join(dir, 'tls.key'),
      app: (_req, res) => res.end('ok'),
      log: createLogger({ name: 'test', level: 'silent' }),
    });
    permissive = createTlsServer({ cert: pair.certPem, key: pair.keyPem }, (s) => s.end());
    await new Promise<void>((r) => permissive.listen(0, '127.0.0.1', r));
    permissivePort = (permissive.address() as AddressInfo).port;
  });
  after(async () => {
    permissive?.close();
    await server?.close();
    await rm(dir, { recursive: true, force: true });
  });

  for (const [suite, weakness] of [
    ['AES128-SHA', 'CBC with a SHA-1 MAC'],
    ['AES128-GCM-SHA256', 'static-RSA key exchange'],
  ] as const) {
    it(`when a TLS 1.2 client offers only ${suite} (${weakness}), it should refuse the handshake`, async () => {
      assert.equal(await handshake(permissivePort, TLS12_OFFERING(suite)), `TLSv1.2 ${suite}`, 'the control');
      await assert.rejects(handshake(server.port, TLS12_OFFERING(suite)), (err: Error & { code?: string }) => {
        assert.match(err.code ?? '', /_ALERT_HANDSHAKE_FAILURE$/, err.message);
        return true;
      });
    });
  }

  it('when a client offers ECDHE with AES-GCM or ChaCha20 on TLS 1.2, or TLS 1.3, it should complete the handshake', async () => {
    for (const suite of ['ECDHE-RSA-AES128-GCM-SHA256', 'ECDHE-RSA-AES256-GCM-SHA384', 'ECDHE-RSA-CHACHA20-POLY1305'])
      assert.equal(await handshake(server.port, TLS12_OFFERING(suite)), `TLSv1.2 ${suite}`);
    assert.equal(await handshake(server.port, {}), 'TLSv1.3 TLS_AES_128_GCM_SHA256', 'the preferred TLS 1.3 suite');
  });
});
