/** The controller's one write path for children and Secrets: server-side apply, only when the live object differs. */
import type * as k8s from '#k8s';
import { FIELD_MANAGERS } from '../../api/src/keys.js';
import { isUpToDate } from './diff.js';
import type { OverlayCache, Writer } from './store.js';

/** List items come without apiVersion/kind; writes need them. */
export function withKind<T extends k8s.KubernetesObject>(obj: T, apiVersion: string, kind: string): T {
  return { ...obj, apiVersion, kind };
}

/** Applies when the live object differs from the desired one; returns what is live afterwards. */
export async function applyIfNeeded<T extends k8s.KubernetesObject>(
  deps: { writer: Writer },
  live: T | undefined,
  desired: T,
  cache: OverlayCache<T>,
): Promise<T> {
  if (live && isUpToDate(live, desired, FIELD_MANAGERS.nodepoolController)) return live;
  return deps.writer.apply(desired, cache);
}
