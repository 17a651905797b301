/**
 * "Is this apply needed?" A controller that applies on every reconcile writes for nothing; this compares the
 * desired object with the live one before applying: every field desired must already be there with its value,
 * and the field manager must own nothing the desired object no longer has (else the apply removes it).
 * Ownership is read from the live object's managedFields (the Apply entry of our manager).
 */
import type { KubernetesObject } from '#k8s';

type Json = Record<string, unknown>;

function isObject(v: unknown): v is Json {
  return typeof v === 'object' && v !== null && !Array.isArray(v) && !(v instanceof Date);
}

/** Every field of `desired` is in `live` with an equal value (lists: every desired item is in the live list). */
export function contains(live: unknown, desired: unknown): boolean {
  if (desired === undefined) return true;
  if (Array.isArray(desired)) {
    return Array.isArray(live) && desired.every((d) => live.some((l) => contains(l, d)));
  }
  if (isObject(desired)) {
    return isObject(live) && Object.entries(desired).every(([k, v]) => contains(live[k], v));
  }
  if (live instanceof Date && typeof desired === 'string') return live.getTime() === new Date(desired).getTime();
  return live === desired;
}

/** The fieldsV1 tree our manager owns through apply on the main resource (not a subresource). */
export function ownedFields(live: KubernetesObject, manager: string, subresource = ''): Json | undefined {
  const entry = (live.metadata?.managedFields ?? []).find(
    (m) => m.manager === manager && m.operation === 'Apply' && (m.subresource ?? '') === subresource,
  );
  return entry?.fieldsV1 as Json | undefined;
}

/** True when the owned tree holds a field, list item or set value the desired object no longer has. */
export function ownsMoreThan(owned: Json, desired: unknown): boolean {
  return Object.entries(owned).some(([key, sub]) => {
    if (key === '.' || key.startsWith('i:')) return false;
    const next = childOf(key, desired);
    if (next === missing) return true;
    return isObject(sub) && ownsMoreThan(sub, next);
  });
}

const missing = Symbol('missing');

function childOf(key: string, desired: unknown): unknown {
  if (key.startsWith('f:')) {
    const value = isObject(desired) ? desired[key.slice(2)] : undefined;
    return value === undefined ? missing : value;
  }
  if (key.startsWith('k:')) {
    const fields = JSON.parse(key.slice(2)) as Json;
    const item: unknown = Array.isArray(desired)
      ? (desired as unknown[]).find(
          (d) => isObject(d) && Object.entries(fields).every(([f, v]) => String(d[f]) === String(v)),
        )
      : undefined;
    return item === undefined ? missing : item;
  }
  if (key.startsWith('v:')) {
    const value: unknown = JSON.parse(key.slice(2));
    return Array.isArray(desired) && desired.some((d) => contains(d, value)) ? value : missing;
  }
  return undefined;
}

/** Whether applying `desired` would change nothing: skip the write. */
export function isUpToDate(live: KubernetesObject | undefined, desired: KubernetesObject, manager: string): boolean {
  if (!live) return false;
  const { apiVersion: _a, kind: _k, ...fields } = desired;
  if (!contains(live, fields)) return false;
  const owned = ownedFields(live, manager);
  return owned === undefined ? false : !ownsMoreThan(owned, desired);
}
