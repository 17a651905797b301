import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createPrivateKey } from 'node:crypto';
import { SignJWT } from 'jose';
import { createEntrySeal, type Verdict } from './signature.js';
import { createTokenAuthority } from '../tokens.js';
import { ecKeyPem } from '../../testing/index.js';

const PAYLOAD = `payload-${'a'.repeat(64)}`;
const OTHER = `payload-${'b'.repeat(64)}`;
const bytes = Buffer.from('3.0.0 2\n{"storage":{"files":[]}}');

describe('shared payload entry signatures', () => {
  it('when an entry is signed by the same key, for its name and bytes, it should verify', async () => {
    const pem = ecKeyPem();
    const [leader, replica] = [await createEntrySeal(pem), await createEntrySeal(pem)];
    assert.deepEqual(await replica.verify(PAYLOAD, bytes, await leader.sign(PAYLOAD, bytes)), { ok: true });
  });

  it('when an entry is not what the key signed, it should refuse it with the reason', async () => {
    const pem = ecKeyPem();
    const seal = await createEntrySeal(pem);
    const good = await seal.sign(PAYLOAD, bytes);
    const foreignKey = await (await createEntrySeal(ecKeyPem())).sign(PAYLOAD, bytes);
    // A bearer token of the same key is a valid ES256 JWS too: it must not pass for an entry signature.
    const token = (await (await createTokenAuthority(pem)).mint({ pool: 'ns/p', hash: 'h', ttlMs: 60_000 })).token;
    const wrongAudience = await new SignJWT({ digest: 'sha256:x' })
      .setProtectedHeader({ alg: 'ES256', typ: 'kindling-payload-entry+jwt' })
      .setIssuer('kindling-ignition-server')
      .setAudience('kindling-ignition')
      .setSubject(PAYLOAD)
      .sign(createPrivateKey(pem));
    const cases: [string, Promise<Verdict>, Verdict][] = [
      ['no signature', seal.verify(PAYLOAD, bytes, undefined), { ok: false, reason: 'unsigned' }],
      ['an empty signature', seal.verify(PAYLOAD, bytes, ''), { ok: false, reason: 'unsigned' }],
      ['garbage', seal.verify(PAYLOAD, bytes, 'not.a.jws'), { ok: false, reason: 'bad_signature' }],
      ['a huge signature', seal.verify(PAYLOAD, bytes, 'x'.repeat(5000)), { ok: false, reason: 'bad_signature' }],
      ['another key', seal.verify(PAYLOAD, bytes, foreignKey), { ok: false, reason: 'bad_signature' }],
      ['a bearer token', seal.verify(PAYLOAD, bytes, token), { ok: false, reason: 'bad_signature' }],
      ['another audience', seal.verify(PAYLOAD, bytes, wrongAudience), { ok: false, reason: 'bad_signature' }],
      ['another tag', seal.verify(OTHER, bytes, good), { ok: false, reason: 'other_entry' }],
      ['other bytes', seal.verify(PAYLOAD, Buffer.from('evil'), good), { ok: false, reason: 'other_bytes' }],
    ];
    for (const [name, verdict, expected] of cases) assert.deepEqual(await verdict, expected, name);
  });

  it('when an entry signature is presented as a bearer token, it should not verify as one', async () => {
    const pem = ecKeyPem();
    const signature = await (await createEntrySeal(pem)).sign(PAYLOAD, bytes);
    assert.equal(await (await createTokenAuthority(pem)).verify(signature), undefined);
  });
});
