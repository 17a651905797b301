/**
 * Bearer tokens of `/ignition`: ES256 JWTs bound to one pool (`namespace/name`) and one config hash, with an
 * issue and an expiry time. The signing key comes from a PEM file so every replica verifies every token;
 * signature and expiry are checked before anything is looked up, so a forged or stale token costs no more
 * than one signature verification.
 */
import { createPrivateKey, createPublicKey, randomBytes, type KeyObject } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { calculateJwkThumbprint, exportJWK, jwtVerify, SignJWT } from 'jose';
import { realClock, type Clock } from '../../support/src/timers.js';
import { createEntrySeal, type EntrySeal } from './payload/signature.js';

const ISSUER = 'kindling-ignition-server';
const AUDIENCE = 'kindling-ignition';
const ALG = 'ES256';
/** The longest token we are willing to parse: a real one is ~400 bytes; anything bigger is not ours. */
export const MAX_TOKEN_LENGTH = 2048;
/**
 * A compact JWS, base64url only. jose's decoding skips whitespace, so without this a Secret holding a minted token
 * with a space inside would verify and be served to a bearer no Ignition client sends; with it, every verified
 * token is of the bearer syntax, which the serving path relies on.
 */
export const COMPACT_JWS = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/;
/** Verified tokens remembered: every host of a booting fleet retries with the same token until it gets 200. */
const VERIFIED_TOKENS = 4096;

export interface TokenClaims {
  /** `namespace/name` of the pool. */
  pool: string;
  /** Config hash of the token Secret the token was minted for. */
  hash: string;
  /** Issue and expiry times, in milliseconds since the epoch (the JWT holds seconds). */
  issuedAtMs: number;
  expiresAtMs: number;
  /** Unique id, so two tokens minted in the same second differ. */
  id: string;
}

interface MintOptions {
  pool: string;
  hash: string;
  ttlMs: number;
}

/** What serving needs: verification only (a serving thread holds no private key). */
export interface TokenVerifier {
  /** The token's claims when its signature, issuer, audience and expiry hold; undefined otherwise. */
  verify(token: string): Promise<TokenClaims | undefined>;
  /** The claims of a token verified before and not expired since, without waiting; undefined otherwise. */
  remembered(token: string): TokenClaims | undefined;
}

export interface TokenAuthority extends TokenVerifier {
  /** Key id (RFC 7638 thumbprint of the public key), in every token's header. */
  readonly keyId: string;
  /** The public key (SPKI PEM), for verifiers elsewhere (the serving threads). */
  readonly publicKeyPem: string;
  mint(opts: MintOptions): Promise<{ token: string; claims: TokenClaims }>;
}

/** Builds the authority from a PKCS#8 or SEC1 PEM private key on the P-256 curve. */
export async function createTokenAuthority(privateKeyPem: string, clock: Clock = realClock): Promise<TokenAuthority> {
  const privateKey = createPrivateKey(privateKeyPem);
  if (privateKey.asymmetricKeyType !== 'ec' || privateKey.asymmetricKeyDetails?.namedCurve !== 'prime256v1') {
    throw new Error('the token signing key must be an ECDSA P-256 private key (ES256)');
  }
  const publicKey = createPublicKey(privateKey);
  const keyId = await calculateJwkThumbprint(await exportJWK(publicKey));
  const publicKeyPem = publicKey.export({ type: 'spki', format: 'pem' }).toString();
  const { learn, verifier } = rememberVerified((token) => verify(publicKey, token, clock), clock);
  return {
    keyId,
    publicKeyPem,
    // A token this authority has just signed is known to be authentic, and its claims are the ones it signed:
    // its Secret's echo is then indexed without a signature check (WebCrypto's verify was half of what a
    // thousand mints cost the leader, docs/benchmarks.md, the controller row).
    mint: async (opts) => {
      const minted = await mint(privateKey, keyId, opts, clock);
      learn(minted.token, minted.claims);
      return minted;
    },
    ...verifier,
  };
}

