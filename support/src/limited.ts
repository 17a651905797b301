/**
 * A fan-out of requests with a bound on how many are in flight: hundreds at once would crowd out the work
 * that waits on its answers, in this process and in the apiserver.
 */

/**
 * Runs `fn` over every item, at most `limit` at once. Every item runs even when some fail; once all have
 * settled, the first failure is thrown, so no request of a failed fan-out outlives it.
 */
export async function forEachLimited<T>(
  items: readonly T[],
  limit: number,
  fn: (item: T) => Promise<unknown>,
): Promise<void> {
  let next = 0;
  let failure: { err: unknown } | undefined;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const item = items[next++] as T;
      try {
        await fn(item);
      } catch (err) {
        failure ??= { err };
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(Math.max(1, limit), items.length) }, worker));
  if (failure) throw failure.err;
}
