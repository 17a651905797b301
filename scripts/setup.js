#!/usr/bin/env node
// Set-up shared by `npm start` and `npm test` on a fresh clone: install the locked dependencies when they are
// missing or older than package-lock.json. Uses only Node built-ins, since nothing else is installed yet.
import { existsSync, statSync } from 'node:fs';
import { spawnSync } from 'node:child_process';

const [major, minor] = process.versions.node.split('.').map(Number);
if (major < 20 || (major === 20 && minor < 19)) {
  console.error(`Kindling needs Node.js 20.19 or newer; this is ${process.version}.`);
  process.exit(1);
}
const installed = 'node_modules/.package-lock.json';
if (!existsSync(installed) || statSync(installed).mtimeMs < statSync('package-lock.json').mtimeMs) {
  console.error('Installing dependencies (npm ci)…');
  const r = spawnSync('npm', ['ci', '--no-audit', '--no-fund'], { stdio: 'inherit' });
  if (r.status !== 0) process.exit(r.status ?? 1);
}
