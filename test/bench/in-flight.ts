/** `size` workers taking the next item as soon as they are free: `size` requests in flight all along. */
export async function inFlight<T>(items: readonly T[], size: number, fn: (t: T) => Promise<unknown>): Promise<void> {
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) await fn(items[next++] as T);
  };
  await Promise.all(Array.from({ length: size }, worker));
}
