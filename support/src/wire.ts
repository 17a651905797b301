/**
 * Requests to an apiserver as the wire has them, JSON in and JSON out, sent with undici's own request API on the
 * connection pool an ApiKubeConfig shares (kubeconfig.ts). client-node's path builds a WHATWG Request, Response,
 * Headers and web streams for every request, behind its middleware's chains of promises, and its Watch reads
 * events through web streams and readline. Measured against the test bed's apiserver, a server-side apply of a
 * Secret cost the client 1.3 to 2.0 ms of CPU that way and 0.8 to 1.2 ms this way (docs/development.md).
 * Authentication and the request gate stay the kubeconfig's, as for any call; a plain KubeConfig (the test bed's)
 * gets a pool of client-node's making per request, as on client-node's own path.
 *
 * What comes back is bounded: a guest apiserver is a tenant's, and can send anything.
 */
import * as k8s from '#k8s';
import { ApiKubeConfig, deadline, type Dispatcher } from './kubeconfig.js';

/** Far above any object's JSON (etcd stores 1.5 MiB; a request may carry 3 MiB): a larger answer is not one. */
const MAX_ANSWER_BYTES = 16 * 1024 * 1024;
/** What is kept of an error answer's body: its Status, or the start of a proxy's page. */
const MAX_REFUSAL_BYTES = 64 * 1024;
/** One watch event is one object (its JSON a few MiB at most): a longer line is not one. */
const MAX_EVENT_CHARS = 8 * 1024 * 1024;
/** What a non-JSON error body (a proxy's page) keeps: it goes into the error's message, and so into logs. */
const MAX_PAGE_CHARS = 4 * 1024;

/** Who is asking, in the apiservers' audit logs (fetch sent `node`). */
const USER_AGENT = 'kindling';

/** The kubeconfig's credentials and connection pool on `request` (and the request gate, for an ApiKubeConfig). */
async function prepared(kc: k8s.KubeConfig, request: k8s.RequestContext): Promise<Dispatcher> {
  await (kc instanceof ApiKubeConfig ? kc.authenticate(request) : kc.applySecurityAuthentication(request));
  request.setHeaderParam('User-Agent', USER_AGENT);
  const dispatcher = request.getDispatcher();
  // Only a plain KubeConfig without any TLS option gets none (an ApiKubeConfig always shares one).
  if (dispatcher === undefined) throw new Error(`no connection pool for ${request.getUrl()}: use an ApiKubeConfig`);
  return dispatcher;
}

type Answer = Awaited<ReturnType<Dispatcher['request']>>;

/** Sends `request` on `dispatcher`; resolves with the answer's head, its body still to read. */
function send(dispatcher: Dispatcher, request: k8s.RequestContext, signal: AbortSignal): Promise<Answer> {
  const url = new URL(request.getUrl());
  const body = request.getBody();
  if (body !== undefined && typeof body !== 'string') throw new Error('a request body on the wire is a string');
  return dispatcher.request({
    origin: url.origin,
    path: `${url.pathname}${url.search}`,
    method: request.getHttpMethod(),
    headers: request.getHeaders(),
    body,
    signal,
  });
}

