/** `kindling release build <folder> --output <dir|file.tar> [--push <ref>]`. */
import { readFile } from 'node:fs/promises';
import type { CommandIO } from '../../../support/src/command.js';
import { buildRelease, pushRelease, writeLayoutDir, writeLayoutTar } from './build.js';
import { parseReference } from './reference.js';
import { parsePullSecret, type RegistryOptions } from './registry.js';

export interface ReleaseCommandConfig {
  output: string;
  tag: string;
  push: string;
  pullSecretFile: string;
  registryCaFile: string;
}

async function push(cfg: ReleaseCommandConfig, image: Awaited<ReturnType<typeof buildRelease>>): Promise<string> {
  const ref = parseReference(cfg.push);
  if (ref.kind !== 'registry') throw new Error('--push needs a registry reference (host[:port]/repository[:tag])');
  const opts: RegistryOptions & { tag?: string } = { tag: ref.tag ?? cfg.tag };
  if (cfg.registryCaFile !== '') opts.ca = await readFile(cfg.registryCaFile, 'utf8');
  if (cfg.pullSecretFile !== '') opts.credentials = parsePullSecret(await readFile(cfg.pullSecretFile, 'utf8'));
  await pushRelease(image, ref.host, ref.repository, opts);
  return `${ref.host}/${ref.repository}@${image.digest}`;
}

/** Writes the layout (a tar when the output ends in .tar); returns the reference that reads it back. */
async function writeOutput(
  cfg: ReleaseCommandConfig,
  image: Awaited<ReturnType<typeof buildRelease>>,
): Promise<string> {
  if (cfg.output.endsWith('.tar')) {
    await writeLayoutTar(image, cfg.output);
    return `oci-archive:${cfg.output}:${cfg.tag}`;
  }
  await writeLayoutDir(image, cfg.output);
  return `oci:${cfg.output}:${cfg.tag}`;
}

export async function releaseCommandRun(cfg: ReleaseCommandConfig, io: CommandIO, args: string[]): Promise<number> {
  const [verb, folder] = args;
  if (verb !== 'build' || folder === undefined || args.length !== 2) {
    io.err('usage: kindling release build <folder> --output <layout dir|file.tar> [--push <registry ref>]\n');
    return 2;
  }
  if (cfg.output === '' && cfg.push === '') {
    io.err('kindling release build: give --output, --push, or both\n');
    return 2;
  }
  try {
    const image = await buildRelease(folder, cfg.tag);
    if (cfg.output !== '') io.out(`${await writeOutput(cfg, image)} ${image.digest}\n`);
    if (cfg.push !== '') io.out(`${await push(cfg, image)}\n`);
    return 0;
  } catch (err) {
    io.err(`kindling release build: ${(err as Error).message}\n`);
    return 1;
  }
}
