/** One sample of a metric in the text a component's /metrics serves: its labels as `k="v"` pairs, and its value. */
interface Sample {
  labels: string[];
  value: number;
}

/** Prometheus' text format spells infinities `+Inf` and `-Inf`, which Number() does not read. */
const valueOf = (text: string): number =>
  text.endsWith('Inf') ? (text.startsWith('-') ? -1 : 1) * Infinity : Number(text);

/** A sample's labels as `k="v"` pairs (a value may hold a comma or an escaped quote). */
const labelPairs = (set: string): string[] => [...set.matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map(([pair]) => pair);

/** Every sample of `name` (a timestamp after the value, which the format allows, is not read). */
function samples(text: string, name: string): Sample[] {
  const pattern = new RegExp(`^${name}(?:\\{([^}]*)\\})? ([+-]?[\\d.]+(?:e[+-]?\\d+)?|NaN|[+-]Inf)(?: \\d+)?$`, 'gm');
  return [...text.matchAll(pattern)].map(([, set = '', value = '']) => ({
    labels: labelPairs(set),
    value: valueOf(value),
  }));
}

/** The samples of `name` whose labels include `labels`, whatever their others. */
function matching(text: string, name: string, labels: Record<string, string>): Sample[] {
  const wanted = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  return samples(text, name).filter((s) => wanted.every((pair) => s.labels.includes(pair)));
}

/**
 * A metric's value in the text a component's /metrics serves (its first sample whose labels include `labels`,
 * whatever its others; NaN when absent): what the benchmarks read of the components they run.
 */
export const metric = (text: string, name: string, labels: Record<string, string> = {}): number =>
  matching(text, name, labels)[0]?.value ?? Number.NaN;

/** The sum of a metric's samples whose labels include `labels` (0 when there is none): a total over threads. */
export const metricSum = (text: string, name: string, labels: Record<string, string> = {}): number =>
  matching(text, name, labels).reduce((sum, s) => sum + s.value, 0);

/** The values a label takes among a metric's samples, each once, in the order they come. */
export const labelValues = (text: string, name: string, label: string): string[] => [
  ...new Set(
    samples(text, name).flatMap((s) =>
      s.labels.filter((l) => l.startsWith(`${label}="`)).map((l) => l.slice(label.length + 2, -1)),
    ),
  ),
];

/** How many times a component's memory saver has been turned off or on (0 before the first). */
export const saverSwitches = (text: string, to: 'off' | 'on'): number =>
  metric(text, 'kindling_memory_saver_switches_total', { to }) || 0;
