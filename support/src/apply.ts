/**
 * Server-side apply with one fixed field manager per component: the only way Kindling writes objects it
 * co-owns, so a key removed from Kindling's desired object is removed from the live one and keys other
 * managers wrote are left alone.
 */
import * as k8s from '#k8s';
import { API_REQUEST_TIMEOUT_MS, ApiKubeConfig, makeApiClient } from './kubeconfig.js';

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

/**
 * Server-side apply as the wire has it: the desired object sent as JSON, the answer parsed as JSON. client-node's
 * own patch goes through its model both ways (serialize, then deserialize every field of the answer into model
 * classes and Dates): a thousand pools' applies spent more CPU there than in anything else of the controller.
 * The path is client-node's (its discovery of the kind's resource, cached), and so are the request's
 * authentication, connections and deadline.
 */
class WireApplyApi extends k8s.KubernetesObjectApi {
  static make(kc: k8s.KubeConfig, timeoutMs: number): WireApplyApi {
    const api = makeApiClient(kc, WireApplyApi, timeoutMs);
    api.setDefaultNamespace(kc);
    return api;
  }

  async send<T extends k8s.KubernetesObject>(desired: T, query: Record<string, string>, status: boolean): Promise<T> {
    const path = await this.specUriPath(desired, 'patch');
    const request = this.configuration.baseServer.makeRequestContext(
      status ? `${path}/status` : path,
      k8s.HttpMethod.PATCH,
    );
    request.setHeaderParam('Accept', 'application/json');
    request.setHeaderParam('Content-Type', k8s.PatchStrategy.ServerSideApply);
    for (const [key, value] of Object.entries(query)) request.setQueryParam(key, value);
    request.setBody(JSON.stringify(desired));
    return this.requestPromise<T>(request);
  }

  /** The answer as JSON; an error answer as client-node raises it (an ApiException with the Status as body). */
  protected override async processResponse<T extends k8s.KubernetesObject>(response: k8s.ResponseContext): Promise<T> {
    if (response.httpStatusCode < 200 || response.httpStatusCode > 299)
      throw new k8s.ApiException(
        response.httpStatusCode,
        'Unsuccessful HTTP Request',
        await response.getBodyAsAny(),
        response.headers,
      );
    return JSON.parse(await response.body.text()) as T;
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
  return {
    fieldManager,
    apply: (desired, opts = {}) => api.send(desired, opts.dryRun ? { ...query, dryRun: 'All' } : query, false),
    applyStatus: (desired) => api.send(desired, query, true),
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
