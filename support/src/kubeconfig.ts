/**
 * The KubeConfigs every apiserver client of Kindling is made from (management and guest clusters alike).
 *
 * client-node calls have no deadline of their own: a request to an apiserver that stopped answering (a paused
 * or partitioned peer, a connection dropped without a reset) waits forever, and so does whatever awaits it: a
 * reconcile, a shutdown, a leader's renewal. Every request made through an ApiKubeConfig is aborted after
 * API_REQUEST_TIMEOUT_MS; a caller that needs a shorter bound passes its own AbortSignal with `withSignal` (an
 * applier's writes take createApplier's `timeoutMs`).
 * Watches do not use this timeout: the informer's watch (wire.ts) has a timer of silence instead.
 *
 * A client that needs its own deadline (a guest apiserver's CSR approval, a host's kubelet) or a stop signal
 * that tears down its requests in flight gets it from makeApiClient, by the same middleware path
 * as `withSignal`: the per-client signal replaces the kubeconfig's default one.
 *
 * It is also the one place every request passes before it is sent, so it is where a replica whose leadership
 * lapsed stops talking to the apiserver at once (`setRequestGate`), even before its timers have run.
 *
 * And where connections are kept: client-node gives every request a connection pool (an undici Agent) of its
 * own, so each request paid a TCP and TLS handshake with a client certificate, and left an idle socket behind
 * for seconds. An ApiKubeConfig keeps one pool per TLS identity (CA, client certificate and key, server name,
 * proxy), so requests ride kept-alive connections; a certificate rewritten on disk gets a new pool on its first
 * request after, as client-node re-reads the files on every request.
 */
import { isDeepStrictEqual } from 'node:util';
import * as k8s from '#k8s';

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

export type Dispatcher = NonNullable<ReturnType<k8s.RequestContext['getDispatcher']>>;

/** client-node's own (private) maker of a request's connection pool, from the kubeconfig's TLS options. */
type MakeDispatcher = (cluster: k8s.Cluster | null, agentOptions: AgentOptions) => Dispatcher | undefined;
type AgentOptions = Parameters<k8s.KubeConfig['createDispatcherOptions']>[1];
type DispatcherOptions = ReturnType<k8s.KubeConfig['createDispatcherOptions']>;

export class ApiKubeConfig extends k8s.KubeConfig {
  readonly requestTimeoutMs: number;
  /** The connection pool requests share, and the TLS options (CA, client certificate and key, server name,
   * proxy) it was made from. */
  #pool: { options: DispatcherOptions; dispatcher: Dispatcher } | undefined;

  constructor(requestTimeoutMs = API_REQUEST_TIMEOUT_MS) {
    super();
    this.requestTimeoutMs = requestTimeoutMs;
    // client-node makes a new pool (an undici Agent) for every request from the options it has just read; the
    // shared one is handed out instead while those options stay the same. The method is private in
    // client-node's typings: a release without it must fail here, not open a connection per request again.
    const own = this as unknown as { createDispatcher?: MakeDispatcher };
    const make = own.createDispatcher?.bind(this);
    if (typeof make !== 'function')
      throw new Error("client-node's KubeConfig no longer has createDispatcher: share connections another way");
    own.createDispatcher = (cluster, agentOptions) => this.#sharedDispatcher(cluster, agentOptions, make);
  }

  override async applySecurityAuthentication(context: k8s.RequestContext): Promise<void> {
    await this.authenticate(context);
    // Per-call middleware (withSignal) runs after this and replaces the signal with its own.
    context.setSignal(timeoutSignal(this.requestTimeoutMs));
  }

  /** The gate, then the credentials and the connection pool on `context`; no deadline (wire.ts brings its own). */
  async authenticate(context: k8s.RequestContext): Promise<void> {
    const refused = gate?.();
    if (refused) throw refused;
    await super.applySecurityAuthentication(context);
  }

