/** The digests that name payloads and config documents (apart from store.ts, so the serving threads need no store). */
import { createHash } from 'node:crypto';

export const sha = (...parts: string[]): string => createHash('sha256').update(parts.join('\0')).digest('hex');

/** What identifies config documents in the cache keys. */
export const configDigest = (config: string): string => sha(config);
