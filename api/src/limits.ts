/**
 * How many bytes a pool's inputs may inflate to, shared by every component that reads them, so the
 * ignition server, the in-place decision and the host agent refuse the same configs. A MachineConfig's
 * file fits in a ConfigMap as gzip, and a few KiB of gzip can stand for gigabytes. The servers take
 * `--max-config-bytes`; the agent has no flag and applies the default, so a server's limit above it would
 * let through a payload every host then refuses.
 */

const MIB = 1024 * 1024;

/** The files of one pool's config (every MachineConfig and the release's fragments), decoded and inflated, summed. */
export const DEFAULT_MAX_CONFIG_BYTES = 64 * MIB;

/** Every layer of one release image, inflated, summed. */
export const DEFAULT_MAX_RELEASE_BYTES = 256 * MIB;

/** Layers of one release image (a release holds a manifest and a few Ignition fragments). */
export const DEFAULT_MAX_RELEASE_LAYERS = 16;

/**
 * What a node's payload Secret may hold (the apiserver refuses a Secret whose data passes 1 MiB): the target
 * config, and beside it, when it fits, the config the node booted with (gzip). The agent inflates that one
 * to no more than this either: a payload that could not have been handed over as a Secret is no payload.
 */
export const MAX_PAYLOAD_SECRET_BYTES = MIB;
