import { readFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import type { KubernetesObject } from '#k8s';

/** Parses multi-document YAML into objects, skipping empty documents; a syntax error names the source. */
export function parseManifests(text: string, source = 'manifest'): KubernetesObject[] {
  return parseAllDocuments(text).flatMap((doc, i) => {
    if (doc.errors.length > 0)
      throw new Error(`${source}: document ${i + 1}: ${doc.errors[0]?.message ?? 'invalid YAML'}`);
    const value = doc.toJS() as KubernetesObject | null;
    return value === null ? [] : [value];
  });
}

/** Every object of the .yaml files of a folder (sorted by file name), or of one file. */
export async function loadManifests(path: string): Promise<KubernetesObject[]> {
  const files = path.endsWith('.yaml')
    ? [path]
    : (await readdir(path))
        .filter((f) => f.endsWith('.yaml'))
        .sort()
        .map((f) => join(path, f));
  const parsed = await Promise.all(files.map(async (f) => parseManifests(await readFile(f, 'utf8'), f)));
  return parsed.flat();
}
