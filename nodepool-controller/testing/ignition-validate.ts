/** Runs the real `ignition-validate` (Debian package `ignition`) on a config: tests prove every stub is valid. */
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export async function ignitionValidate(config: string): Promise<{ ok: boolean; output: string }> {
  const dir = await mkdtemp(join(tmpdir(), 'kindling-stub-'));
  try {
    const file = join(dir, 'stub.ign');
    await writeFile(file, config);
    return await new Promise((resolve) => {
      execFile('ignition-validate', [file], (err, stdout, stderr) =>
        resolve({ ok: err === null, output: `${stdout}${stderr}` }),
      );
    });
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
