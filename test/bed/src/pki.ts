/**
 * Small PKI for the test bed and the local environment: a CA, serving and client certificates (ECDSA P-256,
 * or RSA 2048 for a certificate that must be RSA).
 * Production gets its certificates from files (cert-manager or the like); this only makes them.
 */
// @peculiar/x509 resolves its providers through tsyringe, which needs the Reflect metadata polyfill loaded first.
import 'reflect-metadata';
import { webcrypto, randomBytes, createPrivateKey, createPublicKey } from 'node:crypto';
import * as x509 from '@peculiar/x509';

x509.cryptoProvider.set(webcrypto as unknown as Parameters<typeof x509.cryptoProvider.set>[0]);

type Key = webcrypto.CryptoKey;

const ALG = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;
const RSA_ALG = {
  name: 'RSASSA-PKCS1-v1_5',
  modulusLength: 2048,
  publicExponent: new Uint8Array([1, 0, 1]),
  hash: 'SHA-256',
} as const;
const DAY_MS = 86_400_000;

export interface KeyPairPem {
  certPem: string;
  keyPem: string;
}

export interface CertificateAuthority extends KeyPairPem {
  /** Issues a certificate signed by this CA. */
  issue(opts: IssueOptions): Promise<KeyPairPem>;
}

interface IssueOptions {
  commonName: string;
  /** Organisations: Kubernetes reads them as the groups of a client certificate. */
  organizations?: string[];
  dnsNames?: string[];
  ipAddresses?: string[];
  usage: 'server' | 'client';
  validDays?: number;
  /** The certificate's key (the CA signs with its own either way); ECDSA unless told. */
  keyType?: 'ECDSA' | 'RSA';
}

function toPem(der: ArrayBuffer, label: string): string {
  const b64 = Buffer.from(der)
    .toString('base64')
    .replace(/(.{64})/g, '$1\n');
  return `-----BEGIN ${label}-----\n${b64}${b64.endsWith('\n') ? '' : '\n'}-----END ${label}-----\n`;
}

async function keyPem(key: Key): Promise<string> {
  return toPem(await webcrypto.subtle.exportKey('pkcs8', key), 'PRIVATE KEY');
}

function subject(commonName: string, organizations: string[] = []): string {
  const escape = (v: string): string => v.replace(/([,+"\\<>;=])/g, '\\$1');
  return [`CN=${escape(commonName)}`, ...organizations.map((o) => `O=${escape(o)}`)].join(', ');
}

function serial(): string {
  const bytes = randomBytes(16);
  bytes[0] = (bytes[0] ?? 0) & 0x7f;
  return bytes.toString('hex');
}

export async function createCertificateAuthority(commonName: string, validDays = 3650): Promise<CertificateAuthority> {
  const keys = await webcrypto.subtle.generateKey(ALG, true, ['sign', 'verify']);
  const now = Date.now();
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: serial(),
    name: subject(commonName),
    notBefore: new Date(now - 60_000),
    notAfter: new Date(now + validDays * DAY_MS),
    keys,
    signingAlgorithm: ALG,
    extensions: [
      new x509.BasicConstraintsExtension(true, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
      await x509.SubjectKeyIdentifierExtension.create(keys.publicKey),
    ],
  });
  const caKeyPem = await keyPem(keys.privateKey);
  return {
    certPem: cert.toString('pem') + '\n',
    keyPem: caKeyPem,
    issue: (opts) => issue(cert, keys.privateKey, opts),
  };
}

/** A CA from its PEM certificate and PKCS#8 key (e.g. a test-bed cluster's), to issue more certificates. */
export async function loadCertificateAuthority(pair: KeyPairPem): Promise<CertificateAuthority> {
  const cert = new x509.X509Certificate(pair.certPem);
  const der = Buffer.from(pair.keyPem.replace(/-----[^-]+-----|\s/g, ''), 'base64');
  const key = await webcrypto.subtle.importKey('pkcs8', der, ALG, true, ['sign']);
  return { ...pair, issue: (opts) => issue(cert, key, opts) };
}

async function issue(ca: x509.X509Certificate, caKey: Key, opts: IssueOptions): Promise<KeyPairPem> {
  const keys = await webcrypto.subtle.generateKey(opts.keyType === 'RSA' ? RSA_ALG : ALG, true, ['sign', 'verify']);
  const now = Date.now();
  const names = [
    ...(opts.dnsNames ?? []).map((value) => ({ type: 'dns' as const, value })),
    ...(opts.ipAddresses ?? []).map((value) => ({ type: 'ip' as const, value })),
  ];
  const extensions: x509.Extension[] = [
    new x509.BasicConstraintsExtension(false, undefined, true),
    new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature | x509.KeyUsageFlags.keyEncipherment, true),
    new x509.ExtendedKeyUsageExtension([
      opts.usage === 'server' ? x509.ExtendedKeyUsage.serverAuth : x509.ExtendedKeyUsage.clientAuth,
    ]),
    await x509.AuthorityKeyIdentifierExtension.create(ca),
  ];
  if (names.length > 0) extensions.push(new x509.SubjectAlternativeNameExtension(names));
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: serial(),
    subject: subject(opts.commonName, opts.organizations),
    issuer: ca.subject,
    notBefore: new Date(now - 60_000),
    notAfter: new Date(now + (opts.validDays ?? 365) * DAY_MS),
    signingKey: caKey,
    publicKey: keys.publicKey,
    signingAlgorithm: ALG,
    extensions,
  });
  return { certPem: cert.toString('pem') + '\n', keyPem: await keyPem(keys.privateKey) };
}

