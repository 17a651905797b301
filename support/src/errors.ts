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

/** HTTP status of a client-node ApiException (or of an error it caused), if any. */
export function statusCode(err: unknown): number | undefined {
  for (let e: unknown = err; e instanceof Error || isRecord(e); e = (e as { cause?: unknown }).cause) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'number') return code;
    if (!(e instanceof Error)) break;
  }
  return undefined;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null;
}

export const isNotFound = (err: unknown): boolean => statusCode(err) === 404;
export const isConflict = (err: unknown): boolean => statusCode(err) === 409;
export const isAlreadyExists = (err: unknown): boolean => statusCode(err) === 409;
