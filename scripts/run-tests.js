#!/usr/bin/env node
// Runs every compiled test (dist/**/*.test.js) with node's test runner. Suites that start clusters run two at
// a time: the machine has 2 cores, and each cluster is mostly waiting on its apiserver.
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';
import { availableParallelism } from 'node:os';

function find(dir) {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return name === 'node_modules' ? [] : find(path);
    return name.endsWith('.test.js') ? [path] : [];
  });
}

const only = process.argv.slice(2);
const files = find('dist').filter((f) => only.length === 0 || only.some((o) => f.includes(o))).sort();
if (files.length === 0) {
  console.error('no test files found under dist/ (did the build run?)');
  process.exit(1);
}
const concurrency = Math.max(2, availableParallelism());
const result = spawnSync(process.execPath, ['--enable-source-maps', '--test', `--test-concurrency=${concurrency}`, '--test-timeout=600000', ...files], {
  stdio: 'inherit',
});
process.exit(result.status ?? 1);
