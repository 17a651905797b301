/**
 * For tests: a real registry (Debian `docker-registry`, the CNCF distribution registry) on a loopback port
 * with TLS, using token authentication against a small token service of ours, as registries in the field do
 * (realm + service + scope). Anonymous callers get pull on `public/*`; the pull-secret user gets push and
 * pull everywhere; anyone else gets an empty grant, which the registry turns into a 401.
 */
import { createServer, type Server } from 'node:https';
import { createPrivateKey, X509Certificate } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import { SignJWT } from 'jose';
import { createCertificateAuthority, type CertificateAuthority } from '../../test/bed/src/pki.js';
import { ManagedProcess } from '../../test/bed/src/process.js';
import { freePort, waitForPort } from '../../test/bed/src/ports.js';

export const REGISTRY_USER = { username: 'kindling', password: 'pull-secret-password' };
const SERVICE = 'kindling-test-registry';
const ISSUER = 'kindling-test-token-issuer';

export interface RegistryFixture {
  host: string;
  ca: CertificateAuthority;
  /** A dockerconfigjson pull secret for REGISTRY_USER. */
  pullSecret: string;
  /** Requests the token service answered, by kind, to prove which path a client took. */
  tokenRequests: { anonymous: number; authenticated: number };
  stop(): Promise<void>;
}

function grant(scope: string | null, authenticated: boolean): { type: string; name: string; actions: string[] }[] {
  if (!scope) return [];
  const [type, name, actions] = scope.split(':') as [string, string, string];
  if (authenticated) return [{ type, name, actions: actions.split(',') }];
  return name.startsWith('public/') ? [{ type, name, actions: ['pull'] }] : [];
}

async function startTokenService(
  ca: CertificateAuthority,
  stats: RegistryFixture['tokenRequests'],
): Promise<{ server: Server; realm: string; signer: { certPem: string } }> {
  const signer = await ca.issue({ commonName: 'registry token signer', usage: 'server' });
  const serving = await ca.issue({ commonName: 'token service', ipAddresses: ['127.0.0.1'], usage: 'server' });
  const key = createPrivateKey(signer.keyPem);
  const x5c = [new X509Certificate(signer.certPem).raw.toString('base64')];
  const expected = `Basic ${Buffer.from(`${REGISTRY_USER.username}:${REGISTRY_USER.password}`).toString('base64')}`;
  const server = createServer({ cert: serving.certPem, key: serving.keyPem }, (req, res) => {
    const url = new URL(req.url ?? '/', 'https://localhost');
    const authorization = req.headers.authorization;
    if (authorization !== undefined && authorization !== expected) return void res.writeHead(401).end();
    const authenticated = authorization === expected;
    stats[authenticated ? 'authenticated' : 'anonymous']++;
    void new SignJWT({ access: grant(url.searchParams.get('scope'), authenticated) })
      .setProtectedHeader({ alg: 'ES256', typ: 'JWT', x5c })
      .setIssuer(ISSUER)
      .setAudience(url.searchParams.get('service') ?? '')
      .setSubject(authenticated ? REGISTRY_USER.username : '')
      .setIssuedAt()
      .setNotBefore('-10s')
      .setExpirationTime('5m')
      .sign(key)
      .then((token) => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ token })));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { server, realm: `https://127.0.0.1:${(server.address() as AddressInfo).port}/token`, signer };
}

export async function startRegistry(): Promise<RegistryFixture> {
  const dir = await mkdtemp(join(tmpdir(), 'registry-'));
  const ca = await createCertificateAuthority('test registry CA');
  const tokenRequests = { anonymous: 0, authenticated: 0 };
  const tokens = await startTokenService(ca, tokenRequests);
  const serving = await ca.issue({ commonName: 'registry', ipAddresses: ['127.0.0.1'], usage: 'server' });
  await writeFile(join(dir, 'tls.crt'), serving.certPem);
  await writeFile(join(dir, 'tls.key'), serving.keyPem);
  await writeFile(join(dir, 'token-ca.pem'), tokens.signer.certPem + ca.certPem);
  const port = await freePort();
  const config = [
    'version: 0.1',
    'log: {level: warn}',
    `storage: {filesystem: {rootdirectory: ${join(dir, 'data')}}, delete: {enabled: true}}`,
    `http: {addr: "127.0.0.1:${port}", secret: test-secret, tls: {certificate: ${join(dir, 'tls.crt')}, key: ${join(dir, 'tls.key')}}}`,
    `auth: {token: {realm: "${tokens.realm}", service: ${SERVICE}, issuer: ${ISSUER}, rootcertbundle: ${join(dir, 'token-ca.pem')}}}`,
  ].join('\n');
  await writeFile(join(dir, 'config.yml'), `${config}\n`);
  const proc = new ManagedProcess({
    name: 'docker-registry',
    command: '/usr/bin/docker-registry',
    args: ['serve', join(dir, 'config.yml')],
    logFile: join(dir, 'registry.log'),
  });
  await waitForPort(port, proc);
  const host = `127.0.0.1:${port}`;
  const auth = Buffer.from(`${REGISTRY_USER.username}:${REGISTRY_USER.password}`).toString('base64');
  return {
    host,
    ca,
    pullSecret: JSON.stringify({ auths: { [host]: { auth } } }),
    tokenRequests,
    async stop() {
      await proc.stop();
      await new Promise((r) => tokens.server.close(r));
      await rm(dir, { recursive: true, force: true });
    },
  };
}
