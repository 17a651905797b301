/**
 * The contract between the in-place upgrader and the node agent (node-agent/): where in the guest cluster the
 * upgrader puts each node's payload Secret and agent Pod, and what the agent reads from them.
 */
import { createHash } from 'node:crypto';

/** Guest namespace of agent Pods and payload Secrets. */
export const GUEST_NAMESPACE = 'kindling-system';
export const AGENT_SERVICE_ACCOUNT = 'kindling-agent';
/**
 * Payload Secret keys, written by the upgrader and read by the agent. disruptionPolicy: the pool's effective
 * disruption policy as JSON (api/src/disruption.ts); absent, the agent uses the defaults. bootedHash and
 * bootedConfig (gzip): for a node the agent never updated, the hash and config its host booted with (Ignition
 * wrote it, so the agent has no record of it): the first update removes what that config has and the target
 * does not, and is weighed against it (node-agent/src/record.ts). rolloutCeiling: the pool's
 * ANNOTATIONS.rolloutCeiling as is; present, the agent applies no plan that drains or reboots.
 */
export const PAYLOAD_KEYS = {
  config: 'config',
  hash: 'hash',
  disruptionPolicy: 'disruptionPolicy',
  bootedHash: 'bootedHash',
  bootedConfig: 'bootedConfig',
  rolloutCeiling: 'rolloutCeiling',
} as const;
/** Where the agent container sees the host's root. */
export const HOST_ROOT_MOUNT = '/host';

/** `<prefix><node>`, shortened with a digest when the result would not be a valid object name. */
function perNodeName(prefix: string, node: string): string {
  const name = `${prefix}${node}`;
  if (name.length <= 253) return name;
  const digest = createHash('sha256').update(node).digest('hex').slice(0, 10);
  return `${name.slice(0, 242)}-${digest}`;
}

export const payloadSecretName = (node: string): string => perNodeName('kindling-payload-', node);
export const agentPodName = (node: string): string => perNodeName('kindling-agent-', node);
