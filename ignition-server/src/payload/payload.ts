/**
 * A generated payload as it is held and served: the bytes after the spec version, shared by every pool and
 * token of one (release, config) pair; the version and a pool's join files are put around them per request.
 * Apart from store.ts, so the serving threads load no more than this.
 */
import { SPEC_VERSIONS, type SpecVersion } from './versions.js';

/** The first bytes of every payload: `ignition.version` is the first field, so it is cheap to vary. */
export const HEAD = '{"ignition":{"version":"';
/** HEAD and the version, one buffer per version: one write fewer per request than the two apart. */
const HEADS = new Map<string, Buffer>(SPEC_VERSIONS.map((v) => [v, Buffer.from(HEAD + v)]));

export interface Payload {
  key: string;
  minVersion: SpecVersion;
  /** Everything after the version string; the payload at version v is HEAD + v + tail. */
  tail: Buffer;
  /** Offset in `tail` right after the last entry of `storage.files`: per-host join files are spliced in here. */
  joinAt: number;
}

/**
 * The payload's bytes at a version, as chunks (no copy of the shared bytes). `join` (comma-led file entries,
 * see join.ts) is the one per-pool part: the shared bytes stay shared, cached once per (release, config).
 */
export function payloadChunks(p: Payload, version: SpecVersion, join?: Buffer): Buffer[] {
  const head = HEADS.get(version) as Buffer;
  if (!join) return [head, p.tail];
  const [before, after] = splitAtJoin(p);
  return [head, before, join, after];
}

/** Each payload's views of its bytes before and after the join point, made once rather than per request. */
const SPLITS = new WeakMap<Payload, [Buffer, Buffer]>();

/**
 * Views, not copies: a copy per payload (or per version) on every serving thread would be memory outside the
 * cache's budget, which a tenant can multiply by asking for each token at each version.
 */
function splitAtJoin(p: Payload): [Buffer, Buffer] {
  let split = SPLITS.get(p);
  if (!split) SPLITS.set(p, (split = [p.tail.subarray(0, p.joinAt), p.tail.subarray(p.joinAt)]));
  return split;
}

export function payloadBytes(p: Payload, version: SpecVersion, join?: Buffer): Buffer {
  return Buffer.concat(payloadChunks(p, version, join));
}
