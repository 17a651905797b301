#!/usr/bin/env node
// Set-up shared by `npm start` and `npm test` on a fresh clone: the Debian packages the environment and the
// tests run (installed when this user may, else the exact command to run), then the locked dependencies when
// they are missing or older than package-lock.json. `--bench` adds the benchmarks' packages. Uses only Node
// built-ins, since nothing else is installed yet.
import { existsSync, lstatSync, statSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { ensurePackages, packagesFor, realHost } from './debian.js';

const [major, minor] = process.versions.node.split('.').map(Number);
if (major < 20 || (major === 20 && minor < 19)) {
  console.error(`Kindling needs Node.js 20.19 or newer; this is ${process.version}.`);
  process.exit(1);
}

try {
  const code = ensurePackages(packagesFor(process.argv.slice(2)), realHost);
  if (code !== 0) process.exit(code);
} catch (err) {
  // No dpkg: say so in one line rather than with a stack trace.
  console.error(err instanceof Error ? err.message : String(err));
  process.exit(1);
}

const installed = 'node_modules/.package-lock.json';
if (!existsSync(installed) || statSync(installed).mtimeMs < statSync('package-lock.json').mtimeMs) {
  if (existsSync('node_modules') && lstatSync('node_modules').isSymbolicLink()) {
    // A work tree sharing another checkout's dependencies: npm ci would empty the folder it points at.
    console.error(
      'node_modules is a link to another checkout and looks older than package-lock.json: not reinstalling through it.',
    );
  } else {
    console.error('Installing dependencies (npm ci)…');
    const r = spawnSync('npm', ['ci', '--no-audit', '--no-fund'], { stdio: 'inherit' });
    if (r.status !== 0) process.exit(r.status ?? 1);
  }
}
