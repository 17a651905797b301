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
 * The payload's bytes at a version, as chunks (no copy of the large part). `join` (comma-led file entries,
 * see join.ts) is the one per-pool part: the shared bytes stay shared, cached once per (release, config).
 */
export function payloadChunks(p: Payload, version: SpecVersion, join?: Buffer): Buffer[] {
  const head = HEADS.get(version) as Buffer;
  if (!join) return [head, p.tail];
  return [head, p.tail.subarray(0, p.joinAt), join, p.tail.subarray(p.joinAt)];
}

/** A small payload's bytes before and after its join point at one version, each one buffer of this thread's own. */
interface Parts {
  before: Buffer;
  after: Buffer;
}

const SMALL_PARTS = new WeakMap<Payload, Map<SpecVersion, Parts>>();

/**
 * A small payload's bytes at a version, as payloadChunks, in as few chunks as the join files allow. Its bytes
 * before and after the join point are each joined once per payload and version and kept with the payload
 * (under 64 KiB each), so a request makes no view of the shared bytes and writes two or three chunks, not
 * four: each chunk is a write through the HTTP and stream layers and a look-up in the TLS layer's writev.
 */
export function smallPayloadChunks(p: Payload, version: SpecVersion, join?: Buffer): Buffer[] {
  let versions = SMALL_PARTS.get(p);
  if (!versions) SMALL_PARTS.set(p, (versions = new Map<SpecVersion, Parts>()));
  let parts = versions.get(version);
  if (!parts) {
    const head = HEADS.get(version) as Buffer;
    parts = {
      before: Buffer.concat([head, p.tail.subarray(0, p.joinAt)]),
      after: Buffer.from(p.tail.subarray(p.joinAt)),
    };
    versions.set(version, parts);
  }
  return join ? [parts.before, join, parts.after] : [parts.before, parts.after];
}

export function payloadBytes(p: Payload, version: SpecVersion, join?: Buffer): Buffer {
  return Buffer.concat(payloadChunks(p, version, join));
}
