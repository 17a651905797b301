import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { connect as tlsConnect } from 'node:tls';
import { connect } from 'node:net';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { X509Certificate } from 'node:crypto';
import { createLogger } from '../../support/src/logger.js';
import { createCertificateAuthority, type CertificateAuthority } from '../../support/src/pki.js';
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
    await assert.rejects(peerSerial(server.port, ca.certPem, { maxVersion: 'TLSv1.1' }));
  });

  it('when a client sends its headers too slowly, it should drop the connection', async () => {
    const started = Date.now();
    const closed = await new Promise<number>((resolve) => {
      const s = tlsConnect({ host: '127.0.0.1', port: server.port, ca: ca.certPem, servername: 'localhost' }, () => s.write('GET /ignition HTTP/1.1\r\nHost: x\r\n'));
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
});
