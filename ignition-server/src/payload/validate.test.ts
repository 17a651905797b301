import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createValidator, judgeRun, ValidatorNotRunError, type NotRunReason } from './validate.js';

const PAYLOAD = Buffer.from('{"ignition":{"version":"3.3.0"}}');

let dir: string;
before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'validate-test-'));
});
after(() => rm(dir, { recursive: true, force: true }));

/** A validator standing in for ignition-validate: a shell script run with the payload's path as $1. */
async function script(name: string, body: string, mode = 0o755): Promise<string> {
  const path = join(dir, name);
  await writeFile(path, `#!/bin/sh\n${body}\n`);
  await chmod(path, mode);
  return path;
}

async function notRun(promise: Promise<unknown>, reason: NotRunReason): Promise<void> {
  await assert.rejects(promise, (err: unknown) => {
    assert.ok(err instanceof ValidatorNotRunError, String(err));
    assert.equal(err.reason, reason, err.message);
    return true;
  });
}

describe('ignition validator', () => {
  it('when the validator exits 0 and says nothing, it should resolve to undefined', async () => {
    const validate = createValidator(await script('clean', 'test -s "$1"'));
    assert.equal(await validate(PAYLOAD), undefined);
  });

  it('when the validator exits 1 with a message, it should resolve to the message', async () => {
    const validate = createValidator(await script('report', 'echo "error at $.storage: Unused key files" >&2; exit 1'));
    assert.equal(await validate(PAYLOAD), 'error at $.storage: Unused key files');
  });

  it('when the validator exits 1 and says nothing, it should resolve to a report naming the exit status', async () => {
    const validate = createValidator(await script('silent-failure', 'exit 1'));
    assert.equal(await validate(PAYLOAD), 'exit 1');
  });

  it('when the validator runs past its timeout, it should reject (the payload was not judged)', async () => {
    // exec: the shell itself sleeps, so the kill reaches the process holding the output pipes.
    const validate = createValidator(await script('hangs', 'echo partial; exec sleep 30'), { timeoutMs: 200 });
    await notRun(validate(PAYLOAD), 'TimedOut');
  });

  it('when the validator is killed by a signal (the OOM killer), it should reject (the payload was not judged)', async () => {
    const validate = createValidator(await script('oom-killed', 'echo "some output"; kill -KILL $$'));
    await notRun(validate(PAYLOAD), 'Signalled');
  });

  it('when the validator cannot be started, it should reject (the payload was not judged)', async () => {
    const validate = createValidator(await script('not-executable', 'exit 0', 0o644));
    await notRun(validate(PAYLOAD), 'SpawnFailed');
  });

  it('when the validator is not installed, it should reject saying so', async () => {
    const validate = createValidator(join(dir, 'missing'));
    await notRun(validate(PAYLOAD), 'NotInstalled');
    await assert.rejects(validate(PAYLOAD), /missing is not installed/);
  });

  it('when the spawn fails for want of memory or processes, it should judge that the validator did not run', () => {
    const out = { stdout: '', stderr: '' };
    for (const code of ['EAGAIN', 'ENOMEM'])
      assert.deepEqual(judgeRun({ err: { code }, ...out }), { verdict: 'not-run', reason: 'SpawnFailed' });
  });

  it('when the report overflows what is kept of it, it should still judge the payload by the report', () => {
    assert.deepEqual(
      judgeRun({ err: { code: 'ERR_CHILD_PROCESS_STDIO_MAXBUFFER', killed: true }, stdout: 'warning', stderr: '' }),
      { verdict: 'report', report: 'warning' },
    );
  });

  it('when the process exits with a status of its own, it should judge its output a report, whatever the status', () => {
    assert.deepEqual(judgeRun({ err: null, stdout: 'warning: Unused key\n', stderr: '' }), {
      verdict: 'report',
      report: 'warning: Unused key',
    });
    assert.deepEqual(judgeRun({ err: { code: 2, signal: null, killed: false }, stdout: '', stderr: '' }), {
      verdict: 'report',
      report: 'exit 2',
    });
    assert.deepEqual(judgeRun({ err: null, stdout: '', stderr: ' \n' }), { verdict: 'clean' });
  });
});
