/**
 * The content digest of OCI blobs and manifests, apart from image.ts so that what only names content (the payload
 * signature a serving thread checks) does not load the image reader and its tar-stream (as collect-garbage.ts
 * keeps prom-client out of the serving threads).
 */
import { createHash } from 'node:crypto';

export function sha256Digest(bytes: Buffer | string): string {
  return `sha256:${createHash('sha256').update(bytes).digest('hex')}`;
}