/** Verifies tokens of the authority whose public key this is (SPKI PEM). */
export function createTokenVerifier(publicKeyPem: string, clock: Clock = realClock): TokenVerifier {
  const publicKey = createPublicKey(publicKeyPem);
  return rememberVerified((token) => verify(publicKey, token, clock), clock).verifier;
}

/**
 * The signature check of a token is the same every time (only its expiry moves), and it dominated the
 * request path: a bounded map remembers the claims of tokens that verified, and a remembered token is
 * refused the moment its `exp` passes. Revocation is not this cache's concern: the caller checks the token
 * against the live Secrets on every request. Failures are not remembered (a forged token is not worth a slot).
 * When full, the token remembered first goes (a plain Map keeps insertion order): a host booting asks a few
 * times at most, so keeping the recently used ones first (an LRU) bought nothing but a cost on every request.
 */
function rememberVerified(
  verifyToken: (token: string) => Promise<TokenClaims | undefined>,
  clock: Clock,
): { verifier: TokenVerifier; learn: (token: string, claims: TokenClaims) => void } {
  const verified = new Map<string, TokenClaims>();
  const remembered = (token: string): TokenClaims | undefined => {
    const known = verified.get(token);
    if (!known || known.expiresAtMs > clock.now()) return known;
    verified.delete(token);
    return undefined;
  };
  const learn = (token: string, claims: TokenClaims): void => {
    if (verified.size >= VERIFIED_TOKENS) verified.delete(verified.keys().next().value as string);
    verified.set(token, claims);
  };
  const verify = async (token: string): Promise<TokenClaims | undefined> => {
    if (verified.has(token)) return remembered(token);
    const claims = await verifyToken(token);
    if (claims) learn(token, claims);
    return claims;
  };
  return { verifier: { remembered, verify }, learn };
}

/** The one signing key, read once: it mints the bearer tokens and seals the shared payload store's entries. */
export async function loadSigningKey(
  path: string,
  clock: Clock = realClock,
): Promise<{ authority: TokenAuthority; seal: EntrySeal }> {
  try {
    const pem = await readFile(path, 'utf8');
    return { authority: await createTokenAuthority(pem, clock), seal: await createEntrySeal(pem) };
  } catch (err) {
    throw new Error(`failed to load the token signing key from ${path}`, { cause: err });
  }
}

async function mint(
  key: KeyObject,
  keyId: string,
  opts: MintOptions,
  clock: Clock,
): Promise<{ token: string; claims: TokenClaims }> {
  const iat = Math.floor(clock.now() / 1000);
  const exp = iat + Math.max(1, Math.ceil(opts.ttlMs / 1000));
  const id = randomBytes(12).toString('base64url');
  const token = await new SignJWT({ hash: opts.hash })
    .setProtectedHeader({ alg: ALG, kid: keyId, typ: 'JWT' })
    .setIssuer(ISSUER)
    .setAudience(AUDIENCE)
    .setSubject(opts.pool)
    .setIssuedAt(iat)
    .setExpirationTime(exp)
    .setJti(id)
    .sign(key);
  return { token, claims: { pool: opts.pool, hash: opts.hash, issuedAtMs: iat * 1000, expiresAtMs: exp * 1000, id } };
}

async function verify(key: KeyObject, token: string, clock: Clock): Promise<TokenClaims | undefined> {
  if (token.length > MAX_TOKEN_LENGTH || !COMPACT_JWS.test(token)) return undefined;
  try {
    const { payload } = await jwtVerify(token, key, {
      algorithms: [ALG],
      issuer: ISSUER,
      audience: AUDIENCE,
      requiredClaims: ['sub', 'iat', 'exp', 'jti', 'hash'],
      currentDate: new Date(clock.now()),
      clockTolerance: 0,
    });
    const { sub, hash, iat, exp, jti } = payload;
    if (typeof hash !== 'string' || sub === undefined || iat === undefined || exp === undefined || jti === undefined)
      return undefined;
    return { pool: sub, hash, issuedAtMs: iat * 1000, expiresAtMs: exp * 1000, id: jti };
  } catch {
    // Every failure (garbled, forged, expired, wrong audience) is the same 401 to the caller.
    return undefined;
  }
}
