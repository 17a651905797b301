/**
 * Golden files: a test's output compared with a file in the repository. `UPDATE_GOLDEN=1` rewrites the file
 * from the output (review the diff); without it, a missing file fails the test. Text is compared as it is,
 * anything else as indented JSON.
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The repository (this file runs from dist/support/testing/). */
const ROOT = fileURLToPath(new URL('../../../', import.meta.url));

export type AssertGolden = (name: string, actual: unknown) => void;

/** The golden-file check for the files of `dir` (relative to the repository, e.g. 'cli/testdata'). */
export function goldenIn(dir: string): AssertGolden {
  return (name, actual) => {
    const path = join(ROOT, dir, name);
    const text = typeof actual === 'string' ? actual : `${JSON.stringify(actual, null, 2)}\n`;
    if (process.env['UPDATE_GOLDEN'] === '1') {
      writeFileSync(path, text);
      return;
    }
    if (!existsSync(path)) assert.fail(`golden file ${dir}/${name} is missing: run with UPDATE_GOLDEN=1 and review it`);
    assert.equal(text, readFileSync(path, 'utf8'), `output differs from ${dir}/${name}`);
  };
}
