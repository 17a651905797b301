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
import { createCertificateAuthority, type CertificateAuthority } from './pki.js';
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

/** The protocol a handshake settled on, or the handshake's error. */
function handshake(port: number, opts: ConnectionOptions): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = tlsConnect({ host: '127.0.0.1', port, rejectUnauthorized: false, ...opts }, () => {
      resolve(s.getProtocol() ?? '');
      s.end();
    });
    s.on('error', reject);
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
      assert.equal(await handshake((permissive.address() as AddressInfo).port, TLS11_CLIENT), 'TLSv1.1');
    } finally {
      permissive.close();
    }
    // Against the serving port, the server ends it with a protocol_version alert (70): the refusal is the server's.
    await assert.rejects(handshake(server.port, TLS11_CLIENT), (err: Error & { code?: string }) => {
      assert.equal(err.code, 'ERR_SSL_TLSV1_ALERT_PROTOCOL_VERSION', err.message);
      return true;
    });
    assert.equal(
      await handshake(server.port, { minVersion: 'TLSv1.2', ciphers: 'DEFAULT@SECLEVEL=0' }),
      'TLSv1.3',
      'a modern client still gets through',
    );
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
