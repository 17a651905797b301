/**
 * Requests to an apiserver as the wire has them, JSON in and JSON out, sent with undici's own request API on the
 * connection pool the kubeconfig gives (kubeconfig.ts). client-node's path builds a WHATWG Request, Response,
 * Headers and web streams for every request, behind its middleware's chains of promises, and its Watch reads
 * events through web streams and readline. Measured against the test bed's apiserver, a server-side apply of a
 * Secret cost the client 1.3 to 2.0 ms of CPU that way and about 0.9 ms this way (docs/benchmarks.md, the
 * controller row). Authentication, the request gate and the pool stay the kubeconfig's, as for any call.
 */
import * as k8s from '#k8s';
import { ApiKubeConfig, RequestTimeoutError, type Dispatcher } from './kubeconfig.js';

/** The kubeconfig's credentials and connection pool on `request` (and the request gate, for an ApiKubeConfig). */
async function prepared(kc: k8s.KubeConfig, request: k8s.RequestContext): Promise<Dispatcher> {
  await (kc instanceof ApiKubeConfig ? kc.authenticate(request) : kc.applySecurityAuthentication(request));
  const dispatcher = request.getDispatcher();
  // No TLS options at all (plain HTTP without a CA): client-node then leaves it to fetch's global pool.
  if (dispatcher === undefined)
    throw new Error(`no connection pool for ${request.getUrl()}: the kubeconfig has no TLS`);
  return dispatcher;
}

type Answer = Awaited<ReturnType<Dispatcher['request']>>;

/** Sends `request` on `dispatcher`; resolves with the answer's head, its body still to read. */
function send(dispatcher: Dispatcher, request: k8s.RequestContext, signal: AbortSignal): Promise<Answer> {
  const url = new URL(request.getUrl());
  const body = request.getBody();
  return dispatcher.request({
    origin: url.origin,
    path: `${url.pathname}${url.search}`,
    method: request.getHttpMethod(),
    headers: request.getHeaders(),
    body: typeof body === 'string' ? body : undefined,
    signal,
  });
}

/** An error answer as client-node fails it: an ApiException with the Status as its body. */
async function refusal(answer: Answer): Promise<k8s.ApiException<unknown>> {
  const text = await answer.body.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text) as unknown;
  } catch {
    // Not JSON (a proxy's page): the text as it is.
  }
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(answer.headers))
    if (v !== undefined) headers[k] = Array.isArray(v) ? v.join(', ') : v;
  return new k8s.ApiException(answer.statusCode, 'Unsuccessful HTTP Request', body, headers);
}

/** undici fails an aborted request with an error of its own; the signal's reason says why (a deadline, a stop). */
const why = (err: unknown, signal: AbortSignal): unknown =>
  signal.aborted && !(err instanceof k8s.ApiException) ? signal.reason : err;

/**
 * Sends `request` and reads the answer as JSON, within `timeoutMs` (and until `stop`), the deadline's timer
 * cleared once the answer is in.
 */
export async function sendJson<T>(
  kc: k8s.KubeConfig,
  request: k8s.RequestContext,
  timeoutMs: number,
  stop?: AbortSignal,
): Promise<T> {
  const dispatcher = await prepared(kc, request);
  const deadline = new AbortController();
  const timer = setTimeout(
    () => deadline.abort(new RequestTimeoutError(`no answer from the apiserver within ${timeoutMs} ms`)),
    timeoutMs,
  );
  const signal = stop ? AbortSignal.any([stop, deadline.signal]) : deadline.signal;
  try {
    const answer = await send(dispatcher, request, signal);
    if (answer.statusCode < 200 || answer.statusCode > 299) throw await refusal(answer);
    return JSON.parse(await answer.body.text()) as T;
  } catch (err) {
    throw why(err, signal) as Error;
  } finally {
    clearTimeout(timer);
  }
}

/** Longer than any object etcd stores (1.5 MiB) as one event, many times over: a line past it is not an event. */
const MAX_EVENT_CHARS = 64 * 1024 * 1024;

export interface WatchEvents {
  /** The watch's URL: the apiserver's, the path and the query (`watch=true` among it). */
  url: string;
  /** Ends the watch: the promise resolves, and no event is delivered after. */
  signal: AbortSignal;
  /** A connect, or a connected watch, silent this long fails with a TimeoutError. */
  silenceMs: number;
  onConnected: () => void;
  onEvent: (type: string, object: unknown) => void;
}

/**
 * A watch request, its events read line by line as they come: resolves when the apiserver ends it or `signal`
 * aborts it; fails on an error answer (an ApiException), a broken connection, a line that is not JSON, or silence.
 */
export async function watchEvents(kc: k8s.KubeConfig, w: WatchEvents): Promise<void> {
  const request = new k8s.RequestContext(w.url, k8s.HttpMethod.GET);
  request.setHeaderParam('Accept', 'application/json');
  const dispatcher = await prepared(kc, request);
  const silence = new AbortController();
  const timer = setTimeout(
    () => silence.abort(new RequestTimeoutError(`the watch was silent for ${w.silenceMs} ms`)),
    w.silenceMs,
  );
  const signal = AbortSignal.any([w.signal, silence.signal]);
  try {
    const answer = await send(dispatcher, request, signal);
    if (answer.statusCode !== 200) throw await refusal(answer);
    w.onConnected();
    answer.body.setEncoding('utf8');
    let rest = '';
    for await (const chunk of answer.body as AsyncIterable<string>) {
      timer.refresh();
      rest = eachLine(rest + chunk, (line) => {
        if (w.signal.aborted) return;
        const event = JSON.parse(line) as { type: string; object: unknown };
        w.onEvent(event.type, event.object);
      });
      if (rest.length > MAX_EVENT_CHARS) throw new Error(`a watch event of more than ${MAX_EVENT_CHARS} characters`);
    }
  } catch (err) {
    if (w.signal.aborted) return;
    throw why(err, signal) as Error;
  } finally {
    clearTimeout(timer);
  }
}

/** Calls `onLine` with each non-blank line `text` ends; returns what is left after the last newline. */
function eachLine(text: string, onLine: (line: string) => void): string {
  let start = 0;
  for (let end = text.indexOf('\n'); end >= 0; end = text.indexOf('\n', start)) {
    const line = text.slice(start, end);
    start = end + 1;
    if (line.trim() !== '') onLine(line);
  }
  return text.slice(start);
}
