/**
 * client-node API clients whose every request has a deadline. client-node sets none: an apiserver (or a
 * load balancer in front of one) that accepts the connection and never answers holds the caller forever, and
 * with it a work-queue slot. A guest apiserver is a tenant's, so its being slow or gone is a normal event.
 * The deadline is an AbortSignal set by a middleware on each request, so a timed-out request is torn down,
 * not only abandoned.
 */
import * as k8s from '@kubernetes/client-node';

/** The default deadline of one request (list, get, write): generous for a loaded apiserver, short enough that a
 * hung one costs a retry rather than a stuck worker. */
export const DEFAULT_REQUEST_TIMEOUT_MS = 30_000;

/** A middleware giving each request its own AbortSignal that fires after `ms`, or when `stop` aborts. */
export function timeoutMiddleware(ms: number, stop?: AbortSignal): k8s.ObservableMiddleware {
  return {
    pre: (ctx) => {
      ctx.setSignal(stop ? AbortSignal.any([stop, AbortSignal.timeout(ms)]) : AbortSignal.timeout(ms));
      return new k8s.Observable(Promise.resolve(ctx));
    },
    post: (response) => new k8s.Observable(Promise.resolve(response)),
  };
}

/**
 * Like KubeConfig.makeApiClient, with a deadline on every request the client makes; with `stop`, aborting it
 * also tears down the requests in flight (an owner that is going away need not wait for their deadline).
 */
export function makeApiClient<T>(kc: k8s.KubeConfig, type: new (config: k8s.Configuration) => T, timeoutMs = DEFAULT_REQUEST_TIMEOUT_MS, stop?: AbortSignal): T {
  const cluster = kc.getCurrentCluster();
  if (!cluster) throw new Error('the kubeconfig has no current cluster');
  const config = k8s.createConfiguration({
    baseServer: new k8s.ServerConfiguration(cluster.server, {}),
    authMethods: { default: kc },
    middleware: [timeoutMiddleware(timeoutMs, stop)],
  });
  return new type(config);
}

/** KubernetesObjectApi with a deadline on every request (its per-call options cannot carry middleware). */
class TimedObjectApi extends k8s.KubernetesObjectApi {
  static make(kc: k8s.KubeConfig, timeoutMs: number): k8s.KubernetesObjectApi {
    const api = makeApiClient(kc, TimedObjectApi, timeoutMs);
    api.setDefaultNamespace(kc);
    return api;
  }
}

export function makeObjectApi(kc: k8s.KubeConfig, timeoutMs = DEFAULT_REQUEST_TIMEOUT_MS): k8s.KubernetesObjectApi {
  return TimedObjectApi.make(kc, timeoutMs);
}
