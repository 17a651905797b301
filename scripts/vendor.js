// Builds dist/vendor/client-node.js, which every `#k8s` import loads (package.json "imports"): the
// Kubernetes client as one minified module instead of its ~1,000 files and 25 MB of source. Loaded as it
// ships, the client alone holds 64 MiB of RSS in every component (V8 keeps each module's source and
// parse data); minified into one module, about 35 MiB; with only the exports the compiled code names
// (`k8s.<name>` in dist/), about 25 MiB. The ignition server's memory target cannot be met
// otherwise. Same code: the types still come from the package itself.
//
//   node scripts/vendor.js        (part of `npm run build`; does nothing when the output is current)
import { build, version as esbuildVersion } from 'esbuild';
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const outfile = `${root}dist/vendor/client-node.js`;
const stampFile = `${outfile}.stamp`;
const clientVersion = JSON.parse(
  readFileSync(`${root}node_modules/@kubernetes/client-node/package.json`, 'utf8'),
).version;

/**
 * What the compiled code names as `k8s.<name>`: every value import of the client is `import * as k8s from
 * '#k8s'` (lint). Some are not the client's (`k8s.io` in a string); they are dropped only when the bundle is
 * built, so a build with nothing new does not load the whole client to find out.
 */
function namedInCode() {
  const named = new Set();
  for (const entry of readdirSync(`${root}dist`, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile() || !entry.name.endsWith('.js') || entry.parentPath.startsWith(`${root}dist/vendor`)) continue;
    for (const [, name] of readFileSync(`${entry.parentPath}/${entry.name}`, 'utf8').matchAll(
      /\bk8s\.([A-Za-z_$][\w$]*)/g,
    ))
      named.add(name);
  }
  return [...named].sort();
}
const named = namedInCode();
// Keyed by the lock file and this script too: a new undici under the client, or other options, change the bundle.
const stamp = createHash('sha256')
  .update(JSON.stringify([clientVersion, esbuildVersion, named]))
  .update(readFileSync(`${root}package-lock.json`))
  .update(readFileSync(fileURLToPath(import.meta.url)))
  .digest('hex');

if (existsSync(outfile) && existsSync(stampFile) && readFileSync(stampFile, 'utf8') === stamp) process.exit(0);

const exported = new Set(Object.keys(await import('@kubernetes/client-node')));
const names = named.filter((n) => exported.has(n));

await build({
  stdin: { contents: `export { ${names.join(', ')} } from '@kubernetes/client-node';`, resolveDir: root, loader: 'js' },
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  minify: true,
  // Class and function names stay: they are what a stack trace or an error's name shows.
  keepNames: true,
  sourcemap: true,
  legalComments: 'linked',
  outfile,
  // The client's CommonJS dependencies call require (ws's optional native helpers, for one).
  banner: {
    js: "import { createRequire as __kindlingRequire } from 'node:module'; const require = __kindlingRequire(import.meta.url);",
  },
  logLevel: 'error',
});
writeFileSync(stampFile, stamp);
