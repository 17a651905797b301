/**
 * Runs `ignition-validate` on a payload: the same parser and checks the Ignition client applies, so a payload
 * the server hands out is one a host will accept. Warnings (e.g. "Unused key") count as failures: an unused
 * key is a setting the host would silently not apply.
 *
 * Only a validator that ran to its own exit has judged the payload. One that could not start, was killed at the
 * timeout or by a signal (the kernel's OOM killer) said nothing about it: that rejects, and the store serves the
 * payload unvalidated, since a report there fails, until a restart, every pool sharing the release and config.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** Resolves to undefined when the payload is clean, else to the validator's report. The payload may come in chunks. */
export type Validator = (payload: Buffer | readonly Buffer[]) => Promise<string | undefined>;

const VALIDATE_TIMEOUT_MS = 30_000;

export interface ValidatorOptions {
  /** How long one run may take before it is killed (and the payload served unvalidated). */
  timeoutMs?: number;
}

/** Why the validator said nothing about the payload. */
export type NotRunReason =
  /** The command is not there (ENOENT). */
  | 'NotInstalled'
  /** The process could not be made (EAGAIN, ENOMEM, EACCES…). */
  | 'SpawnFailed'
  /** Killed by us at the timeout. */
  | 'TimedOut'
  /** Killed by a signal we did not send (the OOM killer's SIGKILL). */
  | 'Signalled';

export type ValidatorOutcome =
  { verdict: 'clean' } | { verdict: 'report'; report: string } | { verdict: 'not-run'; reason: NotRunReason };

/** What execFile hands its callback: its error (null after exit 0) and the two outputs. */
export interface ValidatorRun {
  err: { code?: unknown; signal?: unknown; killed?: boolean } | null;
  stdout: string;
  stderr: string;
}

export class ValidatorNotRunError extends Error {
  override readonly name = 'ValidatorNotRunError';
  constructor(
    message: string,
    readonly reason: NotRunReason,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

function judgeNodeCode(code: string, text: string): ValidatorOutcome {
  if (code === 'ENOENT') return { verdict: 'not-run', reason: 'NotInstalled' };
  // Killed for writing more than execFile keeps: a report that long is a judgement all the same (a tenant's config
  // must not get past validation by making its report long).
  if (code === 'ERR_CHILD_PROCESS_STDIO_MAXBUFFER') return { verdict: 'report', report: text || 'no output' };
  return { verdict: 'not-run', reason: 'SpawnFailed' };
}

/** A run's verdict: an exit status of its own is a judgement of the payload, anything else is not. */
export function judgeRun({ err, stdout, stderr }: ValidatorRun): ValidatorOutcome {
  const text = `${stdout}${stderr}`.trim();
  // A string code is Node's, not the process's: the spawn failed or the output overflowed.
  if (err && typeof err.code === 'string') return judgeNodeCode(err.code, text);
  // Killed at the timeout, even if it caught the signal and exited with a status of its own.
  if (err?.killed === true) return { verdict: 'not-run', reason: 'TimedOut' };
  if (err && typeof err.code !== 'number') return { verdict: 'not-run', reason: 'Signalled' };
  if (text !== '') return { verdict: 'report', report: text };
  return err ? { verdict: 'report', report: `exit ${String(err.code)}` } : { verdict: 'clean' };
}

function notRunMessage(command: string, reason: NotRunReason, run: ValidatorRun, timeoutMs: number): string {
  switch (reason) {
    case 'NotInstalled':
      return `${command} is not installed`;
    case 'SpawnFailed':
      return `${command} could not be started (${String(run.err?.code)})`;
    case 'TimedOut':
      return `${command} did not finish within ${timeoutMs} ms, and was killed`;
    case 'Signalled':
      return `${command} was killed by ${String(run.err?.signal)}`;
  }
}

export function createValidator(command = 'ignition-validate', opts: ValidatorOptions = {}): Validator {
  const timeoutMs = opts.timeoutMs ?? VALIDATE_TIMEOUT_MS;
  return async (payload) => {
    const dir = await mkdtemp(join(tmpdir(), 'ign-validate-'));
    try {
      await writeFile(join(dir, 'config.ign'), payload);
      const run = await new Promise<ValidatorRun>((resolve) => {
        execFile(command, [join(dir, 'config.ign')], { timeout: timeoutMs }, (err, stdout, stderr) =>
          resolve({ err, stdout, stderr }),
        );
      });
      const outcome = judgeRun(run);
      if (outcome.verdict === 'not-run')
        throw new ValidatorNotRunError(notRunMessage(command, outcome.reason, run, timeoutMs), outcome.reason, {
          cause: run.err,
        });
      return outcome.verdict === 'report' ? outcome.report : undefined;
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  };
}