/** The body as text, or an error once it passes `max` bytes (the rest is not read: the connection is dropped). */
async function text(answer: Answer, max: number, truncate = false): Promise<string> {
  const chunks: Buffer[] = [];
  let length = 0;
  for await (const chunk of answer.body as AsyncIterable<Buffer>) {
    length += chunk.length;
    if (length > max) {
      answer.body.destroy();
      if (truncate) break;
      throw new Error(`an answer of more than ${max} bytes from the apiserver`);
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** An error answer as client-node fails it: an ApiException with the Status as its body. */
async function refusal(answer: Answer): Promise<k8s.ApiException<unknown>> {
  const body = await text(answer, MAX_REFUSAL_BYTES, true);
  let status: unknown;
  try {
    status = JSON.parse(body) as unknown;
  } catch {
    // Not JSON (a proxy's page, or cut at the bound): its start.
    status = body.slice(0, MAX_PAGE_CHARS);
  }
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(answer.headers))
    if (v !== undefined) headers[k] = Array.isArray(v) ? v.join(', ') : v;
  return new k8s.ApiException(answer.statusCode, 'Unsuccessful HTTP Request', status, headers);
}

/** undici fails an aborted request with an error of its own; the signal's reason says why (a deadline, a stop). */
const why = (err: unknown, signal: AbortSignal): unknown =>
  signal.aborted && !(err instanceof k8s.ApiException) ? signal.reason : err;

/** Sends `request` and reads the answer as JSON within `timeoutMs`, the deadline's timer cleared once it is in. */
export async function sendJson<T>(kc: k8s.KubeConfig, request: k8s.RequestContext, timeoutMs: number): Promise<T> {
  const dispatcher = await prepared(kc, request);
  const time = deadline(timeoutMs);
  try {
    const answer = await send(dispatcher, request, time.signal);
    if (answer.statusCode < 200 || answer.statusCode > 299) throw await refusal(answer);
    return JSON.parse(await text(answer, MAX_ANSWER_BYTES)) as T;
  } catch (err) {
    throw why(err, time.signal) as Error;
  } finally {
    time.clear();
  }
}

export interface WatchEvents {
  /** The watch's URL: the apiserver's, the path and the query (`watch=true` among it). */
  url: string;
  /** Ends the watch: the promise resolves, and no event is delivered after. */
  signal: AbortSignal;
  /** A connect, or a connected watch, silent this long fails with a TimeoutError. */
  silenceMs: number;
  onConnected: () => void;
  /** An exception it throws ends the watch with that error (the informer then starts another). */
  onEvent: (type: string, object: unknown) => void;
}

/**
 * A watch request, its events read line by line as they come: resolves when the apiserver ends it or `signal`
 * aborts it; fails on an error answer (an ApiException), a broken connection, silence, a line that is not JSON
 * (client-node's Watch skipped those), a line past MAX_EVENT_CHARS, or an answer that ends inside an event.
 */
export async function watchEvents(kc: k8s.KubeConfig, w: WatchEvents): Promise<void> {
  const request = new k8s.RequestContext(w.url, k8s.HttpMethod.GET);
  request.setHeaderParam('Accept', 'application/json');
  const dispatcher = await prepared(kc, request);
  const silence = deadline(w.silenceMs, `the watch was silent for ${w.silenceMs} ms`);
  const signal = AbortSignal.any([w.signal, silence.signal]);
  let answer: Answer | undefined;
  try {
    answer = await send(dispatcher, request, signal);
    if (answer.statusCode !== 200) throw await refusal(answer);
    if (w.signal.aborted) return;
    w.onConnected();
    await readEvents(answer, w, silence.refresh);
  } catch (err) {
    if (w.signal.aborted) return;
    throw why(err, signal) as Error;
  } finally {
    silence.clear();
    answer?.body.destroy();
  }
}

/** `heard` starts the silence over at each whole line: a line trickled in without end does not keep a watch alive. */
async function readEvents(answer: Answer, w: WatchEvents, heard: () => void): Promise<void> {
  answer.body.setEncoding('utf8');
  const lines = new Lines(MAX_EVENT_CHARS);
  for await (const chunk of answer.body as AsyncIterable<string>) {
    lines.push(chunk, (line) => {
      heard();
      if (w.signal.aborted) return;
      const event = JSON.parse(line) as { type: string; object: unknown };
      w.onEvent(event.type, event.object);
    });
  }
  if (lines.pending) throw new Error('the watch ended inside an event');
}

/** What a pending piece costs beyond its characters (the string's header, its slot), counted against the bound. */
const PIECE_OVERHEAD = 64;

/**
 * Splits a stream of text into lines. Each chunk is scanned once and a line's pieces are joined once, when its
 * end comes: joining the pending text to each chunk and scanning it again made a long line cost the square of its
 * length, which a guest apiserver could have sent to stall the controllers. The bound counts each piece's overhead
 * too: a line sent a character at a time would otherwise hold many times its length.
 */
export class Lines {
  #pieces: string[] = [];
  #length = 0;

  constructor(readonly maxChars: number) {}

  /** Text is waiting for its line's end. */
  get pending(): boolean {
    return this.#pieces.some((p) => p.trim() !== '');
  }

  /** Calls `onLine` with each non-blank line `chunk` completes; keeps what follows the last newline. */
  push(chunk: string, onLine: (line: string) => void): void {
    let start = 0;
    for (let end = chunk.indexOf('\n'); end >= 0; end = chunk.indexOf('\n', start)) {
      const tail = chunk.slice(start, end);
      const line = this.#pieces.length === 0 ? tail : this.#pieces.join('') + tail;
      this.#pieces = [];
      this.#length = 0;
      start = end + 1;
      if (line.trim() !== '') onLine(line);
    }
    if (start === chunk.length) return;
    this.#pieces.push(chunk.slice(start));
    this.#length += chunk.length - start + PIECE_OVERHEAD;
    if (this.#length > this.maxChars) throw new Error(`a line of more than ${this.maxChars} characters`);
  }
}
