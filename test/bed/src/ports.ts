import { randomInt } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';

/** Below this, ports belong to well-known services. */
const LOWEST = 10_000;
/** Ports this process has drawn or kept: never drawn again, so two components never get the same one. */
const drawn = new Set<number>();

/**
 * The lowest port of the kernel's own range (an outgoing connection's source port, a listen on port 0). A port
 * drawn below it cannot be taken between the draw and the component's bind by a connection or by another
 * program's listen on 0; a port the kernel picked could, and a component restarting on a kept port would find
 * it held (a restarted Cluster API manager's webhook port once landed on the registry's).
 */
let kernelLow: Promise<number> | undefined;
function kernelRangeStart(): Promise<number> {
  kernelLow ??= readFile('/proc/sys/net/ipv4/ip_local_port_range', 'utf8')
    .catch(() => '')
    .then((text) => {
      const low = Number(text.trim().split(/\s+/)[0]);
      return Number.isInteger(low) && low > 0 ? low : 32_768;
    });
  return kernelLow;
}

/** A port free on every address a moment ago, below the kernel's range when the machine leaves room there. */
export async function freePort(): Promise<number> {
  const below = (await kernelRangeStart()) - LOWEST;
  for (let tries = 0; below >= 1_000 && tries < 100; tries++) {
    const port = LOWEST + randomInt(below);
    if (drawn.has(port)) continue;
    // Taken before the probe, so a draw running meanwhile in this process cannot get it too.
    drawn.add(port);
    if (await portFree(port)) return port;
    drawn.delete(port);
  }
  const port = await kernelPort();
  drawn.add(port);
  return port;
}

function kernelPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address !== null ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

/**
 * Whether a port can be bound right now on every address (so a resumed component can take its old port back):
 * the wildcard conflicts with a listener on any address, loopback or the install test's.
 */
async function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.unref();
    server.once('error', () => resolve(false));
    server.listen(port, () => server.close(() => resolve(true)));
  });
}

/**
 * Marks the ports kept in those of `files` that exist as not to be drawn by this process: read before any port is
 * drawn, so that a component drawing anew on a restart cannot land on a port that a component started later keeps
 * (down until then, so free).
 */
export async function reserveKept(files: readonly string[]): Promise<void> {
  for (const file of files) {
    const port = Number((await readFile(file, 'utf8').catch(() => '')).trim());
    if (Number.isInteger(port) && port > 0) drawn.add(port);
  }
}

/**
 * The port remembered in `file`, so that a restart listens where clients were told; drawn and remembered on
 * first use. When another process holds it: a `movable` port (one whose clients are told it again on every
 * start, as an apiserver's kubeconfig is rewritten) is drawn anew; any other is waited for a few seconds (a
 * stopping predecessor may still hold it), then refused with the file named, rather than started beside a
 * stranger who would answer its clients.
 */
export async function keptPort(file: string, opts: { movable?: boolean; waitMs?: number } = {}): Promise<number> {
  const previous = Number((await readFile(file, 'utf8').catch(() => '')).trim());
  if (Number.isInteger(previous) && previous > 0 && previous < 65_536) {
    drawn.add(previous);
    if (await freeWithin(previous, opts.movable === true ? 0 : (opts.waitMs ?? 5_000))) return previous;
    if (opts.movable !== true) {
      throw new Error(
        `port ${previous}, kept in ${file} so that clients find this component there after a restart, is held by another process (or, for a port of the kernel's range kept by an older version, by a connection for a while); stop that process or try again, or start afresh without this state folder`,
      );
    }
  }
  const port = await freePort();
  await writeFile(file, `${port}\n`);
  return port;
}

async function freeWithin(port: number, waitMs: number): Promise<boolean> {
  for (const deadline = Date.now() + waitMs; ; await new Promise((r) => setTimeout(r, 100))) {
    if (await portFree(port)) return true;
    if (Date.now() >= deadline) return false;
  }
}

/** Waits until something accepts connections on a port (of loopback unless told), failing early if the process meant to listen exits. */
export async function waitForPort(
  port: number,
  proc: { alive: boolean; name: string; tail(): string },
  timeoutMs = 10_000,
  host = '127.0.0.1',
): Promise<void> {
  const { connect } = await import('node:net');
  for (const deadline = Date.now() + timeoutMs; Date.now() < deadline;) {
    if (!proc.alive) throw new Error(`${proc.name} exited: ${proc.tail()}`);
    const open = await new Promise<boolean>((resolve) => {
      const s = connect(port, host, () => (s.destroy(), resolve(true)));
      s.on('error', () => resolve(false));
    });
    if (open) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${proc.name} did not listen on ${port}: ${proc.tail()}`);
}
