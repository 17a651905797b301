/**
 * The repository's import graph, read from the TypeScript sources (not dist/): every relative import, re-export
 * and dynamic import between files, and the folders they belong to. The fence test, the cycle test and
 * `node scripts/import-graph.js` all read it from here.
 */
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

/** The repository root (this file is test/arch/imports.ts, compiled to dist/test/arch/imports.js). */
export const ROOT = resolveRoot(dirname(fileURLToPath(import.meta.url)));

/** Top-level folders in the order the graph prints them: shared code, then deployables, then dev-only. */
export const FOLDERS = [
  'api',
  'support',
  'cli',
  'nodepool-controller',
  'ignition-server',
  'inplace-upgrader',
  'node-agent',
  'drainer',
  'local',
  'test',
] as const;

export interface Edge {
  /** Importing file, relative to the root with forward slashes (e.g. cli/src/plan.ts). */
  from: string;
  /** Imported file, same form. */
  to: string;
}

function resolveRoot(dir: string): string {
  // Compiled: <root>/dist/test/arch; from source (ts-aware tools): <root>/test/arch.
  const up = resolve(dir, '..', '..');
  return up.endsWith(`${sep}dist`) ? dirname(up) : up;
}

function walk(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return name === 'node_modules' || name === 'go' ? [] : walk(path);
    return name.endsWith('.ts') && !name.endsWith('.d.ts') ? [path] : [];
  });
}

/** Every .ts source under the top-level folders, relative to the root. */
function sourceFiles(root = ROOT): string[] {
  return FOLDERS.flatMap((f) => walk(join(root, f)))
    .map((p) => relative(root, p).split(sep).join('/'))
    .sort();
}

/** Maps an import specifier written in `from` ('./x.js', '../y/index.js') to the .ts file it names, if relative. */
function target(from: string, specifier: string, known: ReadonlySet<string>): string | undefined {
  if (!specifier.startsWith('.')) return undefined;
  const path = join(dirname(from), specifier).split(sep).join('/');
  const candidates = [path.replace(/\.js$/, '.ts'), `${path}.ts`, `${path}/index.ts`];
  return candidates.find((c) => known.has(c));
}

/** One edge per relative import of each file (type-only imports included: they tie files together all the same). */
export function importEdges(root = ROOT): Edge[] {
  const files = sourceFiles(root);
  const known = new Set(files);
  return files.flatMap((from) => {
    const info = ts.preProcessFile(readFileSync(join(root, from), 'utf8'), true, true);
    const targets = info.importedFiles
      .map((f) => target(from, f.fileName, known))
      .filter((t): t is string => t !== undefined);
    return [...new Set(targets)].map((to) => ({ from, to }));
  });
}

/** The top-level folder of a file ('cli/src/plan.ts' → 'cli').
 * @public scripts/import-graph.js loads it from dist/, where knip does not follow.
 */
export function folderOf(file: string): string {
  return file.split('/')[0] ?? file;
}

/** Test and dev-only code: tests, testing/ helpers, and the local/ and test/ folders (the fence's own split).
 * @public scripts/import-graph.js loads it from dist/, where knip does not follow.
 */
export function isTestCode(file: string): boolean {
  return file.endsWith('.test.ts') || file.includes('/testing/') || ['local', 'test'].includes(folderOf(file));
}

/** Counts of file→file imports between different top-level folders, as "from -> to: n" lines.
 * @public scripts/import-graph.js loads it from dist/, where knip does not follow.
 */
export function folderGraph(edges: readonly Edge[]): string[] {
  const counts = new Map<string, number>();
  for (const { from, to } of edges) {
    const a = folderOf(from);
    const b = folderOf(to);
    if (a === b) continue;
    const key = `${a} -> ${b}`;
    counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  const order = (f: string): number => FOLDERS.indexOf(f as (typeof FOLDERS)[number]);
  return [...counts]
    .sort(([x], [y]) => {
      const [xa = '', xb = ''] = x.split(' -> ');
      const [ya = '', yb = ''] = y.split(' -> ');
      return order(xa) - order(ya) || order(xb) - order(yb);
    })
    .map(([key, n]) => `${key}: ${n}`);
}

function reachable(start: string, next: ReadonlyMap<string, readonly string[]>): Set<string> {
  const seen = new Set<string>();
  const todo = [...(next.get(start) ?? [])];
  for (let v = todo.pop(); v !== undefined; v = todo.pop()) {
    if (seen.has(v)) continue;
    seen.add(v);
    todo.push(...(next.get(v) ?? []));
  }
  return seen;
}

/** The import cycles among files: each group of files that reach one another through imports, sorted. */
export function cycles(edges: readonly Edge[]): string[][] {
  const next = new Map<string, string[]>();
  for (const { from, to } of edges) next.set(from, [...(next.get(from) ?? []), to]);
  const reach = new Map([...next.keys()].map((v) => [v, reachable(v, next)]));
  const placed = new Set<string>();
  const found: string[][] = [];
  for (const v of [...next.keys()].sort()) {
    if (placed.has(v) || !reach.get(v)?.has(v)) continue;
    const group = [...(reach.get(v) ?? [])].filter((w) => reach.get(w)?.has(v)).sort();
    group.forEach((w) => placed.add(w));
    found.push(group);
  }
  return found;
}

/**
 * The specifiers a file's static imports and re-exports load when it runs: type-only ones are left out (the
 * compiler erases them), dynamic ones too (they load later, if at all).
 */
function valueImports(root: string, file: string): string[] {
  const source = ts.createSourceFile(file, readFileSync(join(root, file), 'utf8'), ts.ScriptTarget.Latest);
  return source.statements.flatMap((s) => {
    if (ts.isImportDeclaration(s) && !typeOnlyImport(s.importClause))
      return [(s.moduleSpecifier as ts.StringLiteral).text];
    if (ts.isExportDeclaration(s) && s.moduleSpecifier && !s.isTypeOnly)
      return [(s.moduleSpecifier as ts.StringLiteral).text];
    return [];
  });
}

const typeOnlyImport = (clause: ts.ImportClause | undefined): boolean =>
  clause !== undefined &&
  (clause.isTypeOnly ||
    (clause.name === undefined &&
      clause.namedBindings !== undefined &&
      ts.isNamedImports(clause.namedBindings) &&
      clause.namedBindings.elements.every((e) => e.isTypeOnly)));

/** The files and packages (`node:` builtins included) a module loads when it runs, following its value imports. */
export function loadedBy(entry: string, root = ROOT): { files: string[]; packages: string[] } {
  const known = new Set(sourceFiles(root));
  const files = new Set<string>();
  const packages = new Set<string>();
  const visit = (file: string): void => {
    if (files.has(file)) return;
    files.add(file);
    for (const specifier of valueImports(root, file)) {
      const to = target(file, specifier, known);
      if (to !== undefined) visit(to);
      else if (!specifier.startsWith('.')) packages.add(specifier);
    }
  };
  visit(entry);
  return { files: [...files].sort(), packages: [...packages].sort() };
}
