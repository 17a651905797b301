/**
 * A metric's value in the text a component's /metrics serves (its first sample, whatever its labels; NaN when
 * absent): what the benchmarks read of the components they run.
 */
export const metric = (text: string, name: string): number =>
  Number(new RegExp(`^${name}(?:\\{[^}]*\\})? ([\\d.e+]+)$`, 'm').exec(text)?.[1] ?? Number.NaN);
