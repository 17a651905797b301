/**
 * The allocator Kindling's processes run with: jemalloc, preloaded, returning freed memory to the system
 * after a second. The image sets it (Dockerfile `ENV`), and so does every launch of the local environment and
 * of the ignition server in tests, so what is measured is what is deployed.
 *
 * Why: glibc's malloc keeps what it frees in its heaps, where a payload kept for hours pins the freed configs,
 * responses and TLS buffers around it, and it raises its own threshold for giving large blocks their own
 * mapping after the first is freed. With 1,000 tokens over 100 payloads of 1 MiB (`npm run bench:ignition --
 * --only memory`), the ignition server held about 237 MiB with glibc (fixed thresholds and two arenas
 * included) and 216 MiB with jemalloc as set here. An allocator is chosen when the process starts, so it
 * cannot be set from inside: a process without it says so in a warning (`allocator`).
 */
import { existsSync, readFileSync } from 'node:fs';

/** The Debian package's library, found by the dynamic linker's own search (any architecture). */
export const JEMALLOC_LIBRARY = 'libjemalloc.so.2';
/** Two arenas (one per core of a small node), dirty pages purged after 1 s by jemalloc's own thread. */
export const MALLOC_CONF = 'narenas:2,dirty_decay_ms:1000,muzzy_decay_ms:0,background_thread:true';

/** Where Debian puts the library, for deciding whether to preload it at all (a missing one is an ld.so error line). */
const LIBRARY_DIRS = ['/usr/lib/x86_64-linux-gnu', '/usr/lib/aarch64-linux-gnu', '/usr/lib64', '/usr/lib'];

function jemallocInstalled(exists: (path: string) => boolean = existsSync): boolean {
  return LIBRARY_DIRS.some((d) => exists(`${d}/${JEMALLOC_LIBRARY}`));
}

/** `env` preloading jemalloc with Kindling's settings, when the machine has it (other preloads kept); else `env`. */
export function withJemalloc(env: NodeJS.ProcessEnv, installed: boolean = jemallocInstalled()): NodeJS.ProcessEnv {
  if (!installed) return env;
  const preloads = (env.LD_PRELOAD ?? '').split(/[:\s]+/).filter((p) => p !== '' && !p.endsWith(JEMALLOC_LIBRARY));
  return { ...env, LD_PRELOAD: [...preloads, JEMALLOC_LIBRARY].join(':'), MALLOC_CONF: env.MALLOC_CONF ?? MALLOC_CONF };
}

/** Which allocator this process runs on: jemalloc when its library is mapped (/proc/self/maps), else the C library's. */
export function allocator(maps: () => string = () => readFileSync('/proc/self/maps', 'utf8')): 'jemalloc' | 'libc' {
  try {
    return maps().includes(JEMALLOC_LIBRARY) ? 'jemalloc' : 'libc';
  } catch {
    return 'libc';
  }
}
