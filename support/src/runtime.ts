/**
 * Whether the Node.js that runs Kindling still gets security releases. Kindling holds the signing key and every
 * guest's admin credentials, so a runtime past its end of life must not go unnoticed: `npm start`, `npm test` and
 * every component say so in one line at start-up, three months ahead.
 */

/** The last day of security releases of each release line (the project's published schedule). */
const END_OF_LIFE: Readonly<Record<number, string>> = Object.freeze({
  18: '2025-04-30',
  19: '2023-06-01',
  20: '2026-04-30',
  21: '2024-06-01',
  22: '2027-04-30',
  23: '2025-06-01',
  24: '2028-04-30',
  25: '2026-06-01',
  26: '2029-04-30',
});

/** How long before its end of life a runtime is reported as ending. */
const WARN_BEFORE_DAYS = 91;
const DAY_MS = 86_400_000;

export type RuntimeSupport =
  | { state: 'supported'; endOfLife: string }
  | { state: 'ending'; endOfLife: string; days: number }
  | { state: 'ended'; endOfLife: string }
  | { state: 'unknown' };

/** Where `version` (as in process.version) stands on `now`'s date. */
export function runtimeSupport(version: string, now: Date): RuntimeSupport {
  const major = Number(/^v?(\d+)\./.exec(version)?.[1]);
  const endOfLife = END_OF_LIFE[major];
  if (endOfLife === undefined) return { state: 'unknown' };
  // The last day still has security support: the line ends at the close of it.
  const days = Math.ceil((Date.parse(`${endOfLife}T23:59:59.999Z`) - now.getTime()) / DAY_MS);
  if (days <= 0) return { state: 'ended', endOfLife };
  if (days <= WARN_BEFORE_DAYS) return { state: 'ending', endOfLife, days };
  return { state: 'supported', endOfLife };
}

/** The one-line warning for a runtime that is past or near its end of life; undefined when there is none. */
export function runtimeWarning(version: string, now: Date): string | undefined {
  const support = runtimeSupport(version, now);
  switch (support.state) {
    case 'ended':
      return `Node.js ${version} reached its end of life on ${support.endOfLife} and gets no security fixes: run Kindling on a supported LTS (package.json's engines)`;
    case 'ending':
      return `Node.js ${version} reaches its end of life on ${support.endOfLife} (in ${support.days} days): move Kindling to the next LTS before then`;
    default:
      return undefined;
  }
}
