/**
 * The config hash: the one fingerprint of what is on a node, over the two inputs exactly as the token Secret
 * stores them. The nodepool-controller names a pool's token Secret by it; the ignition server recomputes it
 * from what a token Secret holds, so a Secret whose release or config was edited away from its hash is refused.
 */
import { createHash } from 'node:crypto';

/** The only inputs of the hash, exactly as they are stored in the token Secret. */
export interface HashInputs {
  /** SECRET_KEYS.release: the release image reference. */
  release: string;
  /** SECRET_KEYS.config: the normalised documents, as a JSON array. */
  config: string;
}

/** 16 hex digits of SHA-256 over the two inputs (length-prefixed, so no two pairs collide by concatenation). */
export function configHash(inputs: HashInputs): string {
  return createHash('sha256')
    .update(`${inputs.release.length}:${inputs.release}\n${inputs.config.length}:${inputs.config}`)
    .digest('hex')
    .slice(0, 16);
}
