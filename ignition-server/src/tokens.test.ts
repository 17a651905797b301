import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { generateKeyPairSync } from 'node:crypto';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { decodeJwt, decodeProtectedHeader, SignJWT } from 'jose';
import { createTokenAuthority, createTokenVerifier, loadSigningKey } from './tokens.js';
import { ecKeyPem, manualClock } from '../testing/index.js';

describe('tokens', () => {
  it('when a token is minted, it should verify with the pool, hash, issue and expiry it was minted with', async () => {
    const clock = manualClock();
    const auth = await createTokenAuthority(ecKeyPem(), clock);
    const { token, claims } = await auth.mint({ pool: 'clusters/workers', hash: 'abc123', ttlMs: 3_600_000 });
    const verified = await auth.verify(token);
    assert.deepEqual(verified, claims);
    assert.equal(claims.pool, 'clusters/workers');
    assert.equal(claims.expiresAtMs - claims.issuedAtMs, 3_600_000);
    assert.equal(decodeProtectedHeader(token).alg, 'ES256');
    assert.equal(decodeProtectedHeader(token).kid, auth.keyId);
  });

  it('when two tokens are minted in the same second, it should make them differ', async () => {
    const auth = await createTokenAuthority(ecKeyPem(), manualClock());
    const a = await auth.mint({ pool: 'ns/p', hash: 'h', ttlMs: 1000 });
    const b = await auth.mint({ pool: 'ns/p', hash: 'h', ttlMs: 1000 });
    assert.notEqual(a.token, b.token);
  });

  it('when the expiry has passed, it should refuse the token', async () => {
    const clock = manualClock();
    const auth = await createTokenAuthority(ecKeyPem(), clock);
    const { token } = await auth.mint({ pool: 'ns/p', hash: 'h', ttlMs: 10_000 });
    clock.advance(9_999);
    assert.ok(await auth.verify(token));
    clock.advance(1);
    assert.equal(await auth.verify(token), undefined);
  });

  it('when a verified token is presented again, it should answer from memory, and refuse it from its exp on', async () => {
    const clock = manualClock();
    const auth = await createTokenAuthority(ecKeyPem(), clock);
    const { token } = await auth.mint({ pool: 'ns/p', hash: 'h', ttlMs: 10_000 });
    const first = await auth.verify(token);
    clock.advance(9_999);
    assert.ok(first);
    assert.equal(await auth.verify(token), first, 'the same claims object: no second signature check');
    clock.advance(1);
    assert.equal(await auth.verify(token), undefined);
    assert.equal(await auth.verify(token), undefined, 'and not remembered again');
  });

  it('when a token is signed by another key, it should refuse it', async () => {
    const auth = await createTokenAuthority(ecKeyPem(), manualClock());
    const other = await createTokenAuthority(ecKeyPem(), manualClock());
    const { token } = await other.mint({ pool: 'ns/p', hash: 'h', ttlMs: 10_000 });
    assert.equal(await auth.verify(token), undefined);
  });

  it('when a token is tampered with, unsigned or garbled, it should refuse it', async () => {
    const clock = manualClock();
    const auth = await createTokenAuthority(ecKeyPem(), clock);
    const { token } = await auth.mint({ pool: 'ns/p', hash: 'h', ttlMs: 10_000 });
    const [h, , s] = token.split('.') as [string, string, string];
    const claims = { ...decodeJwt(token), sub: 'ns/other' };
    const tampered = `${h}.${Buffer.from(JSON.stringify(claims)).toString('base64url')}.${s}`;
    const none = `${Buffer.from('{"alg":"none"}').toString('base64url')}.${Buffer.from(JSON.stringify(claims)).toString('base64url')}.`;
    for (const bad of [tampered, none, '', 'abc', 'a.b.c', token.slice(0, -3), `${token}x`, 'x'.repeat(5000)]) {
      assert.equal(await auth.verify(bad), undefined, bad.slice(0, 40));
    }
  });

  it('when a signed token carries whitespace (a Secret written by a tenant), it should refuse it though its base64 decodes', async () => {
    const auth = await createTokenAuthority(ecKeyPem(), manualClock());
    const { token } = await auth.mint({ pool: 'ns/p', hash: 'h', ttlMs: 10_000 });
    for (const bad of [
      `${token} `,
      `${token.slice(0, -10)} ${token.slice(-10)}`,
      `${token.slice(0, -10)}\t${token.slice(-10)}`,
    ])
      assert.equal(await auth.verify(bad), undefined, JSON.stringify(bad.slice(-12)));
    assert.ok(await auth.verify(token));
  });

  it('when a token of the same key lacks the hash claim or has the wrong audience, it should refuse it', async () => {
    const pem = ecKeyPem();
    const auth = await createTokenAuthority(pem, manualClock());
    const key = (await import('node:crypto')).createPrivateKey(pem);
    const base = (): SignJWT =>
      new SignJWT({})
        .setProtectedHeader({ alg: 'ES256' })
        .setIssuer('kindling-ignition-server')
        .setSubject('ns/p')
        .setIssuedAt()
        .setJti('x')
        .setExpirationTime('1h');
    const noHash = await base().setAudience('kindling-ignition').sign(key);
    const otherAudience = await new SignJWT({ hash: 'h' })
      .setProtectedHeader({ alg: 'ES256' })
      .setIssuer('kindling-ignition-server')
      .setSubject('ns/p')
      .setIssuedAt()
      .setJti('x')
      .setExpirationTime('1h')
      .setAudience('kube')
      .sign(key);
    assert.equal(await auth.verify(noHash), undefined);
    assert.equal(await auth.verify(otherAudience), undefined);
  });

  it('when the key file holds an RSA or P-384 key, it should refuse to start', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'tokens-'));
    const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 })
      .privateKey.export({ type: 'pkcs8', format: 'pem' })
      .toString();
    await writeFile(join(dir, 'rsa.pem'), rsa);
    await writeFile(join(dir, 'p384.pem'), ecKeyPem('P-384'));
    await writeFile(join(dir, 'ok.pem'), ecKeyPem());
    await assert.rejects(loadSigningKey(join(dir, 'rsa.pem')), /failed to load/);
    await assert.rejects(loadSigningKey(join(dir, 'p384.pem')), /failed to load/);
    assert.ok((await loadSigningKey(join(dir, 'ok.pem'))).authority.keyId);
  });

  it("when two replicas load the same key file, it should verify each other's tokens", async () => {
    const pem = ecKeyPem();
    const a = await createTokenAuthority(pem);
    const b = await createTokenAuthority(pem);
    const { token } = await a.mint({ pool: 'ns/p', hash: 'h', ttlMs: 60_000 });
    assert.equal((await b.verify(token))?.pool, 'ns/p');
  });

  it("when a verifier is given the authority's public key only, it should verify its tokens and refuse another authority's", async () => {
    const clock = manualClock();
    const auth = await createTokenAuthority(ecKeyPem(), clock);
    const other = await createTokenAuthority(ecKeyPem(), clock);
    const verifier = createTokenVerifier(auth.publicKeyPem, clock);
    assert.doesNotMatch(auth.publicKeyPem, /PRIVATE/);
    const { token, claims } = await auth.mint({ pool: 'ns/p', hash: 'h', ttlMs: 60_000 });
    assert.deepEqual(await verifier.verify(token), claims);
    assert.equal(
      await verifier.verify((await other.mint({ pool: 'ns/p', hash: 'h', ttlMs: 60_000 })).token),
      undefined,
    );
  });

  it('when asked without waiting, it should know only tokens verified before and not expired since', async () => {
    const clock = manualClock();
    const auth = await createTokenAuthority(ecKeyPem(), clock);
    const verifier = createTokenVerifier(auth.publicKeyPem, clock);
    const { token, claims } = await auth.mint({ pool: 'ns/p', hash: 'h', ttlMs: 10_000 });
    assert.equal(verifier.remembered(token), undefined, 'never verified: not known');
    await verifier.verify(token);
    assert.equal(verifier.remembered(token), await verifier.verify(token));
    assert.deepEqual(verifier.remembered(token), claims);
    clock.advance(10_000);
    assert.equal(verifier.remembered(token), undefined, 'expired: forgotten');
    assert.equal(await verifier.verify(token), undefined);
  });

  it('when the authority has minted a token, it should know it without a signature check, until its exp', async () => {
    const clock = manualClock();
    const auth = await createTokenAuthority(ecKeyPem(), clock);
    const { token, claims } = await auth.mint({ pool: 'ns/p', hash: 'h', ttlMs: 10_000 });
    assert.equal(auth.remembered(token), claims, 'the very claims it signed');
    assert.equal(await auth.verify(token), claims);
    const other = await createTokenAuthority(ecKeyPem(), clock);
    const foreign = await other.mint({ pool: 'ns/p', hash: 'h', ttlMs: 10_000 });
    assert.equal(auth.remembered(foreign.token), undefined, "another authority's token is not known");
    assert.equal(await auth.verify(foreign.token), undefined);
    clock.advance(10_000);
    assert.equal(auth.remembered(token), undefined);
    assert.equal(await auth.verify(token), undefined);
  });
});
