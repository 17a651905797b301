/** What the agent cannot or will not apply in place: the reason becomes the node's Degraded reason. */
export class UnsupportedConfigError extends Error {
  override readonly name = 'UnsupportedConfigError';
}
