/**
 * The content digest of OCI blobs and manifests, apart from image.ts so that what only names content (the payload
 * signature a serving thread checks) does not load the image reader (tar-stream: about 1 MiB of heap per thread).
 */
import { createHash } from 'node:crypto';

export function sha256Digest(bytes: Buffer | string): string {
  return `sha256:${createHash('sha256').update(bytes).digest('hex')}`;
}
