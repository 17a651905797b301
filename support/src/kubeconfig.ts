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

/** Options for one client-node call: abort it with `signal` rather than after the default timeout. */
export function withSignal(signal: AbortSignal): k8s.ConfigurationOptions {
  return {
    middleware: [
      {
        pre: (request) => {
          request.setSignal(signal);
          return new k8s.Observable(Promise.resolve(request));
        },
        post: (response) => new k8s.Observable(Promise.resolve(response)),
      },
    ],
    middlewareMergeStrategy: 'append',
  };
}
