#!/usr/bin/env node
// Prints the import graph between the top-level folders (npm run build first): for each pair, how many
// file-to-file imports cross from one folder into the other, for the product (tests left out) and then for
// the tests; then any file-level import cycles. `--all` lists the crossing file pairs as well.
import { cycles, folderGraph, folderOf, importEdges, isTest } from '../dist/test/arch/imports.js';

const edges = importEdges();
const product = edges.filter((e) => !isTest(e.from));
const tests = edges.filter((e) => isTest(e.from));
const print = (title, lines) => console.log(`${title}\n${lines.map((l) => `  ${l}`).join('\n') || '  (none)'}\n`);

print('product modules (*.test.ts left out): from -> to: imports', folderGraph(product));
print('tests (*.test.ts): from -> to: imports', folderGraph(tests));
print('file-level import cycles', cycles(edges).map((c) => c.join(' <-> ')));
if (process.argv.includes('--all')) {
  print('crossing imports', edges.filter((e) => folderOf(e.from) !== folderOf(e.to)).map((e) => `${e.from} -> ${e.to}`));
}
