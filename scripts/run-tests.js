#!/usr/bin/env node
// Runs every compiled test (dist/**/*.test.js) with node's test runner. Suites that start clusters run two at
// a time: the machine has 2 cores, and each cluster is mostly waiting on its apiserver.
//
// `--tier unit|cluster|e2e` runs one tier: end to end is test/e2e, test/deploy and test/failover; cluster is every
// other `*.cluster.test.js`; unit is the rest. The tier is passed on as KINDLING_TEST_TIER, and the test bed refuses
// to start a cluster in the unit tier, so a test that needs one cannot hide there under a plain name.
//
// Before the run, compiled tests whose .ts source is gone are removed: tsc never deletes its old output, and
// a stale test would keep running code nobody reads. The run fails when any test was skipped or todo, even if
// everything else passed; the runner's own output goes through untouched, and the failed tests are named again
// after it, so a log read from its tail still says which failed.
import { existsSync, globSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { join, relative } from 'node:path';
import { tmpdir, availableParallelism } from 'node:os';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const TALLY = fileURLToPath(new URL('./test-tally.js', import.meta.url));

/** Removes dist/<p>.test.js (and its source map) when <p>.test.ts is gone; returns the tests that remain. */
function pruneStale(files) {
  return files.filter((file) => {
    const source = relative('dist', file).replace(/\.js$/, '.ts');
    if (existsSync(source)) return true;
    rmSync(file, { force: true });
    rmSync(`${file}.map`, { force: true });
    console.error(`removed ${file}: its source ${source} is gone`);
    return false;
  });
}

if (!existsSync('dist')) {
  console.error('no dist/ folder (did the build run?)');
  process.exit(1);
}
const { runtimeWarning } = await import('../dist/support/src/runtime.js');
const runtime = runtimeWarning(process.version, new Date());
console.error(`Testing on Node.js ${process.version}${runtime === undefined ? '' : `: ${runtime}`}`);
const E2E_DIRS = ['dist/test/e2e/', 'dist/test/deploy/', 'dist/test/failover/'];
const TIERS = {
  unit: (f) => !TIERS.cluster(f) && !TIERS.e2e(f),
  cluster: (f) => f.endsWith('.cluster.test.js') && !TIERS.e2e(f),
  e2e: (f) => E2E_DIRS.some((d) => f.startsWith(d)),
};
const args = process.argv.slice(2);
const tierAt = args.indexOf('--tier');
const tier = tierAt === -1 ? undefined : args.splice(tierAt, 2)[1];
if (tier !== undefined && !(tier in TIERS)) {
  console.error(`--tier ${tier}: not one of ${Object.keys(TIERS).join(', ')}`);
  process.exit(2);
}
if (tier !== undefined) process.env.KINDLING_TEST_TIER = tier;
const only = args;
const files = pruneStale(globSync('dist/**/*.test.js'))
  .filter((f) => tier === undefined || TIERS[tier](f))
  .filter((f) => only.length === 0 || only.some((o) => f.includes(o)))
  .sort();
if (files.length === 0) {
  console.error('no test files found under dist/ (did the build run?)');
  process.exit(1);
}
const concurrency = Math.max(2, availableParallelism());
const scratch = mkdtempSync(join(tmpdir(), 'kindling-tests-'));
const tallyFile = join(scratch, 'tally.jsonl');
// Node's own default: spec on a terminal, TAP otherwise.
const reporter = process.stdout.isTTY ? 'spec' : 'tap';
const result = spawnSync(
  process.execPath,
  [
    '--enable-source-maps',
    '--test',
    `--test-concurrency=${concurrency}`,
    '--test-timeout=600000',
    `--test-reporter=${reporter}`,
    '--test-reporter-destination=stdout',
    `--test-reporter=${TALLY}`,
    `--test-reporter-destination=${tallyFile}`,
    ...files,
  ],
  { stdio: 'inherit' },
);
const tally = existsSync(tallyFile)
  ? readFileSync(tallyFile, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l))
  : [];
rmSync(scratch, { recursive: true, force: true });
const where = (t) => (t.file ? relative('.', t.file) : 'unknown file');
const failed = tally.filter((t) => t.kind === 'failed');
if (failed.length > 0) {
  console.log(`\n${failed.length} test(s) failed:`);
  for (const t of failed) console.log(`  ${t.name} — ${where(t)}\n    ${t.reason.replaceAll('\n', '\n    ')}`);
}
const notRun = tally.filter((t) => t.kind !== 'failed');
if (notRun.length > 0) {
  console.error(`\n${notRun.length} test(s) skipped or todo; every test must run:`);
  for (const t of notRun)
    console.error(`  ${t.kind}: ${t.name}${typeof t.reason === 'string' ? ` (${t.reason})` : ''} — ${where(t)}`);
  process.exit(result.status || 1);
}
process.exit(result.status ?? 1);
