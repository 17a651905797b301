/**
 * Polls until fn gives a value (not undefined or false) and returns it; errors thrown meanwhile count as "not
 * yet" and the last one becomes the cause of the timeout error, so a failing wait says what it last saw.
 */
export async function eventually<T>(
  what: string,
  fn: () => Promise<T | undefined | false>,
  timeoutMs = 30_000,
  everyMs = 100,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  while (Date.now() < deadline) {
    try {
      const v = await fn();
      if (v !== undefined && v !== false) return v;
    } catch (err) {
      last = err;
    }
    await new Promise((r) => setTimeout(r, everyMs));
  }
  // The runner prints the message, not always the cause: the last error goes in both, cut short.
  const lastSeen = last === undefined ? '' : ` (last: ${String((last as Error).message ?? last).slice(0, 300)})`;
  throw new Error(`timed out waiting for ${what}${lastSeen}`, { cause: last });
}
