/**
 * The root pino logger of a process. Children carry the object key (`log.child({ nodePool: 'ns/name' })`).
 * Secrets never reach a log line: known paths are redacted, and any bearer token or JWT-shaped string in a
 * logged value is masked as a last line of defence.
 */
import { pino, type Logger, type LoggerOptions, type DestinationStream } from 'pino';

export type { Logger } from 'pino';

export const REDACTED = '[REDACTED]';

const REDACT_PATHS = [
  'token',
  'rotatedToken',
  'authorization',
  'password',
  'kubeconfig',
  '*.token',
  '*.rotatedToken',
  '*.authorization',
  '*.password',
  '*.kubeconfig',
  'req.headers.authorization',
  'req.headers.cookie',
  'headers.authorization',
  'data',
  'stringData',
  '*.data',
  '*.stringData',
];

const SECRET_PATTERNS: RegExp[] = [
  /\beyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*/g, // a JWT (header always starts with {" → eyJ)
  /(Bearer\s+)[A-Za-z0-9._~+/=-]+/gi,
];

/** Masks JWTs and bearer credentials inside a string. */
export function scrub(text: string): string {
  return SECRET_PATTERNS.reduce((s, re) => s.replace(re, (_m, bearer?: string) => `${typeof bearer === 'string' ? bearer : ''}${REDACTED}`), text);
}

function scrubDeep(value: unknown, depth = 0): unknown {
  if (typeof value === 'string') return scrub(value);
  if (depth > 6 || typeof value !== 'object' || value === null) return value;
  if (value instanceof Error) return { type: value.name, message: scrub(value.message), stack: scrub(value.stack ?? '') };
  if (Array.isArray(value)) return value.map((v) => scrubDeep(v, depth + 1));
  return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, scrubDeep(v, depth + 1)]));
}

export interface LoggerConfig {
  name: string;
  level?: string;
  destination?: DestinationStream;
}

export function createLogger(cfg: LoggerConfig): Logger {
  const options: LoggerOptions = {
    name: cfg.name,
    level: cfg.level ?? 'info',
    redact: { paths: REDACT_PATHS, censor: REDACTED },
    formatters: { log: (obj) => scrubDeep(obj) as Record<string, unknown> },
    hooks: {
      // Messages are scrubbed too: an error message may quote a header it received.
      logMethod(args, method) {
        method.apply(this, args.map((a) => (typeof a === 'string' ? scrub(a) : a)) as Parameters<typeof method>);
      },
    },
    timestamp: pino.stdTimeFunctions.isoTime,
  };
  return cfg.destination ? pino(options, cfg.destination) : pino(options);
}
