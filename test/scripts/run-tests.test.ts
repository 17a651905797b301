import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const RUN_TESTS = fileURLToPath(new URL('../../../scripts/run-tests.js', import.meta.url));

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** `node scripts/run-tests.js <only>` in a project folder of the test's own, as `npm test` runs it. */
function runTests(cwd: string, only: string[]): Promise<Run> {
  // The runner marks its children; a runner started from one would report to it instead of printing.
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => k !== 'NODE_TEST_CONTEXT'));
  return new Promise((resolve) => {
    execFile(process.execPath, [RUN_TESTS, ...only], { cwd, env }, (err, stdout, stderr) => {
      resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr });
    });
  });
}

/** A compiled test at dist/<path>.js, and its .ts source unless `sourceGone`. */
async function compiledTest(root: string, path: string, body: string, sourceGone = false): Promise<string> {
  const js = join(root, 'dist', `${path}.js`);
  await mkdir(dirname(js), { recursive: true });
  await writeFile(js, `import { it } from 'node:test';\n${body}\n`);
  await writeFile(`${js}.map`, '{}');
  if (!sourceGone) {
    await mkdir(dirname(join(root, path)), { recursive: true });
    await writeFile(join(root, `${path}.ts`), '// the source\n');
  }
  return js;
}

describe('scripts/run-tests.js', () => {
  let root: string;
  before(async () => (root = await mkdtemp(join(tmpdir(), 'run-tests-'))));
  after(() => rm(root, { recursive: true, force: true }));

  it('when a compiled test has lost its .ts source, it should delete it and its map, run the others, and pass', async () => {
    const kept = await compiledTest(root, 'a/kept.test', "it('passes', () => {});");
    const stale = await compiledTest(
      root,
      'a/removed.test',
      "it('would fail', () => { throw new Error('stale test ran'); });",
      true,
    );
    const run = await runTests(root, ['a/']);
    assert.equal(run.code, 0, run.stdout + run.stderr);
    assert.equal(existsSync(stale), false);
    assert.equal(existsSync(`${stale}.map`), false);
    assert.equal(existsSync(kept), true);
    assert.match(run.stderr, /removed dist\/a\/removed\.test\.js: its source a\/removed\.test\.ts is gone/);
    assert.ok(!run.stdout.includes('stale test ran'));
    assert.match(run.stdout, /^# pass 1$/m, 'the runner output goes through');
  });

  it('when a test is skipped, it should fail the run and name the test, the runner output still shown', async () => {
    await compiledTest(root, 'b/skip.test', "it('runs', () => {});\nit.skip('is skipped', () => {});");
    const run = await runTests(root, ['b/skip']);
    assert.equal(run.code, 1);
    assert.match(run.stdout, /^# pass 1$/m);
    assert.match(run.stdout, /^# skipped 1$/m);
    assert.match(run.stderr, /skipped: is skipped — dist\/b\/skip\.test\.js/);
  });

  it('when a test is todo, passing or failing, it should fail the run and name each', async () => {
    await compiledTest(
      root,
      'c/todo.test',
      "it('runs', () => {});\nit.todo('not written');\nit('half done', { todo: 'waits on the API' }, () => { throw new Error('no'); });",
    );
    const run = await runTests(root, ['c/todo']);
    assert.equal(run.code, 1);
    assert.match(run.stdout, /^# todo 2$/m);
    assert.match(run.stderr, /todo: not written/);
    assert.match(run.stderr, /todo: half done \(waits on the API\)/);
  });

  it('when a test fails, it should keep the runner exit code and name the test and its error after the output', async () => {
    await compiledTest(
      root,
      'd/fail.test',
      "import { describe } from 'node:test';\ndescribe('a suite', () => { it('passes', () => {}); it('fails', () => { throw new Error('expected\\nsecond line'); }); });",
    );
    const run = await runTests(root, ['d/fail']);
    assert.equal(run.code, 1);
    assert.match(run.stdout, /^# fail 1$/m);
    const summary = run.stdout.slice(run.stdout.lastIndexOf('# duration_ms'));
    assert.match(summary, /1 test\(s\) failed:\n {2}fails — dist\/d\/fail\.test\.js\n {4}expected\n {4}second line/);
    assert.doesNotMatch(summary, /a suite/, 'a suite failing only through its tests is not named again');
  });
});
