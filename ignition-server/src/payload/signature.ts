/**
 * Signatures of the entries of the shared payload store (shared.ts). Whoever can push to the repository must
 * not decide what booting hosts run: the generating leader signs each entry it pushes, and a replica serves or
 * caches an entry only when the signature verifies under its own key and names that very entry (its tag) and
 * those very bytes (their sha256). A tag already stands for its inputs (`payload-<sha256(release digest,
 * config)>`, `pin-<sha256(reference, config)>`), so binding the tag binds the inputs: a genuine entry copied
 * under another tag is refused like foreign bytes are.
 *
 * The key is the ignition signing key (`--signing-key-file`, ES256), not one of its own: every replica already
 * holds that same file to verify bearer tokens, so the shared store needs no second Secret, flag or rotation,
 * and replacing the key invalidates the store's entries as it invalidates the tokens (the leader generates and
 * pushes them again). Tokens and entry signatures cannot stand for one another: an entry signature has its
 * own `typ` and audience, which the token check refuses, and a token lacks both here.
 */
import { createPrivateKey, createPublicKey } from 'node:crypto';
import { calculateJwkThumbprint, exportJWK, jwtVerify, SignJWT } from 'jose';
import { sha256Digest } from '../release/digest.js';

const ALG = 'ES256';
const TYP = 'kindling-payload-entry+jwt';
const ISSUER = 'kindling-ignition-server';
const AUDIENCE = 'kindling-shared-payload';
/** A real signature is ~300 bytes; anything much bigger is not ours and is not worth parsing. */
const MAX_SIGNATURE_LENGTH = 2048;

/**
 * Why an entry was refused: no signature; a signature that does not verify under this server's key (forged,
 * garbled, or made with another key); a genuine signature of another entry; a genuine signature of other bytes.
 */
export type RejectReason = 'unsigned' | 'bad_signature' | 'other_entry' | 'other_bytes';

export type Verdict = { ok: true } | { ok: false; reason: RejectReason };

export interface EntrySeal {
  /** The signature of `bytes` as the entry `name`. */
  sign(name: string, bytes: Buffer): Promise<string>;
  /** Whether `signature` is this key's signature of `bytes` as the entry `name`. */
  verify(name: string, bytes: Buffer, signature: string | undefined): Promise<Verdict>;
}

/** Seals with the ignition signing key (a PKCS#8 or SEC1 PEM P-256 private key, as tokens.ts takes it). */
export async function createEntrySeal(privateKeyPem: string): Promise<EntrySeal> {
  const privateKey = createPrivateKey(privateKeyPem);
  const publicKey = createPublicKey(privateKey);
  const keyId = await calculateJwkThumbprint(await exportJWK(publicKey));
  return {
    sign: (name, bytes) =>
      new SignJWT({ digest: sha256Digest(bytes) })
        .setProtectedHeader({ alg: ALG, kid: keyId, typ: TYP })
        .setIssuer(ISSUER)
        .setAudience(AUDIENCE)
        .setSubject(name)
        .sign(privateKey),
    async verify(name, bytes, signature) {
      if (signature === undefined || signature === '') return { ok: false, reason: 'unsigned' };
      if (signature.length > MAX_SIGNATURE_LENGTH) return { ok: false, reason: 'bad_signature' };
      let claims: { sub?: unknown; digest?: unknown };
      try {
        ({ payload: claims } = await jwtVerify(signature, publicKey, {
          algorithms: [ALG],
          typ: TYP,
          issuer: ISSUER,
          audience: AUDIENCE,
          requiredClaims: ['sub', 'digest'],
        }));
      } catch {
        return { ok: false, reason: 'bad_signature' };
      }
      if (claims.sub !== name) return { ok: false, reason: 'other_entry' };
      if (claims.digest !== sha256Digest(bytes)) return { ok: false, reason: 'other_bytes' };
      return { ok: true };
    },
  };
}
