/**
 * Every refusal of `/ignition`, by code. A host's console shows little more than a status, and one status
 * covers several causes (a 401 is a missing, forged, expired or revoked token); the code names the cause, so
 * an operator can look it up in docs/errors.md (a test keeps the two identical). Messages are fixed texts:
 * nothing from the request is ever echoed back.
 */
import { IGNITION_ERROR_HEADER } from '../../api/src/keys.js';

export interface ErrorSpec {
  status: number;
  message: string;
}

export const IGNITION_ERRORS = {
  IGN_TOKEN_MISSING: { status: 401, message: 'missing bearer token' },
  IGN_TOKEN_MALFORMED: { status: 401, message: 'malformed Authorization header' },
  IGN_TOKEN_INVALID: { status: 401, message: 'invalid or expired token' },
  IGN_TOKEN_REVOKED: { status: 401, message: 'token revoked or unknown' },
  IGN_POOL_MISMATCH: { status: 403, message: 'the NodePool header does not match the token' },
  IGN_HASH_MISMATCH: { status: 403, message: 'the TargetConfigVersionHash header does not match the token' },
  IGN_SPEC_UNACCEPTABLE: {
    status: 406,
    message: 'no acceptable Ignition spec version (this server serves 3.0.0 to 3.4.0)',
  },
  IGN_SPEC_TOO_OLD: { status: 406, message: 'the payload needs a newer Ignition spec version than the client accepts' },
  IGN_PAYLOAD_PENDING: { status: 511, message: 'payload not generated yet, retry later' },
  IGN_PAYLOAD_REGENERATING: { status: 511, message: 'payload gone from the cache, generating it again, retry later' },
  IGN_PAYLOAD_INVALID_CONFIG: {
    status: 511,
    message: 'payload generation failed (InvalidConfig), see the token Secret',
  },
  IGN_PAYLOAD_RELEASE_UNAVAILABLE: {
    status: 511,
    message: 'payload generation failed (ReleaseUnavailable), see the token Secret',
  },
  IGN_SERVER_BUSY: { status: 503, message: 'too many connections to this server, retry later' },
  IGN_BODY_TOO_LARGE: { status: 413, message: 'request body too large' },
  IGN_BAD_REQUEST: { status: 400, message: 'bad request' },
  IGN_NOT_FOUND: { status: 404, message: 'not found' },
  IGN_INTERNAL: { status: 500, message: 'internal error' },
} as const satisfies Record<string, ErrorSpec>;

export type IgnitionErrorCode = keyof typeof IGNITION_ERRORS;

/** Only 401s say how to authenticate. */
const CHALLENGE = { 'www-authenticate': 'Bearer realm="ignition"' };

/** An HTTP outcome other than 200: a code of the registry, and at most a detail the server itself chose. */
export class HttpError extends Error {
  override readonly name = 'HttpError';
  readonly status: number;

  constructor(
    readonly code: IgnitionErrorCode,
    /** Appended to the message; never request input (e.g. the spec version a payload needs). */
    readonly detail?: string,
  ) {
    const spec: ErrorSpec = IGNITION_ERRORS[code];
    super(detail === undefined ? spec.message : `${spec.message} (${detail})`);
    this.status = spec.status;
  }

  get headers(): Record<string, string> {
    return { [IGNITION_ERROR_HEADER.toLowerCase()]: this.code, ...(this.status === 401 ? CHALLENGE : {}) };
  }

  /** The response body: the code first, so it can be looked up from any client's log. */
  get body(): string {
    return `${this.code}: ${this.message}\n`;
  }
}