  /** The shared pool for the options client-node read for this request (files included, read on every request);
   * a new one when they changed (a certificate rewritten on disk). */
  #sharedDispatcher(
    cluster: k8s.Cluster | null,
    agentOptions: AgentOptions,
    make: MakeDispatcher,
  ): Dispatcher | undefined {
    // An https server of the system's trust, reached with a token, has no TLS option at all, and client-node
    // then leaves it to fetch's global pool (HTTP/2 offered, no pool for wire.ts to send on): it gets the shared
    // pool too, client-node's own calls as well, verifying the server against the system's CAs (always: unlike
    // fetch's pool, it does not read NODE_TLS_REJECT_UNAUTHORIZED).
    const tls =
      this.createDispatcherOptions(cluster, agentOptions).type === 'none'
        ? { ...agentOptions, rejectUnauthorized: true }
        : agentOptions;
    const options = this.createDispatcherOptions(cluster, tls);
    if (this.#pool !== undefined && isDeepStrictEqual(this.#pool.options, options)) return this.#pool.dispatcher;
    const fresh = make(cluster, tls);
    if (fresh === undefined) return undefined;
    // A request handed the old pool a moment ago may not have dispatched yet (a closed pool refuses it): it is
    // closed once any such request has had its whole deadline; close() lets those in flight finish.
    const old = this.#pool?.dispatcher;
    if (old) setTimeout(() => void old.close().catch(() => undefined), this.requestTimeoutMs).unref();
    this.#pool = { options, dispatcher: fresh.compose(http1Only) };
    return this.#pool.dispatcher;
  }
}

/**
 * The shared pool speaks HTTP/1.1 only. undici offers HTTP/2 by default and the apiserver accepts it, and then
 * every request and every watch of the process share one connection (undici opens at most 100 streams on it):
 * measured with a thousand pools, every watch and every request of the process stalled together for 25 to 30 s
 * at a time, three times in a run, each time until the 30 s request deadlines ended streams. Over HTTP/1.1 each
 * watch holds a kept-alive connection of its own and the requests share the others.
 */
const http1Only: Parameters<Dispatcher['compose']>[0] = (dispatch) => (opts, handler) =>
  dispatch({ ...opts, allowH2: false } as typeof opts, handler);

/** What a request that ran out of time fails with (fetch rejects with the abort reason). */
class RequestTimeoutError extends Error {
  override readonly name = 'TimeoutError';
}

/**
 * Like AbortSignal.timeout, but aborting with a plain Error: client-node rewrites the message of some errors it
 * passes on, which throws on a DOMException's read-only message and hides the timeout behind a TypeError.
 * `clear` stops the timer once the request is over (client-node's path has no hook for it: its timers run out).
 */
export function deadline(ms: number, why = `no answer from the apiserver within ${ms} ms`): Deadline {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(new RequestTimeoutError(why)), ms).unref();
  return { signal: controller.signal, clear: () => clearTimeout(timer), refresh: () => void timer.refresh() };
}

export interface Deadline {
  signal: AbortSignal;
  clear: () => void;
  /** Starts the time over (a watch's silence). */
  refresh: () => void;
}

const timeoutSignal = (ms: number): AbortSignal => deadline(ms).signal;

/**
 * The operator's own kubeconfig at `path`; empty: $KUBECONFIG, ~/.kube/config, or the in-cluster ServiceAccount.
 * Never a tenant's: a guest kubeconfig read from a Secret goes through guestKubeConfig (guest-kubeconfig-parse.ts).
 */
export function loadKubeConfig(path: string): ApiKubeConfig {
  const kc = new ApiKubeConfig();
  if (path === '') kc.loadFromDefault();
  else kc.loadFromFile(path);
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
export function makeApiClient<T>(
  kc: k8s.KubeConfig,
  type: new (config: k8s.Configuration) => T,
  timeoutMs = API_REQUEST_TIMEOUT_MS,
  stop?: AbortSignal,
): T {
  const cluster = kc.getCurrentCluster();
  if (!cluster) throw new Error('the kubeconfig has no current cluster');
  const signal = (): AbortSignal =>
    stop ? AbortSignal.any([stop, timeoutSignal(timeoutMs)]) : timeoutSignal(timeoutMs);
  const config = k8s.createConfiguration({
    baseServer: new k8s.ServerConfiguration(cluster.server, {}),
    authMethods: { default: kc },
    middleware: [signalMiddleware(signal)],
  });
  return new type(config);
}
