/**
 * A payload's bytes: how a rendered config becomes the shared tail with its two slots (the spec version and the
 * join files), and the file format of the cache directory and the shared store, `<minVersion> <joinAt>\n<tail>`.
 * Held bytes live in shared memory, so every serving thread sends the same ones.
 */
import { open, type FileHandle } from 'node:fs/promises';
import { InvalidConfigError, type RenderedPayload } from './render.js';
import { SPEC_VERSIONS, type SpecVersion } from './versions.js';
import { HEAD, type Payload } from './payload.js';

const SLOT = '@@KINDLING_SPEC_VERSION@@';

/** Where a host's join files go: after the last entry of `storage.files` (see toPayload). */
const JOIN_MARK = '@@KINDLING_JOIN_MATERIAL@@';
const JOIN_SLOT = `,"${JOIN_MARK}"`;

const objectOr = (v: unknown): Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : {};

/**
 * Serialises with two slots: the spec version (first, so it varies cheaply) and the join files (a marker
 * entry closing `storage.files`, cut out and remembered as an offset). A config that spells the marker
 * itself is refused: the offset must be unambiguous.
 */
export function toPayload(key: string, rendered: RenderedPayload): Payload {
  const { ignition, ...rest } = rendered.config;
  const storage = objectOr(rest.storage);
  const files: unknown[] = Array.isArray(storage.files) ? (storage.files as unknown[]) : [];
  if (files.length === 0) throw new Error('a payload always holds the release identity file');
  const withSlot = { ...rest, storage: { ...storage, files: [...files, JOIN_MARK] } };
  const json = JSON.stringify({ ignition: { ...objectOr(ignition), version: SLOT }, ...withSlot });
  if (!json.startsWith(HEAD + SLOT)) throw new Error('payload serialization lost its version slot');
  const tail = json.slice(HEAD.length + SLOT.length);
  const joinAt = tail.indexOf(JOIN_SLOT);
  if (joinAt < 0 || tail.indexOf(JOIN_MARK) !== joinAt + 2 || tail.includes(JOIN_MARK, joinAt + 3)) {
    throw new InvalidConfigError(`the config contains the reserved text ${JOIN_MARK}`);
  }
  return {
    key,
    minVersion: rendered.minVersion,
    tail: sharedText(tail.slice(0, joinAt) + tail.slice(joinAt + JOIN_SLOT.length)),
    joinAt: Buffer.byteLength(tail.slice(0, joinAt)),
  };
}

/**
 * Text encoded straight into shared memory. Payloads are megabytes and held for long: a transient copy of
 * each, freed only when the garbage collector gets to it, leaves holes between the ones kept that the
 * process's RSS does not give back.
 */
function sharedText(text: string): Buffer {
  const shared = Buffer.from(new SharedArrayBuffer(Buffer.byteLength(text)));
  shared.write(text);
  return shared;
}

/** A file read straight into shared memory (see sharedText); undefined when it cannot be read. */
export async function readShared(path: string): Promise<Buffer | undefined> {
  let file: FileHandle | undefined;
  try {
    file = await open(path, 'r');
    const { size } = await file.stat();
    const bytes = Buffer.from(new SharedArrayBuffer(size));
    let read = 0;
    while (read < size) {
      const { bytesRead } = await file.read(bytes, read, size - read, read);
      if (bytesRead === 0) return undefined;
      read += bytesRead;
    }
    return bytes;
  } catch {
    return undefined;
  } finally {
    await file?.close();
  }
}

/**
 * A payload's bytes in shared memory: every serving thread sends the same bytes (serving/pool.ts), held once
 * in the process whatever the number of threads.
 */
function sharedBytes(bytes: Buffer): Buffer {
  const shared = Buffer.from(new SharedArrayBuffer(bytes.length));
  bytes.copy(shared);
  return shared;
}

/** The bytes of a payload file (the cache directory's and the shared store's), as chunks. */
export function payloadFileChunks(payload: Payload): Buffer[] {
  return [Buffer.from(`${payload.minVersion} ${payload.joinAt}\n`), payload.tail];
}

/** `<minVersion> <joinAt>\n<tail>`, the bytes of a payload file; undefined when they are not. */
export function parsePayloadFile(key: string, bytes: Buffer): Payload | undefined {
  // A file of an older format (no joinAt) is as good as absent.
  const newline = bytes.indexOf(0x0a);
  const [minVersion, joinText] = bytes.subarray(0, Math.max(0, newline)).toString('utf8').split(' ') as [
    SpecVersion,
    string | undefined,
  ];
  const joinAt = Number(joinText);
  if (newline < 0 || !SPEC_VERSIONS.includes(minVersion) || !Number.isInteger(joinAt)) return undefined;
  const tail =
    bytes.buffer instanceof SharedArrayBuffer ? bytes.subarray(newline + 1) : sharedBytes(bytes.subarray(newline + 1));
  if (joinAt < 0 || joinAt > tail.length) return undefined;
  return { key, minVersion, tail, joinAt };
}
