/**
 * References that must resolve inside the repository: a clone is all a reader has. Every relative link of
 * every Markdown file must name a file or folder of the repository, and its `#anchor` a heading of the target; every "Flow N step M" cited anywhere must be a step of
 * docs/architecture.md.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, isAbsolute, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The repository (this module runs from dist/test/docs/). */
const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
/** Build output, dependencies and local state: not the repository's own text. */
const SKIPPED_DIRS = new Set(['node_modules', 'dist']);

function files(dir: string, wanted: (name: string) => boolean): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return name.startsWith('.') || SKIPPED_DIRS.has(name) ? [] : files(path, wanted);
    return wanted(name) ? [path] : [];
  });
}

const withoutFences = (text: string): string => text.replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, '');

/** GitHub's heading anchors: lower case, punctuation dropped, each space a hyphen, repeats numbered. */
function anchors(markdown: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const m of withoutFences(markdown).matchAll(/^#{1,6}[ \t]+(.+?)[ \t#]*$/gm)) {
    const base = (m[1] as string)
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, '')
      .replace(/\s/g, '-');
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

/** The relative targets of a Markdown text: inline links and images, and reference definitions. Code is
 * not a link (a span such as `../usr/share/zoneinfo/UTC` names a path on a host). */
function targets(markdown: string): string[] {
  const prose = withoutFences(markdown).replace(/`[^`\n]*`/g, '');
  const inline = [...prose.matchAll(/!?\[[^\]]*\]\(<?([^)\s>]+)>?(?:\s+"[^"]*")?\)/g)].map((m) => m[1] as string);
  const defined = [...prose.matchAll(/^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)/gm)].map((m) => m[1] as string);
  return [...inline, ...defined].filter((t) => !/^[a-z][a-z0-9+.-]*:/i.test(t));
}

/** Where a target's path part points, from the file at `from` (a leading `/` is the repository's root). */
function resolveTarget(from: string, pathPart: string): string {
  if (pathPart === '') return from;
  return pathPart.startsWith('/') ? join(ROOT, pathPart) : resolve(dirname(from), pathPart);
}

function missingAnchor(path: string, anchor: string | undefined): string | undefined {
  if (!anchor || !path.endsWith('.md') || statSync(path).isDirectory()) return undefined;
  return anchors(readFileSync(path, 'utf8')).has(anchor.toLowerCase()) ? undefined : `has no heading #${anchor}`;
}

/** What is wrong with one target of the file at `from` (undefined: it resolves). */
function problem(from: string, target: string): string | undefined {
  const [pathPart = '', anchor] = target.split('#', 2);
  const path = resolveTarget(from, decodeURIComponent(pathPart));
  const inside = relative(ROOT, path);
  if (inside.startsWith('..') || isAbsolute(inside)) return 'points outside the repository';
  if (!existsSync(path)) return 'names nothing in the repository';
  return missingAnchor(path, anchor);
}

function brokenLinks(): string[] {
  return files(ROOT, (n) => n.endsWith('.md')).flatMap((file) =>
    targets(readFileSync(file, 'utf8')).flatMap((t) => {
      const why = problem(file, t);
      return why === undefined ? [] : [`${relative(ROOT, file)}: ${t} ${why}`];
    }),
  );
}

/** The step numbers of each "## Flow N:" section of docs/architecture.md. */
function flowSteps(): Map<number, Set<number>> {
  const doc = readFileSync(join(ROOT, 'docs/architecture.md'), 'utf8');
  const flows = new Map<number, Set<number>>();
  for (const section of doc.split(/^## /m)) {
    const n = /^Flow (\d+):/.exec(section)?.[1];
    if (n !== undefined) flows.set(Number(n), new Set([...section.matchAll(/^(\d+)\. /gm)].map((m) => Number(m[1]))));
  }
  return flows;
}

/** "Flow N", "Flow N step M", "Flow N steps M to K" in a text, as [flow, steps]. */
function flowCitations(text: string): [number, number[]][] {
  return [...text.matchAll(/Flow (\d+)(?!\w)(?: steps? (\d+)(?:(?: to |-|–)(\d+))?)?/g)].map((m) => {
    const steps = [m[2], m[3]].filter((s): s is string => s !== undefined).map(Number);
    return [Number(m[1]), steps];
  });
}

describe('references inside the repository', () => {
  it('when a Markdown file of the repository links to a file, folder or heading, it should resolve inside the repository', () => {
    assert.deepEqual(brokenLinks(), []);
  });

  it('when a link leaves the repository, names a missing file or a missing heading, it should be reported', () => {
    const readme = join(ROOT, 'README.md');
    const found = (md: string): (string | undefined)[] => targets(md).map((t) => problem(readme, t));
    assert.deepEqual(found('[design](../outside/design.md)\n\n[r]: ../../outside/research/x.md'), [
      'points outside the repository',
      'points outside the repository',
    ]);
    assert.deepEqual(found('[gone](docs/nothing-here.md) [bad](docs/architecture.md#no-such-heading)'), [
      'names nothing in the repository',
      'has no heading #no-such-heading',
    ]);
    assert.deepEqual(
      found(
        '[ok](docs/architecture.md#flow-2-a-host-boots) [web](https://example.com/x) `[in code](../nope)`\n```\n[in a fence](../nope)\n```',
      ),
      [undefined],
    );
  });

  it('when a text of the repository cites "Flow N step M", it should name a step of docs/architecture.md', () => {
    const flows = flowSteps();
    assert.deepEqual([...flows.keys()].sort(), [1, 2, 3], 'docs/architecture.md has Flows 1 to 3');
    const sources = files(ROOT, (n) => /\.(ts|md|ya?ml|sh|env)$/.test(n) && !n.endsWith('.d.ts'));
    const wrong = sources.flatMap((file) =>
      flowCitations(readFileSync(file, 'utf8'))
        .filter(([flow, steps]) => !flows.has(flow) || steps.some((s) => !flows.get(flow)?.has(s)))
        .map(
          ([flow, steps]) =>
            `${relative(ROOT, file)}: Flow ${flow}${steps.length > 0 ? ` step ${steps.join('-')}` : ''}`,
        ),
    );
    assert.deepEqual(wrong, []);
  });
});
