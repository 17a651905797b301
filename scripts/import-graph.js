#!/usr/bin/env node
// Prints the import graph between the top-level folders (npm run build first): for each pair, how many
// file-to-file imports cross from one folder into the other, for the product (what the image compiles: no
// tests, testing/ helpers, local/ or test/) and then for test and dev-only code; then any file-level import
// cycles. `--all` lists the crossing file pairs as well; `--root <dir>` reads another checkout's sources.
import { cycles, folderGraph, folderOf, importEdges, isTestCode } from '../dist/test/arch/imports.js';

const at = process.argv.indexOf('--root');
const edges = at > 0 ? importEdges(process.argv[at + 1]) : importEdges();
const product = edges.filter((e) => !isTestCode(e.from));
const tests = edges.filter((e) => isTestCode(e.from));
const print = (title, lines) => console.log(`${title}\n${lines.map((l) => `  ${l}`).join('\n') || '  (none)'}\n`);

print('product (no tests, testing/, local/, test/): from -> to: imports', folderGraph(product));
print('tests and dev-only code: from -> to: imports', folderGraph(tests));
print(
  'file-level import cycles',
  cycles(edges).map((c) => c.join(' <-> ')),
);
if (process.argv.includes('--all')) {
  print(
    'crossing imports',
    edges.filter((e) => folderOf(e.from) !== folderOf(e.to)).map((e) => `${e.from} -> ${e.to}`),
  );
}
