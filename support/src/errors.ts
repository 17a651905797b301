/**
 * The three kinds of reconcile error. The queue decides what happens next from the kind alone:
 * - TerminalError: the spec is wrong; the caller records a condition and nothing retries until it changes.
 * - NotReadyError: something we wait on is not there yet; requeue quietly after a delay.
 * - anything else: transient; requeue with per-key exponential backoff.
 */
export class TerminalError extends Error {
  override readonly name = 'TerminalError';
  constructor(
    message: string,
    readonly reason: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

export class NotReadyError extends Error {
  override readonly name = 'NotReadyError';
  constructor(
    message: string,
    readonly retryAfterMs = 5_000,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/**
 * The apiserver refused to write an object (400 Bad Request, 403 Forbidden, 422 Invalid: admission, a webhook,
 * validation, RBAC). Not a spec error of the caller's own object, but one its owner must hear about: the
 * caller turns it into a condition carrying the apiserver's message, and retries with backoff, since a
 * webhook or a feature gate may change its mind without any spec change.
 */
export interface Refusal {
  kind: string;
  key: string;
  code: number;
  /** The apiserver's own message. */
  message: string;
}

export class RefusedError extends Error {
  override readonly name = 'RefusedError';
  constructor(
    readonly refusal: Refusal,
    options?: ErrorOptions,
  ) {
    super(`the apiserver refused ${refusal.kind} ${refusal.key} (${refusal.code}): ${refusal.message}`, options);
  }
}

const REFUSALS = new Set([400, 403, 422]);

/** The refusal an error stands for, when the apiserver answered 400, 403 or 422; undefined otherwise. */
export function asRefusal(err: unknown, kind: string, key: string): RefusedError | undefined {
  const code = statusCode(err);
  if (code === undefined || !REFUSALS.has(code)) return undefined;
  return new RefusedError({ kind, key, code, message: apiMessageOf(err) }, { cause: err });
}

/** The first RefusedError in an error's cause chain. */
export function findRefusal(err: unknown): RefusedError | undefined {
  for (let e: unknown = err; e instanceof Error; e = e.cause) if (e instanceof RefusedError) return e;
  return undefined;
}

/** The Status message of a client-node ApiException (its body is the apiserver's Status JSON). */
function apiMessageOf(err: unknown): string {
  const body = (err as { body?: unknown }).body;
  const text = typeof body === 'string' ? body : JSON.stringify(body ?? '');
  try {
    const status = JSON.parse(text) as { message?: unknown };
    if (typeof status.message === 'string') return status.message;
  } catch {
    // not JSON: fall through to the error's own message
  }
  return err instanceof Error ? err.message : String(err);
}

/** The `code` of the error and of each error down its cause chain (a plain object ends the chain). */
function* codesInCauseChain(err: unknown): Generator<unknown> {
  for (let e: unknown = err; e instanceof Error || isRecord(e); e = (e as { cause?: unknown }).cause) {
    yield (e as { code?: unknown }).code;
    if (!(e instanceof Error)) break;
  }
}

/** HTTP status of a client-node ApiException (or of an error it caused), if any. */
export function statusCode(err: unknown): number | undefined {
  for (const code of codesInCauseChain(err)) if (typeof code === 'number') return code;
  return undefined;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null;
}

/**
 * Whether a request surely never reached the server: the connection was refused or the name did not resolve
 * (anywhere in the cause chain). A reset or a timeout does not count: the server may have acted on it.
 */
export function neverReachedServer(err: unknown): boolean {
  for (const code of codesInCauseChain(err)) if (code === 'ECONNREFUSED' || code === 'ENOTFOUND') return true;
  return false;
}

export const isNotFound = (err: unknown): boolean => statusCode(err) === 404;
export const isConflict = (err: unknown): boolean => statusCode(err) === 409;
export const isAlreadyExists = (err: unknown): boolean => statusCode(err) === 409;
