/**
 * The config hash: the one fingerprint of what is on a node. It is computed from the release image reference
 * and the normalised config documents (SECRET_KEYS.config) and from nothing else, so a change to labels,
 * taints, timeouts, replicas or any management-side setting never rolls a node (HyperShift's #8698).
 */
import { parseAllDocuments } from 'yaml';
import { ConditionError } from './condition-error.js';
import type { HashInputs } from '../../api/src/config-hash.js';

// The hash itself is shared with the ignition server, which checks a token Secret's inputs against it.
export { configHash, type HashInputs } from '../../api/src/config-hash.js';

export type HashInput = keyof HashInputs;

/** The document kinds a config ConfigMap may hold (what the ignition server knows how to render). */
const CONFIG_KINDS: readonly string[] = ['MachineConfig', 'KubeletConfig'];

/** A config ConfigMap as far as the hash cares: its name and its data. */
export interface ConfigSource {
  name: string;
  data: Record<string, string>;
}

/** JSON with every object's keys sorted, so two equal documents always serialise the same way. */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(sortKeys(value));
}

function sortKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (value === null || typeof value !== 'object') return value;
  const entries = Object.entries(value as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return Object.fromEntries(entries.map(([k, v]) => [k, sortKeys(v)]));
}

interface ConfigDocument {
  kind: string;
  metadata: { name: string };
}

function parseDocuments(source: ConfigSource): ConfigDocument[] {
  const docs: ConfigDocument[] = [];
  for (const key of Object.keys(source.data).sort()) {
    for (const doc of parseAllDocuments(source.data[key] ?? '')) {
      const where = `ConfigMap ${source.name}, key ${key}`;
      if (doc.errors.length > 0) {
        throw new ConditionError(
          `${where}: not valid YAML: ${doc.errors[0]?.message ?? ''}`,
          'ValidMachineConfig',
          'InvalidConfig',
        );
      }
      const value: unknown = doc.toJS();
      if (value === null || value === undefined) continue;
      docs.push(checkDocument(value, where));
    }
  }
  return docs;
}

function checkDocument(value: unknown, where: string): ConfigDocument {
  const doc = value as Partial<ConfigDocument> | null;
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) {
    throw new ConditionError(
      `${where}: a document must be a MachineConfig or KubeletConfig object`,
      'ValidMachineConfig',
      'InvalidConfig',
    );
  }
  if (typeof doc.kind !== 'string' || !CONFIG_KINDS.includes(doc.kind)) {
    throw new ConditionError(
      `${where}: kind ${String(doc.kind)} is not one of ${CONFIG_KINDS.join(', ')}`,
      'ValidMachineConfig',
      'InvalidConfig',
    );
  }
  if (typeof doc.metadata?.name !== 'string' || doc.metadata.name === '') {
    throw new ConditionError(`${where}: a ${doc.kind} needs metadata.name`, 'ValidMachineConfig', 'InvalidConfig');
  }
  return doc as ConfigDocument;
}

/**
 * SECRET_KEYS.config from the pool's ConfigMaps: every YAML document of every data value, parsed, sorted by
 * kind then metadata.name (then content, so duplicates are stable), keys sorted, as one JSON array.
 * Throws ConditionError(ValidMachineConfig, InvalidConfig) for what cannot be parsed.
 */
export function normaliseConfig(sources: readonly ConfigSource[]): string {
  const docs = sources.flatMap(parseDocuments).map((d) => ({ doc: d, json: canonicalJson(d) }));
  docs.sort(
    (a, b) =>
      compare(a.doc.kind, b.doc.kind) || compare(a.doc.metadata.name, b.doc.metadata.name) || compare(a.json, b.json),
  );
  return `[${docs.map((d) => d.json).join(',')}]`;
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** Which inputs differ between two hashes' inputs (empty when equal). */
export function changedInputs(before: HashInputs, after: HashInputs): HashInput[] {
  const changed: HashInput[] = [];
  if (before.release !== after.release) changed.push('release');
  if (before.config !== after.config) changed.push('config');
  return changed;
}
