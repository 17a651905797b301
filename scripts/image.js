#!/usr/bin/env node
// `npm run image`: builds Kindling's image from the Dockerfile and checks it as the Deployments run it.
//
//   node scripts/image.js [--tag TAG] [--no-check] [--save FILE] [--keep-engine]
//
//   --tag TAG       the image's tag (default kindling:dev)
//   --no-check      build only: the way in for other scripts and tests, e.g.
//                   `node scripts/image.js --tag kindling:test --no-check --save /tmp/kindling.tar`
//   --save FILE     also write the image as a `docker save` tarball (what `ctr images import` loads)
//   --keep-engine   leave a dockerd this run started running (by default it is stopped at the end)
//
// Exit 0: the image is built (and, without --no-check, passed every check); 1: it failed, with the reason on
// stderr. This interface is used by other scripts: keep it stable.
//
// Steps: a container engine (image-engine.js: Debian's docker.io, installed and started when missing and root);
// the base `node:24-bookworm-slim`, pulled or else assembled from the machine's Debian mirror and cached
// (image-base.js, docs/deploying.md); `docker build` of the unchanged Dockerfile with the legacy builder on the
// host network; the checks (image-check.js). Node built-ins only.
import { homedir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { spawnSync } from 'node:child_process';
import { ensureBase } from './image-base.js';
import { checkImage } from './image-check.js';
import { docker, ensureEngine } from './image-engine.js';

/**
 * The most the image may weigh, in MB (docker's uncompressed size). Measured at 278 MB: the base 214 (the Node 24
 * binary alone is 121), Debian's ignition, jemalloc and CA certificates 34, production node_modules 21 (the
 * unbundled Kubernetes client, never loaded, no longer ships: about 67 MB less), dist 8.5. Past this budget,
 * look at what grew.
 */
const SIZE_BUDGET_MB = 300;

const root = fileURLToPath(new URL('..', import.meta.url));
const print = (line) => console.error(line);
const since = (start) => `${((Date.now() - start) / 1000).toFixed(1)} s`;

function options() {
  const { values } = parseArgs({
    options: {
      tag: { type: 'string', default: 'kindling:dev' },
      'no-check': { type: 'boolean', default: false },
      save: { type: 'string' },
      'keep-engine': { type: 'boolean', default: false },
    },
  });
  return values;
}

function build(tag) {
  const start = Date.now();
  // The legacy builder: Debian's engine has no buildx. Host network: the engine has no bridge (image-engine.js).
  const r = spawnSync('docker', ['build', '--network', 'host', '-t', tag, root], {
    stdio: 'inherit',
    env: { ...process.env, DOCKER_BUILDKIT: '0' },
  });
  if (r.status !== 0) throw new Error(`docker build failed (exit ${r.status ?? r.signal})`);
  print(`Built ${tag} in ${since(start)}`);
}

function check(tag) {
  const start = Date.now();
  const { size, problems } = checkImage(tag, SIZE_BUDGET_MB);
  print(`Checked ${tag} in ${since(start)}: ${(size / 1e6).toFixed(0)} MB (budget ${SIZE_BUDGET_MB} MB)`);
  if (problems.length > 0) throw new Error(`the image ${tag} failed its checks:\n  ${problems.join('\n  ')}`);
}

function save(tag, file) {
  const r = docker(['save', '--output', file, tag], { stdio: 'inherit' });
  if (r.status !== 0) throw new Error(`docker save ${tag} failed (exit ${r.status ?? r.signal})`);
  print(`Saved ${tag} to ${file}`);
}

async function main() {
  const opts = options();
  const cacheDir = join(
    process.env.KINDLING_CACHE_DIR ?? join(process.env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'kindling'),
    'image',
  );
  const start = Date.now();
  const stopEngine = await ensureEngine({ logDir: cacheDir, print });
  try {
    const base = ensureBase({ root, cacheDir, print });
    print(`Base image node:24-bookworm-slim ${base} (${since(start)})`);
    build(opts.tag);
    if (!opts['no-check']) check(opts.tag);
    if (opts.save) save(opts.tag, opts.save);
  } finally {
    if (!opts['keep-engine']) await stopEngine();
  }
  print(`npm run image took ${since(start)}`);
}

try {
  await main();
} catch (err) {
  print(`image: ${err instanceof Error ? err.message : String(err)}`);
  process.exitCode = 1;
}
