import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import { createCertificateAuthority, createCertificateRequest, verifyCertificate } from './pki.js';

describe('certificate requests', () => {
  it('when a request names a subject and addresses, it should carry them, signed by its own key', async () => {
    const { csrPem, keyPem } = await createCertificateRequest({
      commonName: 'system:node:a',
      organizations: ['system:nodes'],
      dnsNames: ['a'],
      ipAddresses: ['127.0.0.1'],
    });
    const csr = new x509.Pkcs10CertificateRequest(csrPem);
    assert.equal(csr.subject, 'CN=system:node:a, O=system:nodes');
    assert.ok(await csr.verify());
    const san = csr.extensions.find(
      (e): e is x509.SubjectAlternativeNameExtension => e instanceof x509.SubjectAlternativeNameExtension,
    );
    assert.deepEqual(
      san?.names.items.map((n) => `${n.type}:${n.value}`),
      ['dns:a', 'ip:127.0.0.1'],
    );
    assert.match(keyPem, /^-----BEGIN PRIVATE KEY-----/);
  });

  it('when given a key, it should request for that key, so a retried request names the same key', async () => {
    const first = await createCertificateRequest({ commonName: 'system:node:a', organizations: ['system:nodes'] });
    const again = await createCertificateRequest({
      commonName: 'system:node:a',
      organizations: ['system:nodes'],
      keyPem: first.keyPem,
    });
    assert.equal(again.keyPem, first.keyPem);
    const key = (pem: string): string =>
      Buffer.from(new x509.Pkcs10CertificateRequest(pem).publicKey.rawData).toString('hex');
    assert.equal(key(again.csrPem), key(first.csrPem));
  });
});

describe('verifyCertificate', () => {
  it("when a certificate is the CA's and current, it should give its subject; otherwise it should say which check failed", async () => {
    const ca = await createCertificateAuthority('ca');
    const other = await createCertificateAuthority('other');
    const cert = await ca.issue({
      commonName: 'system:node:a',
      organizations: ['system:nodes'],
      usage: 'client',
      validDays: 1,
    });
    const info = await verifyCertificate(cert.certPem, ca.certPem);
    assert.equal(info.commonName, 'system:node:a');
    assert.deepEqual(info.organizations, ['system:nodes']);
    await assert.rejects(verifyCertificate(cert.certPem, other.certPem), /is not signed by CA "CN=other"/);
    await assert.rejects(
      verifyCertificate(cert.certPem, ca.certPem, new Date(Date.now() + 2 * 86_400_000)),
      /is not valid at/,
    );
  });
});
