/**
 * A metric's value in the text a component's /metrics serves (its first sample whose labels include `labels`,
 * whatever its others; NaN when absent): what the benchmarks read of the components they run.
 */
export function metric(text: string, name: string, labels: Record<string, string> = {}): number {
  const wanted = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  for (const [, set = '', value] of text.matchAll(new RegExp(`^${name}(?:\\{([^}]*)\\})? ([\\d.e+]+)$`, 'gm'))) {
    const have = set.split(',');
    if (wanted.every((pair) => have.includes(pair))) return Number(value);
  }
  return Number.NaN;
}

/** How many times a component's memory saver has been turned off or on (0 before the first). */
export const saverSwitches = (text: string, to: 'off' | 'on'): number =>
  metric(text, 'kindling_memory_saver_switches_total', { to }) || 0;
