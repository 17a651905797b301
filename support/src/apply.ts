/**
 * Server-side apply with one fixed field manager per component: the only way Kindling writes objects it
 * co-owns, so a key removed from Kindling's desired object is removed from the live one and keys other
 * managers wrote are left alone.
 */
import * as k8s from '#k8s';
import { API_REQUEST_TIMEOUT_MS, ApiKubeConfig, makeApiClient } from './kubeconfig.js';
import { sendJson } from './wire.js';

interface ApplyOptions {
  /** Validate and admit without persisting (server-side dry run). */
  dryRun?: boolean;
}

export interface Applier {
  readonly fieldManager: string;
  apply<T extends k8s.KubernetesObject>(desired: T, opts?: ApplyOptions): Promise<T>;
  /** Applies to the status subresource (controllers own their object's status). */
  applyStatus<T extends k8s.KubernetesObject>(desired: T): Promise<T>;
  /**
   * A JSON merge patch of the object `target` names (its apiVersion, kind, name and namespace), under the same
   * field manager: for a write guarded by `metadata.resourceVersion`, which an apply does not take as a guard.
   */
  mergePatch<T extends k8s.KubernetesObject>(target: k8s.KubernetesObject, patch: object): Promise<T>;
}

/**
 * Server-side apply as the wire has it: the desired object sent as JSON, the answer parsed as JSON (sendJson).
 * client-node's own patch goes through its model both ways (serialize, then deserialize every field of the answer
 * into model classes and Dates): a thousand pools' applies spent more CPU there than in anything else of the
 * controller. The path is client-node's (its discovery of the kind's resource, cached), and so are the request's
 * authentication and connections.
 */
class WireApplyApi extends k8s.KubernetesObjectApi {
  #kc!: k8s.KubeConfig;
  #timeoutMs = API_REQUEST_TIMEOUT_MS;

  static make(kc: k8s.KubeConfig, timeoutMs: number): WireApplyApi {
    const api = makeApiClient(kc, WireApplyApi, timeoutMs);
    api.setDefaultNamespace(kc);
    api.#kc = kc;
    api.#timeoutMs = timeoutMs;
    return api;
  }

  /** A PATCH of `body` (of `strategy`) to the object `target` names, or to its status subresource. */
  async send<T extends k8s.KubernetesObject>(
    target: k8s.KubernetesObject,
    body: object,
    p: { query: Record<string, string>; strategy: k8s.PatchStrategy; status?: boolean },
  ): Promise<T> {
    const path = await this.specUriPath(target, 'patch');
    const request = this.configuration.baseServer.makeRequestContext(
      p.status ? `${path}/status` : path,
      k8s.HttpMethod.PATCH,
    );
    request.setHeaderParam('Accept', 'application/json');
    request.setHeaderParam('Content-Type', p.strategy);
    for (const [key, value] of Object.entries(p.query)) request.setQueryParam(key, value);
    request.setBody(JSON.stringify(body));
    return sendJson<T>(this.#kc, request, this.#timeoutMs);
  }
}

/** `timeoutMs`: a deadline on every request (see makeApiClient in kubeconfig.ts); when absent, the kubeconfig's own
 * (an ApiKubeConfig's requestTimeoutMs), else the default one. */
export function createApplier(kc: k8s.KubeConfig, fieldManager: string, timeoutMs?: number): Applier {
  const api = WireApplyApi.make(
    kc,
    timeoutMs ?? (kc instanceof ApiKubeConfig ? kc.requestTimeoutMs : API_REQUEST_TIMEOUT_MS),
  );
  // force: Kindling is the authority for the fields it declares; conflicts with other managers on those
  // fields are resolved in its favour (server-side apply semantics for controllers).
  const query = { fieldManager, force: 'true' };
  const strategy = k8s.PatchStrategy.ServerSideApply;
  return {
    fieldManager,
    apply: (desired, opts = {}) =>
      api.send(desired, desired, { query: opts.dryRun ? { ...query, dryRun: 'All' } : query, strategy }),
    applyStatus: (desired) => api.send(desired, desired, { query, strategy, status: true }),
    mergePatch: (target, patch) =>
      api.send(target, patch, { query: { fieldManager }, strategy: k8s.PatchStrategy.MergePatch }),
  };
}

/** The Secret `mergePatch` is to patch. */
export const secretRef = ({ namespace, name }: { namespace: string; name: string }): k8s.V1Secret => ({
  apiVersion: 'v1',
  kind: 'Secret',
  metadata: { namespace, name },
});

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
