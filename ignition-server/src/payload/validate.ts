/**
 * Runs `ignition-validate` on a payload: the same parser and checks the Ignition client applies, so a payload
 * the server hands out is one a host will accept. Warnings (e.g. "Unused key") count as failures: an unused
 * key is a setting the host would silently not apply.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** Resolves to undefined when the payload is clean, else to the validator's report. The payload may come in chunks. */
export type Validator = (payload: Buffer | readonly Buffer[]) => Promise<string | undefined>;

export function createValidator(command = 'ignition-validate'): Validator {
  return async (payload) => {
    const dir = await mkdtemp(join(tmpdir(), 'ign-validate-'));
    try {
      await writeFile(join(dir, 'config.ign'), payload);
      const report = await new Promise<string>((resolve, reject) => {
        execFile(command, [join(dir, 'config.ign')], { timeout: 30_000 }, (err, stdout, stderr) => {
          const text = `${stdout}${stderr}`.trim();
          if (err && (err as NodeJS.ErrnoException).code === 'ENOENT')
            reject(new Error(`${command} is not installed`, { cause: err }));
          else resolve(err && text === '' ? `exit ${String(err.code)}` : text);
        });
      });
      return report === '' ? undefined : report;
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  };
}
