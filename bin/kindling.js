#!/usr/bin/env node
// The kindling executable: runs the compiled CLI (npm run build first).
import { main } from '../dist/cli/src/main.js';

const io = { out: (t) => process.stdout.write(t), err: (t) => process.stderr.write(t), env: process.env };
main(process.argv.slice(2), io).then(
  (code) => {
    process.exitCode = code;
  },
  (err) => {
    process.stderr.write(`kindling: ${err?.stack ?? err}\n`);
    process.exitCode = 1;
  },
);