export interface CertificateRequestOptions {
  commonName: string;
  organizations?: string[];
  dnsNames?: string[];
  ipAddresses?: string[];
  /** Names a kubelet never asks for, to make requests an approver must refuse. */
  emails?: string[];
  uris?: string[];
  /** The private key (PKCS#8 PEM) to request for; a new P-256 key when absent. */
  keyPem?: string;
}

export interface CertificateRequestPem {
  /** PEM `CERTIFICATE REQUEST` (PKCS#10). */
  csrPem: string;
  keyPem: string;
}

async function keyPairOf(pem: string | undefined): Promise<webcrypto.CryptoKeyPair> {
  if (pem === undefined) return webcrypto.subtle.generateKey(ALG, true, ['sign', 'verify']);
  const privateKey = createPrivateKey(pem);
  const spki = createPublicKey(privateKey).export({ type: 'spki', format: 'der' });
  return {
    privateKey: await webcrypto.subtle.importKey(
      'pkcs8',
      privateKey.export({ type: 'pkcs8', format: 'der' }),
      ALG,
      true,
      ['sign'],
    ),
    publicKey: await webcrypto.subtle.importKey('spki', spki, ALG, true, ['verify']),
  };
}

/** A PKCS#10 certificate request (ECDSA P-256, SHA-256), e.g. a kubelet's; the same key when `keyPem` is given. */
export async function createCertificateRequest(opts: CertificateRequestOptions): Promise<CertificateRequestPem> {
  const keys = await keyPairOf(opts.keyPem);
  const names = [
    ...(opts.dnsNames ?? []).map((value) => ({ type: 'dns' as const, value })),
    ...(opts.ipAddresses ?? []).map((value) => ({ type: 'ip' as const, value })),
    ...(opts.emails ?? []).map((value) => ({ type: 'email' as const, value })),
    ...(opts.uris ?? []).map((value) => ({ type: 'url' as const, value })),
  ];
  const csr = await x509.Pkcs10CertificateRequestGenerator.create({
    name: subject(opts.commonName, opts.organizations),
    keys,
    signingAlgorithm: ALG,
    extensions: names.length > 0 ? [new x509.SubjectAlternativeNameExtension(names)] : [],
  });
  return { csrPem: csr.toString('pem') + '\n', keyPem: opts.keyPem ?? (await keyPem(keys.privateKey)) };
}

export interface CertificateInfo {
  commonName: string;
  organizations: string[];
  notAfter: Date;
}

/**
 * Reads a PEM certificate and checks it was signed by the CA and is valid at `at`; throws saying which check
 * failed.
 */
export async function verifyCertificate(certPem: string, caPem: string, at = new Date()): Promise<CertificateInfo> {
  const cert = new x509.X509Certificate(certPem);
  const ca = new x509.X509Certificate(caPem);
  if (!(await cert.verify({ publicKey: ca.publicKey, signatureOnly: true })))
    throw new Error(`certificate "${cert.subject}" is not signed by CA "${ca.subject}"`);
  if (at < cert.notBefore || at > cert.notAfter)
    throw new Error(
      `certificate "${cert.subject}" is not valid at ${at.toISOString()} (valid ${cert.notBefore.toISOString()} to ${cert.notAfter.toISOString()})`,
    );
  const name = cert.subjectName;
  return { commonName: name.getField('CN')[0] ?? '', organizations: name.getField('O'), notAfter: cert.notAfter };
}
