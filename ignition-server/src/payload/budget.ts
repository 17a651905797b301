/**
 * The byte budget of a payload's files (api/src/limits.ts), checked before anything is rendered: the files
 * of the release's fragments and of every MachineConfig, their data URLs decoded and, when gzip, inflated
 * in the thread pool only to count, summed. The ignition server itself only passes data URLs through, but
 * each host writes them out in full, and the in-place decision and the agent inflate them: a config past the
 * budget is refused here (ValidGeneratedPayload InvalidConfig, naming the MachineConfig and file), so no
 * host and no other component is ever handed it. The sum is taken before merging, so a file a later
 * MachineConfig replaces still counts: a bound, never an underestimate.
 */
import { InflateBudget, InflateLimitError, InvalidGzipError } from '../../../support/src/inflate.js';
import type { Release } from '../release/types.js';
import { isObject, type Json } from './merge.js';
import { InvalidConfigError } from './render.js';
import { dataUrlBytes, InvalidDataUrlError } from '../../../support/src/data-url.js';

interface Part {
  what: string;
  config: Json | undefined;
}

/** A name or path as written, whatever JSON the config put there. */
const text = (v: Json | undefined): string => (typeof v === 'string' ? v : JSON.stringify(v ?? null));

function parts(release: Release, docs: unknown): Part[] {
  const fragments = release.fragments.map((f) => ({
    what: `release fragment ${f.name}`,
    config: f.config as Json,
  }));
  const configs = (Array.isArray(docs) ? (docs as unknown[]) : []).filter(isObject).flatMap((doc) => {
    if (doc.kind !== 'MachineConfig') return [];
    const name = text(isObject(doc.metadata) ? doc.metadata.name : undefined);
    return [{ what: `MachineConfig ${name}`, config: isObject(doc.spec) ? doc.spec.config : undefined }];
  });
  return [...fragments, ...configs];
}

/** Every resource of a fragment's files: contents, then appends. */
function resources(config: Json | undefined): { path: string; source: string; gzip: boolean }[] {
  const storage = isObject(config) && isObject(config.storage) ? config.storage : {};
  const files = Array.isArray(storage.files) ? storage.files.filter(isObject) : [];
  return files.flatMap((f) =>
    [f.contents, ...(Array.isArray(f.append) ? f.append : [])].flatMap((r) =>
      isObject(r) && typeof r.source === 'string'
        ? [{ path: text(f.path), source: r.source, gzip: r.compression === 'gzip' }]
        : [],
    ),
  );
}

async function spend(budget: InflateBudget, what: string, res: ReturnType<typeof resources>[number]): Promise<void> {
  const bytes = dataUrlBytes(res.source);
  if (!bytes) return;
  const where = `${what} (storage.files[${res.path}])`;
  if (res.gzip) await budget.count(bytes, where);
  else budget.spend(bytes.length, where);
}

/** Throws InvalidConfigError once the files pass `maxBytes`, with the sizes and which file passed it. */
export async function checkConfigBytes(release: Release, docs: unknown, maxBytes: number): Promise<void> {
  const budget = new InflateBudget(maxBytes);
  try {
    for (const part of parts(release, docs))
      for (const res of resources(part.config)) await spend(budget, part.what, res);
  } catch (err) {
    if (err instanceof InflateLimitError)
      throw new InvalidConfigError(
        `${err.message}: the files of one payload, decoded and inflated, may take ${err.limit} bytes in all (the ignition server's --max-config-bytes)`,
        { cause: err },
      );
    if (err instanceof InvalidGzipError || err instanceof InvalidDataUrlError)
      throw new InvalidConfigError(err.message, { cause: err });
    throw err;
  }
}
