/**
 * `npm run bench`: every benchmark, one after the other (each starts and stops its own test bed),
 * their output passed through, then one table of every figure: value, reference, ratio, target, pass/fail.
 * Not part of `npm test`.
 *
 *   npm run bench -- [--only ignition,controller,rollout,rollout-30,rollout-capi,rollout-disruption,tenants]
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { availableParallelism, cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { formatTable, loadAverage, parseRows, ROWS_FILE_ENV } from './table.js';

const BENCHES: Record<string, { script: string; args: string[] }> = {
  // Serving, boot storm, memory, restart (targets 1, 2, 3, 5).
  ignition: { script: 'ignition-server.js', args: ['--only', 'serving,storm,memory'] },
  // 1,000 NodePools against the real ignition server (target 6).
  controller: { script: 'nodepool-controller.js', args: ['1000'] },
  // 100 nodes, maxUnavailable 10 on the MachineSet engine (target 7).
  rollout: {
    script: 'inplace.js',
    args: ['--engine', 'MachineSet', '--nodes', '100', '--max-unavailable', '10', '--step', '5', '--target', '1.1'],
  },
  // The in-place engines compared: 30 nodes, maxUnavailable 3, each engine.
  'rollout-30': {
    script: 'inplace.js',
    args: ['--engine', 'MachineSet', '--nodes', '30', '--max-unavailable', '3', '--step', '5'],
  },
  'rollout-capi': {
    script: 'inplace.js',
    args: ['--engine', 'ClusterAPI', '--nodes', '30', '--max-unavailable', '3', '--step', '5'],
  },
  // A config change of a None-policy path against the same change with Drain+Reboot, 30 nodes,
  // maxUnavailable 3, two pods per node: a row pair each for time and evictions, the None one as a ratio.
  'rollout-disruption': {
    script: 'inplace.js',
    args: ['--change', 'both', '--nodes', '30', '--max-unavailable', '3', '--step', '5', '--pods-per-node', '2'],
  },
  // Cost per tenant: every component's RSS and idle CPU at 1, 4 and 8 guests, per 100 nodes, 1,000 pools.
  tenants: { script: 'tenants.js', args: ['--guests', '1,4,8'] },
};

/** The programs a benchmark runs besides the test bed, by the Debian package that brings each (scripts/debian.js). */
const TOOLS: Record<string, Record<string, string>> = {
  ignition: { '/usr/sbin/nginx': 'nginx-light', '/usr/bin/wrk': 'wrk' },
};

/**
 * What to tell a person whose machine lacks a tool the chosen benchmarks run, or undefined when nothing is
 * missing: without it, the first missing program showed up minutes later as a timeout's stack trace.
 */
export function missingTools(names: readonly string[], exists: (path: string) => boolean): string | undefined {
  const missing = names.flatMap((n) => Object.entries(TOOLS[n] ?? {})).filter(([path]) => !exists(path));
  if (missing.length === 0) return undefined;
  const packages = [...new Set(missing.map(([, pkg]) => pkg))].join(' ');
  return `the benchmarks need ${missing.map(([path, pkg]) => `${path} (Debian ${pkg})`).join(', ')}: run \`npm run setup -- --bench\` (or \`sudo apt-get install ${packages}\`), then npm run bench again`;
}

const out = (line: string): void => void process.stdout.write(`${line}\n`);

function runBench(name: string, rowsFile: string): Promise<number> {
  const bench = BENCHES[name];
  if (!bench) throw new Error(`no benchmark "${name}" (known: ${Object.keys(BENCHES).join(', ')})`);
  const script = fileURLToPath(new URL(`./${bench.script}`, import.meta.url));
  out(`\n=== ${name}: node ${bench.script} ${bench.args.join(' ')}`);
  const child = spawn(process.execPath, [script, ...bench.args], {
    stdio: 'inherit',
    env: { ...process.env, [ROWS_FILE_ENV]: rowsFile },
  });
  return new Promise((resolve) => child.on('exit', (code) => resolve(code ?? 1)));
}

/** The benchmarks --only names, or undefined (said why) when this machine lacks a tool one of them runs. */
function chosenBenches(): string[] | undefined {
  const { values } = parseArgs({ options: { only: { type: 'string', default: Object.keys(BENCHES).join(',') } } });
  const names = (values.only ?? '').split(',').filter((n) => n !== '');
  const missing = missingTools(names, existsSync);
  if (missing === undefined) return names;
  process.stderr.write(`npm run bench: ${missing}\n`);
  return undefined;
}

async function main(): Promise<void> {
  const names = chosenBenches();
  if (names === undefined) {
    process.exitCode = 1;
    return;
  }
  const dir = await mkdtemp(join(tmpdir(), 'bench-all-'));
  const rowsFile = join(dir, 'rows.jsonl');
  const header = `machine: ${availableParallelism()} cores (${cpus()[0]?.model ?? '?'}), load average at start ${loadAverage()}`;
  const failed: string[] = [];
  try {
    for (const name of names) if ((await runBench(name, rowsFile)) !== 0) failed.push(name);
    const rows = parseRows(await readFile(rowsFile, 'utf8').catch(() => ''));
    out('');
    out(header);
    out(`load average at the end: ${loadAverage()}`);
    for (const line of formatTable(rows)) out(line);
    if (failed.length > 0) out(`benchmarks that did not finish: ${failed.join(', ')}`);
    if (failed.length > 0 || rows.some((r) => r.pass === false)) process.exitCode = 1;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

// Imported by its test for missingTools: only run as the script.
if (import.meta.main) await main();
