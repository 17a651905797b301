/** Golden files for the pure desired-object functions: `UPDATE_GOLDEN=1` rewrites them from the output. */
import assert from 'node:assert/strict';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** The source testdata folder (tests run from dist/nodepool-controller/src/). */
export const TESTDATA_DIR = fileURLToPath(new URL('../../../nodepool-controller/src/testdata/', import.meta.url));

export function assertGolden(name: string, actual: unknown): void {
  const path = `${TESTDATA_DIR}${name}`;
  const text = `${JSON.stringify(actual, null, 2)}\n`;
  if (process.env['UPDATE_GOLDEN'] === '1' || !existsSync(path)) {
    if (process.env['UPDATE_GOLDEN'] !== '1') assert.fail(`golden file ${name} is missing: run with UPDATE_GOLDEN=1 and review it`);
    writeFileSync(path, text);
    return;
  }
  assert.equal(text, readFileSync(path, 'utf8'), `output differs from testdata/${name}`);
}
