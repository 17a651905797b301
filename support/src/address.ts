/**
 * The listen addresses of the ops and serving ports, apart from ops-server.ts so that a serving thread does not
 * load it: a value imported from `node:http` in an ES module makes Node evaluate every export of it, among them
 * the WebSocket getters that load Node's own undici (about 1.4 MiB of heap and 0.25 s of compilation per serving
 * thread, docs/benchmarks.md, the storm row).
 */

/** "127.0.0.1:8080", ":8080" or "8080" → [host, port]. */
export function splitAddress(address: string): [string | undefined, number] {
  const i = address.lastIndexOf(':');
  const host = i > 0 ? address.slice(0, i) : undefined;
  return [host, Number(i >= 0 ? address.slice(i + 1) : address)];
}
