import { readFileSync } from 'node:fs';

/** The version of package.json, read once (this module runs from dist/cli/src/). */
export const VERSION = (
  JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version: string }
).version;
