#!/usr/bin/env node
// The kindling executable: runs the compiled CLI (npm run build first).
import { main } from '../dist/cli/src/main.js';

const node = {
  execArgv: process.execArgv,
  // In place (same pid, same stdio, same environment) with Node flags that V8 reads only at start
  // (support/src/young-generation.ts says why).
  restart: (nodeFlags) =>
    process.execve(process.execPath, [process.execPath, ...process.execArgv, ...nodeFlags, ...process.argv.slice(1)]),
};
const io = { out: (t) => process.stdout.write(t), err: (t) => process.stderr.write(t), env: process.env, node };
main(process.argv.slice(2), io).then(
  (code) => {
    process.exitCode = code;
  },
  (err) => {
    process.stderr.write(`kindling: ${err?.stack ?? err}\n`);
    process.exitCode = 1;
  },
);
