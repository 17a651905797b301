/**
 * The root pino logger of a process. Children carry the object key (`log.child({ nodePool: 'ns/name' })`).
 * Secrets never reach a log line. Every route into a line goes through one sanitizer: the logged object
 * (formatters.log), a child's bindings (child), interpolated arguments (logMethod) and the message itself
 * (the msg serializer). The sanitizer walks the whole value, at any depth: a key that names a credential
 * (a token, an authorization header, a password, a kubeconfig, Secret `data`/`stringData`) has its value
 * redacted, and every string has bearer credentials, JWTs and bootstrap tokens masked. An Error becomes
 * its type, message, stack, own fields and cause, all sanitized the same way.
 */
import {
  pino,
  type Bindings,
  type ChildLoggerOptions,
  type Logger,
  type LoggerOptions,
  type DestinationStream,
} from 'pino';

export type { Logger } from 'pino';

export const REDACTED = '[REDACTED]';

/** Keys (lower case, without `-` and `_`) whose values are credentials, whatever they hold. */
const SECRET_KEYS = new Set([
  'authorization',
  'proxyauthorization',
  'password',
  'cookie',
  'setcookie',
  'kubeconfig',
  'data',
  'stringdata',
  'privatekey',
]);

/** Any key ending in "token" (token, rotated-token, bearerToken…) holds one. */
function isSecretKey(key: string): boolean {
  const k = key.toLowerCase().replace(/[-_]/g, '');
  return k.endsWith('token') || SECRET_KEYS.has(k);
}

const SECRET_PATTERNS: [RegExp, string][] = [
  // A JWT: its header always starts with {" → eyJ.
  [/eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*/g, REDACTED],
  [/(Bearer(?:\s+|%20)+)[A-Za-z0-9._~+/=-]+/gi, `$1${REDACTED}`],
  // A bootstrap token `<id>.<secret>`: the id is public (it names the Secret), the secret half is not.
  [/(?<![A-Za-z0-9])([a-z0-9]{6})\.[a-z0-9]{16}(?![A-Za-z0-9])/g, `$1.${REDACTED}`],
];

/** Masks JWTs, bearer credentials and bootstrap tokens inside a string. */
export function scrub(text: string): string {
  return SECRET_PATTERNS.reduce((s, [re, by]) => s.replace(re, by), text);
}

/** Deeper than any object a component logs on purpose; past it the value is cut, never passed through raw. */
const MAX_DEPTH = 12;

interface Walk {
  /** The objects on the path from the root: a value seen again there is a cycle. */
  ancestors: WeakSet<object>;
  depth: number;
}

/** A copy of `value` fit for a log line: credentials redacted at any depth, Errors with their causes. */
export function sanitize(value: unknown): unknown {
  return clean(value, { ancestors: new WeakSet(), depth: 0 });
}

function clean(value: unknown, walk: Walk): unknown {
  if (typeof value === 'string') return scrub(value);
  if (typeof value !== 'object' || value === null) return value;
  if (walk.ancestors.has(value)) return '[Circular]';
  if (walk.depth >= MAX_DEPTH) return '[Truncated]';
  walk.ancestors.add(value);
  try {
    return cleanObject(value, { ancestors: walk.ancestors, depth: walk.depth + 1 });
  } finally {
    walk.ancestors.delete(value);
  }
}

function cleanObject(value: object, walk: Walk): unknown {
  if (ArrayBuffer.isView(value)) return `[${value.byteLength} bytes]`;
  if (Array.isArray(value)) return value.map((v: unknown) => clean(v, walk));
  if (value instanceof Error) return cleanEntries(errorFields(value), walk);
  const toJSON = (value as { toJSON?: unknown }).toJSON;
  // Dates, URLs and the like log as JSON.stringify would show them.
  if (typeof toJSON === 'function') return clean((toJSON as () => unknown).call(value), walk);
  return cleanEntries(Object.entries(value), walk);
}

function cleanEntries(entries: [string, unknown][], walk: Walk): Record<string, unknown> {
  return Object.fromEntries(
    entries.map(([k, v]) => [k, isSecretKey(k) && v !== undefined && v !== null ? REDACTED : clean(v, walk)]),
  );
}

/** An Error as pino's serializer shows it, plus what that one drops: the cause, kept as an Error of its own. */
function errorFields(err: Error): [string, unknown][] {
  const type = err.constructor.name && err.constructor.name !== 'Error' ? err.constructor.name : err.name;
  const own = Object.entries(err).filter(([k]) => k !== 'cause' && k !== 'name');
  const fields: [string, unknown][] = [['type', type], ['message', err.message], ['stack', err.stack], ...own];
  if (err instanceof AggregateError) fields.push(['errors', err.errors]);
  if ('cause' in err && err.cause !== undefined) fields.push(['cause', err.cause]);
  return fields;
}

type ChildMethod = (this: Logger, bindings: Bindings, options?: ChildLoggerOptions) => Logger;

export interface LoggerConfig {
  name: string;
  level?: string;
  destination?: DestinationStream;
  /**
   * Write each line to stdout before the call returns. Otherwise a line is written later by libuv's thread
   * pool, and a process that exits at once (a lost leadership) logged its last line first and the line that
   * said why after it, or, racing its exit, not at all.
   */
  sync?: boolean;
}

export function createLogger(cfg: LoggerConfig): Logger {
  const options: LoggerOptions = {
    name: cfg.name,
    level: cfg.level ?? 'info',
    formatters: { log: (obj) => sanitize(obj) as Record<string, unknown> },
    // The log object is sanitized already (err included); the message may be an Error's own message.
    serializers: { err: (err: unknown) => err, msg: (msg: unknown) => (typeof msg === 'string' ? scrub(msg) : msg) },
    hooks: {
      // Arguments interpolated into the message (`%o`, `%j`) are stringified before any formatter sees them.
      logMethod(args, method) {
        method.apply(
          this,
          args.map((a: unknown, i) => (i > 0 && typeof a === 'object' ? sanitize(a) : a)) as Parameters<typeof method>,
        );
      },
    },
    timestamp: pino.stdTimeFunctions.isoTime,
  };
  const destination = cfg.destination ?? (cfg.sync ? pino.destination({ dest: 1, sync: true }) : undefined);
  const log = destination ? pino(options, destination) : pino(options);
  // Child bindings skip formatters.log; children inherit this method, so grandchildren are covered too.
  // eslint-disable-next-line @typescript-eslint/unbound-method -- called below with the child's own `this`
  const child = log.child as unknown as ChildMethod;
  const sanitizingChild: ChildMethod = function (bindings, childOptions) {
    return child.call(this, sanitize(bindings) as Bindings, childOptions);
  };
  log.child = sanitizingChild as unknown as Logger['child'];
  return log;
}
