/**
 * Server-side apply with one fixed field manager per component: the only way Kindling writes objects it
 * co-owns, so a key removed from Kindling's desired object is removed from the live one and keys other
 * managers wrote are left alone.
 */
import * as k8s from '#k8s';
import { makeApiClient, makeObjectApi } from './kubeconfig.js';

interface ApplyOptions {
  /** Validate and admit without persisting (server-side dry run). */
  dryRun?: boolean;
}

export interface Applier {
  readonly fieldManager: string;
  apply<T extends k8s.KubernetesObject>(desired: T, opts?: ApplyOptions): Promise<T>;
  /** Applies to the status subresource (controllers own their object's status). */
  applyStatus<T extends k8s.KubernetesObject>(desired: T): Promise<T>;
}

/** `timeoutMs`: a deadline on every request (see makeObjectApi in kubeconfig.ts); none when absent, as before. */
export function createApplier(kc: k8s.KubeConfig, fieldManager: string, timeoutMs?: number): Applier {
  const objects = timeoutMs === undefined ? k8s.KubernetesObjectApi.makeApiClient(kc) : makeObjectApi(kc, timeoutMs);
  return {
    fieldManager,
    async apply<T extends k8s.KubernetesObject>(desired: T, opts: ApplyOptions = {}): Promise<T> {
      // force: Kindling is the authority for the fields it declares; conflicts with other managers on those
      // fields are resolved in its favour (server-side apply semantics for controllers).
      return objects.patch(
        toModel(desired),
        undefined,
        opts.dryRun ? 'All' : undefined,
        fieldManager,
        true,
        k8s.PatchStrategy.ServerSideApply,
      );
    },
    async applyStatus<T extends k8s.KubernetesObject>(desired: T): Promise<T> {
      const api =
        timeoutMs === undefined
          ? kc.makeApiClient(k8s.CustomObjectsApi)
          : makeApiClient(kc, k8s.CustomObjectsApi, timeoutMs);
      const [group, version] = (desired.apiVersion ?? '').split('/') as [string, string];
      const meta = desired.metadata ?? {};
      return (await api.patchNamespacedCustomObjectStatus(
        {
          group,
          version,
          namespace: meta.namespace ?? '',
          plural: pluralOf(desired.kind ?? ''),
          name: meta.name ?? '',
          body: desired,
          fieldManager,
          force: true,
        },
        k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.ServerSideApply),
      )) as T;
    },
  };
}

/**
 * client-node serializes a known kind through its model, whose attribute names differ from the wire names for
 * a few fields (`x-kubernetes-int-or-string` is `x_kubernetes_int_or_string`), and drops what it does not find.
 * A plain object from YAML therefore goes through the model first, so that every field survives the round trip.
 */
export function toModel<T extends k8s.KubernetesObject>(obj: T): T {
  const group = (obj.apiVersion ?? '').includes('/') ? (obj.apiVersion ?? '').split('/')[0] : '';
  // Custom resources have no model: client-node sends them as they are.
  if (group !== '' && !group?.endsWith('.k8s.io')) return obj;
  // loadYaml deserializes into the model of the object's kind; JSON is YAML.
  return k8s.loadYaml<T>(JSON.stringify(obj));
}

/** Plural of the kinds whose status Kindling applies (its own CRDs follow the lower-case + s rule). */
function pluralOf(kind: string): string {
  return `${kind.toLowerCase()}s`;
}
