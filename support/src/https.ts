/**
 * The HTTPS serving port: TLS ≥ 1.2 only, the certificate and key read from files and reloaded when they
 * change (cert-manager renews them in place), and timeouts so a slow client cannot hold a connection.
 */
import { createServer, type Server } from 'node:https';
import { readFile, stat } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import type { RequestListener } from 'node:http';
import { createSecureContext } from 'node:tls';
import type { Logger } from './logger.js';
import { listen } from './ops-server.js';

export interface HttpsOptions {
  address: string;
  certFile: string;
  keyFile: string;
  app: RequestListener;
  log: Logger;
  reloadIntervalMs?: number;
  /** Time allowed to send the request headers (default 5 s). */
  headersTimeoutMs?: number;
  /** Time allowed for the whole request (default 10 s). */
  requestTimeoutMs?: number;
}

export interface HttpsServer {
  readonly port: number;
  readonly server: Server;
  /** Checks the files now (also done every reloadIntervalMs); resolves true when a new pair was loaded. */
  reload(): Promise<boolean>;
  close(): Promise<void>;
}

const TLS = { minVersion: 'TLSv1.2' as const };

async function readPair(certFile: string, keyFile: string): Promise<{ cert: Buffer; key: Buffer; stamp: string }> {
  const [cs, ks] = await Promise.all([stat(certFile), stat(keyFile)]);
  const [cert, key] = await Promise.all([readFile(certFile), readFile(keyFile)]);
  return { cert, key, stamp: `${cs.mtimeMs}:${cs.size}:${ks.mtimeMs}:${ks.size}:${cert.toString('base64').slice(-32)}` };
}

export async function startHttpsServer(opts: HttpsOptions): Promise<HttpsServer> {
  const first = await readPair(opts.certFile, opts.keyFile);
  let stamp = first.stamp;
  const headersTimeout = opts.headersTimeoutMs ?? 5_000;
  const server = createServer(
    {
      ...TLS,
      cert: first.cert,
      key: first.key,
      requestTimeout: opts.requestTimeoutMs ?? 10_000,
      headersTimeout,
      // Node enforces the two timeouts above only when it sweeps connections (every 30 s by default).
      connectionsCheckingInterval: Math.min(1000, headersTimeout / 2),
      keepAliveTimeout: 5_000,
      maxHeaderSize: 16 * 1024,
    },
    opts.app,
  );
  server.on('tlsClientError', (err) => opts.log.debug({ err: err.message }, 'TLS handshake failed'));
  const reload = async (): Promise<boolean> => {
    try {
      const next = await readPair(opts.certFile, opts.keyFile);
      if (next.stamp === stamp) return false;
      // Building the context first checks that the key matches the certificate before anything is swapped.
      createSecureContext({ ...TLS, cert: next.cert, key: next.key });
      server.setSecureContext({ ...TLS, cert: next.cert, key: next.key });
      stamp = next.stamp;
      opts.log.info('Reloaded the serving certificate');
      return true;
    } catch (err) {
      opts.log.error({ err }, 'Could not reload the serving certificate; keeping the current one');
      return false;
    }
  };
  const timer = setInterval(() => void reload(), opts.reloadIntervalMs ?? 10_000);
  timer.unref();
  await listen(server, opts.address);
  return {
    port: (server.address() as AddressInfo).port,
    server,
    reload,
    close: () =>
      new Promise<void>((resolve) => {
        clearInterval(timer);
        server.close(() => resolve());
        server.closeIdleConnections();
      }),
  };
}
