import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import * as keys from './keys.js';
import * as hostPaths from './host-paths.js';

/** docs/architecture.md (this module runs from dist/api/src/). */
const ARCHITECTURE = fileURLToPath(new URL('../../../docs/architecture.md', import.meta.url));

/** What each name-making export of keys.ts gives for placeholder arguments: the form the doc shows. */
const NAME_FORMS: Record<string, () => string> = {
  bootstrapPoolGroup: () => keys.bootstrapPoolGroup('<namespace>', '<pool>'),
  tokenSecretName: () => keys.tokenSecretName('<pool>', '<hash>'),
  userDataSecretName: () => keys.userDataSecretName('<pool>', '<hash>'),
  kubeconfigSecretName: () => keys.kubeconfigSecretName('<cluster>'),
  bootstrapTemplateName: () => keys.bootstrapTemplateName('<pool>', '<hash>'),
};
/** Exports that read names rather than make them: nothing of their own to document. */
const READERS = new Set(['poolOfBootstrapGroup', 'hashOfBootstrapTemplate', 'hashOfUserData']);
/** Values of a key rather than keys (and the API group): the doc shows them in their key's row. */
const VALUES = new Set([
  'GROUP',
  'NODE_STATES.working',
  'NODE_STATES.done',
  'NODE_STATES.degraded',
  'DRAIN_PREFIX',
  'UNCORDON_PREFIX',
  'SKIP_REMEDIATION_INPLACE',
  'HEALTH_GATE_CONSUMED',
]);

/** Every string an export holds, with where it comes from (`ANNOTATIONS.state`). */
function strings(value: unknown, path: string): [string, string][] {
  if (typeof value === 'string') return [[path, value]];
  if (typeof value === 'object' && value !== null)
    return Object.entries(value).flatMap(([k, v]) => strings(v, `${path}.${k}`));
  return [];
}

/** Every value of the contract: the strings of keys.ts and host-paths.ts and the forms of the names they make. */
function contractValues(): [string, string][] {
  const values: [string, string][] = [];
  for (const [name, value] of Object.entries({ ...keys, ...hostPaths })) {
    if (typeof value !== 'function') {
      values.push(...strings(value, name));
      continue;
    }
    const form = NAME_FORMS[name];
    assert.ok(
      form !== undefined || READERS.has(name),
      `${name} is a new function of api/src: add its placeholder form to NAME_FORMS (or READERS) in keys.test.ts, and the form to docs/architecture.md`,
    );
    if (form) values.push([`${name}()`, form()]);
  }
  return values;
}

const doc = readFileSync(ARCHITECTURE, 'utf8');
/** Every `code span` of the doc. */
const spans = new Set([...doc.matchAll(/`([^`\n]+)`/g)].map((m) => m[1] as string));

/** First cells of the table rows under "## The contract", up to the next level-2 heading. */
function contractRows(): string[] {
  const start = doc.indexOf('\n## The contract\n');
  assert.ok(start >= 0, 'docs/architecture.md has a "## The contract" section');
  const end = doc.indexOf('\n## ', start + 1);
  const section = doc.slice(start, end < 0 ? undefined : end);
  return section
    .split('\n')
    .filter((line) => line.startsWith('| `'))
    .map((line) => /^\| `([^`]+)` \|/.exec(line)?.[1] ?? `unparsable row: ${line}`);
}

describe('the contract in docs/architecture.md', () => {
  it('when a key of api/src/keys.ts or host-paths.ts has no row in The contract of docs/architecture.md, it should fail and name it', () => {
    const rows = new Set(contractRows());
    const missing = contractValues()
      .filter(([where, value]) => (VALUES.has(where) ? !spans.has(value) : !rows.has(value)))
      .map(([where, value]) => `${where} (\`${value}\`)`);
    assert.deepEqual(
      missing,
      [],
      'each needs a row of The contract saying who writes and who reads it (values of a key: a `code span` in its row)',
    );
  });

  it('when a row of The contract names a key api/src does not have, it should fail and name it', () => {
    const known = new Set(contractValues().map(([, value]) => value));
    const unknown = contractRows().filter((cell) => !known.has(cell));
    assert.deepEqual(unknown, [], 'rows of The contract must name keys of api/src/keys.ts or host-paths.ts');
  });
});
