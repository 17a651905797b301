/**
 * The KubeConfigs every apiserver client of Kindling is made from (management and guest clusters alike).
 *
 * client-node calls have no deadline of their own: a request to an apiserver that stopped answering (a paused
 * or partitioned peer, a connection dropped without a reset) waits forever, and so does whatever awaits it: a
 * reconcile, a shutdown, a leader's renewal. Every request made through an ApiKubeConfig is aborted after
 * API_REQUEST_TIMEOUT_MS; a caller that needs a shorter bound passes its own AbortSignal with `withSignal`.
 * Watches do not use this timeout (client-node's Watch keeps its own connect and inactivity timer; the
 * informer builds on that).
 *
 * A client that needs its own deadline (a guest apiserver's CSR approval, a host's kubelet) or a stop signal
 * that tears down its requests in flight gets it from makeApiClient/makeObjectApi, by the same middleware path
 * as `withSignal`: the per-client signal replaces the kubeconfig's default one.
 *
 * It is also the one place every request passes before it is sent, so it is where a replica whose leadership
 * lapsed stops talking to the apiserver at once (`setRequestGate`), even before its timers have run.
 */
import * as k8s from '@kubernetes/client-node';

/** Above the apiserver's own 60 s request timeout would be pointless; half of it leaves room for a retry. */
export const API_REQUEST_TIMEOUT_MS = 30_000;

/** Returns an error when this process must not send any request now, undefined when it may. */
export type RequestGate = () => Error | undefined;

let gate: RequestGate | undefined;

/**
 * Installs the process-wide gate every ApiKubeConfig checks before each request (and each watch). One per
 * process: the leader election of a component installs it (support/src/component.ts).
 */
export function setRequestGate(check: RequestGate | undefined): void {
  gate = check;
}

export class ApiKubeConfig extends k8s.KubeConfig {
  readonly requestTimeoutMs: number;

  constructor(requestTimeoutMs = API_REQUEST_TIMEOUT_MS) {
    super();
    this.requestTimeoutMs = requestTimeoutMs;
  }

  override async applySecurityAuthentication(context: k8s.RequestContext): Promise<void> {
    const refused = gate?.();
    if (refused) throw refused;
    await super.applySecurityAuthentication(context);
    // Per-call middleware (withSignal) runs after this and replaces the signal with its own.
    context.setSignal(timeoutSignal(this.requestTimeoutMs));
  }
}

/** What a request that ran out of time fails with (fetch rejects with the abort reason). */
export class RequestTimeoutError extends Error {
  override readonly name = 'TimeoutError';
}

/**
 * Like AbortSignal.timeout, but aborting with a plain Error: client-node rewrites the message of some errors it
 * passes on, which throws on a DOMException's read-only message and hides the timeout behind a TypeError.
 */
function timeoutSignal(ms: number): AbortSignal {
  const controller = new AbortController();
  setTimeout(() => controller.abort(new RequestTimeoutError(`no answer from the apiserver within ${ms} ms`)), ms).unref();
  return controller.signal;
}

/** The kubeconfig at `path`; empty: $KUBECONFIG, ~/.kube/config, or the in-cluster ServiceAccount. */
export function loadKubeConfig(path: string): ApiKubeConfig {
  const kc = new ApiKubeConfig();
  if (path === '') kc.loadFromDefault();
  else kc.loadFromFile(path);
  return kc;
}

/** A kubeconfig from its YAML text (a guest cluster's, read from its `<cluster>-kubeconfig` Secret). */
export function kubeConfigFromString(yaml: string): ApiKubeConfig {
  const kc = new ApiKubeConfig();
  kc.loadFromString(yaml);
  return kc;
}

/** A middleware giving each request the signal `signal()` makes (run after authentication, so it replaces the default). */
function signalMiddleware(signal: () => AbortSignal): k8s.ObservableMiddleware {
  return {
    pre: (request) => {
      request.setSignal(signal());
      return new k8s.Observable(Promise.resolve(request));
    },
    post: (response) => new k8s.Observable(Promise.resolve(response)),
  };
}

/** Options for one client-node call: abort it with `signal` rather than after the default timeout. */
export function withSignal(signal: AbortSignal): k8s.ConfigurationOptions {
  return { middleware: [signalMiddleware(() => signal)], middlewareMergeStrategy: 'append' };
}

/**
 * Like KubeConfig.makeApiClient, with a deadline of `timeoutMs` on every request the client makes; with `stop`,
 * aborting it also tears down the requests in flight (an owner that is going away need not wait for their
 * deadline). Works with any KubeConfig, an ApiKubeConfig or not.
 */
export function makeApiClient<T>(kc: k8s.KubeConfig, type: new (config: k8s.Configuration) => T, timeoutMs = API_REQUEST_TIMEOUT_MS, stop?: AbortSignal): T {
  const cluster = kc.getCurrentCluster();
  if (!cluster) throw new Error('the kubeconfig has no current cluster');
  const deadline = (): AbortSignal => (stop ? AbortSignal.any([stop, timeoutSignal(timeoutMs)]) : timeoutSignal(timeoutMs));
  const config = k8s.createConfiguration({
    baseServer: new k8s.ServerConfiguration(cluster.server, {}),
    authMethods: { default: kc },
    middleware: [signalMiddleware(deadline)],
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

export function makeObjectApi(kc: k8s.KubeConfig, timeoutMs = API_REQUEST_TIMEOUT_MS): k8s.KubernetesObjectApi {
  return TimedObjectApi.make(kc, timeoutMs);
}
