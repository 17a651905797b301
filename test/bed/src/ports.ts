import { createServer } from 'node:net';

/** A loopback port that was free a moment ago; callers retry if a component fails to bind it. */
export async function freePort(): Promise<number> {
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

/** Whether a loopback port can be bound right now (so a resumed component can take its old port back). */
export async function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.unref();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
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
