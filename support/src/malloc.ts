/**
 * The glibc malloc settings Kindling's processes run with: the image sets them (Dockerfile `ENV`), and so does
 * every launch of the local environment, so what is measured is what is deployed.
 *
 * Why: by default glibc serves a block of 128 KiB or more with its own mapping only until the first such
 * block is freed, then raises that threshold (up to 32 MiB) and carves later ones from its heaps, where a
 * payload kept for hours pins the freed configs and responses around it. And each thread that allocates
 * gets an arena of its own. With 1,000 tokens over 100 payloads of 1 MiB (`npm run bench:ignition -- --only
 * memory`), the ignition server held 290 MiB with the defaults and 256 MiB with these.
 * A fixed threshold of 64 KiB returns every large block to the system when freed; two arenas bound the
 * per-thread ones. Read at process start only, so they cannot be set from inside.
 */
export const MALLOC_TUNABLES = 'glibc.malloc.mmap_threshold=65536:glibc.malloc.arena_max=2';

const NAMES = MALLOC_TUNABLES.split(':').map((t) => t.split('=')[0] as string);

/** `env` with Kindling's malloc settings added to its GLIBC_TUNABLES (settings of its own for other names kept). */
export function withMallocTunables(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const own = (env.GLIBC_TUNABLES ?? '').split(':').filter((t) => t !== '' && !NAMES.includes(t.split('=')[0] as string));
  return { ...env, GLIBC_TUNABLES: [...own, MALLOC_TUNABLES].join(':') };
}

/** The settings `env` lacks (its own values for them count as set: an operator may tune them). */
export function missingMallocTunables(env: NodeJS.ProcessEnv): string[] {
  const set = new Set((env.GLIBC_TUNABLES ?? '').split(':').map((t) => t.split('=')[0]));
  return NAMES.filter((n) => !set.has(n));
}
