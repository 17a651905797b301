/**
 * A namespaced object's identity, as controller-runtime's NamespacedName: one type where two strings in some
 * order would compile either way round. A work queue's key is its string form, `namespace/name`.
 */
import type * as k8s from '#k8s';

export interface ObjectKey {
  readonly namespace: string;
  readonly name: string;
}

/** `namespace/name`: the key's string form (a work queue's key). */
export const keyString = (key: ObjectKey): string => `${key.namespace}/${key.name}`;

/** The key of a cluster-scoped object (a Node, a CertificateSigningRequest): it has no namespace. */
export const clusterScoped = (name: string): ObjectKey => ({ namespace: '', name });

/** The key of an object as the apiserver gave it. */
export const keyOf = (obj: k8s.KubernetesObject): ObjectKey => ({
  namespace: obj.metadata?.namespace ?? '',
  name: obj.metadata?.name ?? '',
});

/** A key back from its string form: the namespace is what comes before the first `/` (names may not hold one). */
export function parseKey(key: string): ObjectKey {
  const slash = key.indexOf('/');
  return slash < 0 ? { namespace: '', name: key } : { namespace: key.slice(0, slash), name: key.slice(slash + 1) };
}
