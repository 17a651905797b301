/**
 * The benchmarks' one table: figure, value, reference, ratio, target, pass. Each benchmark prints its own rows;
 * run by `npm run bench` (all.ts), it also appends them as JSON lines to the file named by BENCH_ROWS_FILE,
 * so the runner prints every benchmark's rows in one table at the end.
 */
import { appendFileSync } from 'node:fs';
import { loadavg } from 'node:os';

export interface Row {
  figure: string;
  value: string;
  reference: string;
  /** NaN when the figure has no ratio. */
  ratio: number;
  target: string;
  /** undefined: reported, not judged. */
  pass: boolean | undefined;
}

export const ROWS_FILE_ENV = 'BENCH_ROWS_FILE';

/** The machine's 1, 5 and 15 minute load averages, as each benchmark prints them at its start and end. */
export const loadAverage = (): string =>
  loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');

const fmt = (n: number, digits = 0): string => n.toFixed(digits);

export function formatTable(rows: readonly Row[]): string[] {
  const w = (key: 'figure' | 'value' | 'reference', min: number): number =>
    Math.max(min, ...rows.map((r) => r[key].length));
  const [fw, vw, rw] = [w('figure', 6), w('value', 5), w('reference', 9)];
  const tw = Math.max(6, ...rows.map((r) => r.target.length));
  const lines = [
    `| ${'figure'.padEnd(fw)} | ${'value'.padEnd(vw)} | ${'reference'.padEnd(rw)} | ratio | ${'target'.padEnd(tw)} | pass |`,
  ];
  lines.push(
    `|${'-'.repeat(fw + 2)}|${'-'.repeat(vw + 2)}|${'-'.repeat(rw + 2)}|-------|${'-'.repeat(tw + 2)}|------|`,
  );
  for (const r of rows) {
    const pass = r.pass === undefined ? '—' : r.pass ? 'yes' : 'NO';
    lines.push(
      `| ${r.figure.padEnd(fw)} | ${r.value.padEnd(vw)} | ${r.reference.padEnd(rw)} | ${Number.isNaN(r.ratio) ? '  —  ' : fmt(r.ratio, 2).padStart(5)} | ${r.target.padEnd(tw)} | ${pass.padEnd(4)} |`,
    );
  }
  return lines;
}

/** Prints the rows as a table, and hands them to the runner when there is one. */
export function reportRows(rows: readonly Row[]): void {
  process.stdout.write(`\n${formatTable(rows).join('\n')}\n`);
  const file = process.env[ROWS_FILE_ENV];
  if (file !== undefined && file !== '')
    appendFileSync(
      file,
      rows.map((r) => `${JSON.stringify({ ...r, ratio: Number.isNaN(r.ratio) ? null : r.ratio })}\n`).join(''),
    );
}

export function parseRows(text: string): Row[] {
  return text
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => {
      const r = JSON.parse(l) as Omit<Row, 'ratio'> & { ratio: number | null };
      return { ...r, ratio: r.ratio ?? Number.NaN };
    });
}
