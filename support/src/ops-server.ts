/**
 * The plain-HTTP operations port: /healthz (the process is alive), /readyz (its caches synced and, where it
 * matters, it can serve), /metrics (Prometheus). Kept apart from any serving port.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo, Server as NetServer } from 'node:net';
import type { Registry } from 'prom-client';
import { splitAddress } from './address.js';

export interface ReadinessCheck {
  name: string;
  check: () => boolean;
}

export interface OpsServer {
  readonly port: number;
  close(): Promise<void>;
}

export async function startOpsServer(opts: {
  address: string;
  registry: Registry;
  readiness: ReadinessCheck[];
}): Promise<OpsServer> {
  const server: Server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method !== 'GET') {
      res.writeHead(405).end();
    } else if (path === '/healthz') {
      res.writeHead(200, { 'content-type': 'text/plain' }).end('ok');
    } else if (path === '/readyz') {
      const failing = opts.readiness.filter((r) => !r.check()).map((r) => r.name);
      res.writeHead(failing.length === 0 ? 200 : 503, { 'content-type': 'text/plain' });
      res.end(failing.length === 0 ? 'ok' : `not ready: ${failing.join(', ')}`);
    } else if (path === '/metrics') {
      opts.registry.metrics().then(
        (body) => res.writeHead(200, { 'content-type': opts.registry.contentType }).end(body),
        () => res.writeHead(500).end(),
      );
    } else {
      res.writeHead(404).end();
    }
  });
  await listen(server, opts.address);
  return {
    port: (server.address() as AddressInfo).port,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

/** Listens on an address of splitAddress's forms; rejects when the port cannot be bound. */
async function listen(server: Server | NetServer, address: string): Promise<void> {
  const [host, port] = splitAddress(address);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, resolve);
  });
}
