/**
 * The no-token-in-logs check of the end-to-end suite: every file under a logs folder (each component's log,
 * the agents' logs below it), line by line, against the token values the run saw and against anything
 * shaped like a JWT. A finding names the file, the line and what kind of secret, never the secret itself.
 */
import { readdir, readFile } from 'node:fs/promises';
import { join, relative } from 'node:path';

/** A JWT: three base64url parts (the signature may be empty), the header and the claims both JSON objects (so both start with eyJ). */
const JWT_SHAPE = /eyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*/;
/** Shorter values would match by chance; every token the run mints is far longer. */
const MIN_SECRET_LENGTH = 12;

export interface LogFinding {
  /** Relative to the scanned folder. */
  file: string;
  line: number;
  what: 'a token value of the run' | 'a JWT-shaped string';
}

export interface LogScan {
  /** Every file scanned, relative to the folder, sorted. */
  files: string[];
  findings: LogFinding[];
}

async function filesUnder(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { withFileTypes: true });
  const nested = await Promise.all(
    entries.map((e) =>
      e.isDirectory() ? filesUnder(join(dir, e.name)) : Promise.resolve(e.isFile() ? [join(dir, e.name)] : []),
    ),
  );
  return nested.flat();
}

function findingsIn(text: string, file: string, secrets: string[]): LogFinding[] {
  return text.split('\n').flatMap((line, i): LogFinding[] => {
    if (secrets.some((s) => line.includes(s))) return [{ file, line: i + 1, what: 'a token value of the run' }];
    return JWT_SHAPE.test(line) ? [{ file, line: i + 1, what: 'a JWT-shaped string' }] : [];
  });
}

/** Scans every file under `dir` for any of `secrets` and for JWT-shaped strings. */
export async function scanLogs(dir: string, secrets: Iterable<string>): Promise<LogScan> {
  const wanted = [...new Set(secrets)].filter((s) => s.length >= MIN_SECRET_LENGTH);
  const paths = (await filesUnder(dir)).sort();
  const findings = await Promise.all(
    paths.map(async (p) => findingsIn(await readFile(p, 'utf8'), relative(dir, p), wanted)),
  );
  return { files: paths.map((p) => relative(dir, p)), findings: findings.flat() };
}

/** One line per finding, for an assertion message. */
export function describeFindings(findings: LogFinding[]): string {
  return findings.map((f) => `${f.file}:${f.line}: ${f.what}`).join('\n');
}
