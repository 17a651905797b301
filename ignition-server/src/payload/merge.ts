/**
 * Ignition 3.x config merging, as Ignition's own `config.merge` and the machine-config operator's render do
 * it: objects merge field by field (the later value wins), lists of named things (files by path, units by
 * name, users by name, …) merge entry by entry on their key, other lists are appended without duplicates. A
 * file's `contents` is replaced whole, so a later source never inherits an earlier source's hash.
 */

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
export type JsonObject = { [key: string]: Json };

/** Keyed lists: path (with `*` for list items) → the field naming an entry. */
const KEYS: Record<string, string> = {
  'storage.files': 'path',
  'storage.directories': 'path',
  'storage.links': 'path',
  'storage.disks': 'device',
  'storage.filesystems': 'device',
  'storage.raid': 'name',
  'storage.luks': 'name',
  'systemd.units': 'name',
  'systemd.units.*.dropins': 'name',
  'passwd.users': 'name',
  'passwd.groups': 'name',
  'ignition.config.merge': 'source',
  'ignition.security.tls.certificateAuthorities': 'source',
};

/** Replaced whole rather than merged. */
const ATOMIC = new Set(['storage.files.*.contents', 'ignition.config.replace']);

export const isObject = (v: unknown): v is JsonObject => typeof v === 'object' && v !== null && !Array.isArray(v);

function mergeList(path: string, base: Json[], over: Json[]): Json[] {
  const key = KEYS[path];
  if (key === undefined) {
    const seen = new Set(base.map((v) => JSON.stringify(v)));
    return [...base, ...over.filter((v) => !seen.has(JSON.stringify(v)))];
  }
  const out = [...base];
  for (const entry of over) {
    const id = isObject(entry) ? entry[key] : undefined;
    const at = id === undefined ? -1 : out.findIndex((e) => isObject(e) && e[key] === id);
    if (at >= 0) out[at] = mergeValue(`${path}.*`, out[at] ?? null, entry);
    else out.push(entry);
  }
  return out;
}

function mergeValue(path: string, base: Json, over: Json): Json {
  if (ATOMIC.has(path)) return over;
  if (Array.isArray(base) && Array.isArray(over)) return mergeList(path, base, over);
  if (isObject(base) && isObject(over)) return mergeObjects(base, over, path);
  return over;
}

export function mergeObjects(base: JsonObject, over: JsonObject, path = ''): JsonObject {
  const out: JsonObject = { ...base };
  for (const [k, v] of Object.entries(over)) {
    // Each fragment names its own spec version; the payload's is chosen when it is served.
    if (k === 'version' && path === 'ignition') continue;
    const childPath = path === '' ? k : `${path}.${k}`;
    out[k] = k in out ? mergeValue(childPath, out[k] ?? null, v) : v;
  }
  return out;
}
