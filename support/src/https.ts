/**
 * The HTTPS serving port: TLS ≥ 1.2 only, the certificate and key read from files and reloaded when they
 * change (cert-manager renews them in place), and timeouts so a slow client cannot hold a connection.
 * Several servers (one per serving thread, serving/pool.ts) can accept on one listening socket: the first
 * binds the address, the others are given its file descriptor.
 */
import { createServer, type Server } from 'node:https';
import { readFile, stat } from 'node:fs/promises';
import type { AddressInfo, Socket } from 'node:net';
import type { RequestListener } from 'node:http';
import { createSecureContext } from 'node:tls';
import { constants } from 'node:crypto';
import type { Logger } from './logger.js';
import { splitAddress } from './address.js';

export interface HttpsOptions {
  address: string;
  /** Accept on this already listening socket instead of binding `address`. */
  fd?: number;
  /** Bind `address` with SO_REUSEPORT (Linux): servers each with a socket of their own on one port, the kernel spreading connections between them. */
  reusePort?: boolean;
  certFile: string;
  keyFile: string;
  app: RequestListener;
  log: Logger;
  reloadIntervalMs?: number;
  /** Time allowed to send the request headers (default 5 s). */
  headersTimeoutMs?: number;
  /** Time allowed for the whole request (default 10 s). */
  requestTimeoutMs?: number;
  /** Time allowed from accepting a connection to the end of its TLS handshake (default HANDSHAKE_TIMEOUT_MS). */
  handshakeTimeoutMs?: number;
}

export interface HttpsServer {
  readonly port: number;
  /** The listening socket's file descriptor (for other servers to accept on). */
  readonly fd: number;
  readonly server: Server;
  /** Checks the files now (also done every reloadIntervalMs); resolves true when a new pair was loaded. */
  reload(): Promise<boolean>;
  /**
   * Stops serving without closing the listening socket (others may share it): idle connections close, busy
   * ones close after their response, new ones are dropped; resolves when no request is in flight.
   */
  drain(timeoutMs: number): Promise<void>;
  close(): Promise<void>;
}

const BACKLOG = 4096;

/**
 * Node's default is 120 s, during which a connection that sent nothing holds a socket and its TLS state.
 * A handshake is two round trips and one signature; the slowest wait behind a boot storm's others (the
 * benchmark's 1,000 first fetches at once get their first byte, handshake included, within 4 s at p99).
 * Node arms it when the connection is accepted and nothing before the handshake's end re-arms it, so a
 * client trickling its hello is cut too.
 */
const HANDSHAKE_TIMEOUT_MS = 10_000;

/**
 * The cipher suites the port accepts, in the order it prefers them.
 *
 * TLS 1.3: AES-128-GCM first, as Go's crypto/tls orders it on processors with AES instructions: the cheapest
 * of the three TLS 1.3 suites to send (and for the host, to receive) a payload of a megabyte with; all three
 * stay allowed. Node takes TLS 1.3 suites in `ciphers` (by their TLS_ names; it has no `ciphersuites` option).
 *
 * TLS 1.2: ephemeral ECDH key exchange with an AEAD cipher only, in the same order. Node's default list would
 * also take, with an RSA certificate, static-RSA key exchange (no forward secrecy: whoever gets the key
 * later reads every recorded payload, tokens and join material included) and CBC suites with SHA-1 MACs.
 * Ignition (Go's crypto/tls) offers these first.
 */
const CIPHER_SUITES = [
  'TLS_AES_128_GCM_SHA256',
  'TLS_AES_256_GCM_SHA384',
  'TLS_CHACHA20_POLY1305_SHA256',
  'ECDHE-ECDSA-AES128-GCM-SHA256',
  'ECDHE-RSA-AES128-GCM-SHA256',
  'ECDHE-ECDSA-AES256-GCM-SHA384',
  'ECDHE-RSA-AES256-GCM-SHA384',
  'ECDHE-ECDSA-CHACHA20-POLY1305',
  'ECDHE-RSA-CHACHA20-POLY1305',
];
/**
 * No session tickets. OpenSSL's server sends two after every TLS 1.3 handshake, each a copy of the session
 * with its resumption secret encrypted under the context's ticket key, whether or not the client can use them;
 * an Ignition client keeps no session, so none is ever resumed, and that work was about 8 % of the instructions
 * of a handshake (callgrind, the boot storm's Go client). With the option OpenSSL sends two short session
 * names instead, which nothing remembers (the server keeps no session cache), so no session is resumed in
 * either version: no resumption secret leaves the server, and every connection does a full handshake with an
 * ephemeral key exchange, the same ciphers and curves as before.
 *
 * The benchmark's plain `node:https` reference takes these same options.
 */
export const SERVING_TLS = {
  minVersion: 'TLSv1.2' as const,
  ciphers: CIPHER_SUITES.join(':'),
  honorCipherOrder: true,
  secureOptions: constants.SSL_OP_NO_TICKET,
};

async function readPair(certFile: string, keyFile: string): Promise<{ cert: Buffer; key: Buffer; stamp: string }> {
  const [cs, ks] = await Promise.all([stat(certFile), stat(keyFile)]);
  const [cert, key] = await Promise.all([readFile(certFile), readFile(keyFile)]);
  return {
    cert,
    key,
    stamp: `${cs.mtimeMs}:${cs.size}:${ks.mtimeMs}:${ks.size}:${cert.toString('base64').slice(-32)}`,
  };
}

export async function startHttpsServer(opts: HttpsOptions): Promise<HttpsServer> {
  const first = await readPair(opts.certFile, opts.keyFile);
  let stamp = first.stamp;
  const headersTimeout = opts.headersTimeoutMs ?? 5_000;
  const served = drainable(() => server, opts.app);
  const server = createServer(
    {
      ...SERVING_TLS,
      cert: first.cert,
      key: first.key,
      handshakeTimeout: opts.handshakeTimeoutMs ?? HANDSHAKE_TIMEOUT_MS,
      requestTimeout: opts.requestTimeoutMs ?? 10_000,
      headersTimeout,
      // Node enforces the two timeouts above only when it sweeps connections (every 30 s by default).
      connectionsCheckingInterval: Math.min(1000, headersTimeout / 2),
      keepAliveTimeout: 5_000,
      maxHeaderSize: 16 * 1024,
    },
    served.app,
  );
  server.on('tlsClientError', (err) => opts.log.debug({ err: err.message }, 'TLS handshake failed'));
  // Node times a request from its first byte, so a connection that finished its handshake and sends nothing
  // would be kept for ever, holding a place under a connection cap; its first request lifts this.
  server.on('secureConnection', (socket: Socket) => socket.setTimeout(headersTimeout));
  const reload = async (): Promise<boolean> => {
    try {
      const next = await readPair(opts.certFile, opts.keyFile);
      if (next.stamp === stamp) return false;
      // Building the context first checks that the key matches the certificate before anything is swapped.
      createSecureContext({ ...SERVING_TLS, cert: next.cert, key: next.key });
      server.setSecureContext({ ...SERVING_TLS, cert: next.cert, key: next.key });
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
  // A boot storm opens a thousand connections at once: a backlog of Node's default 511 would drop SYNs, and a
  // dropped SYN costs the host a second before its retry (the kernel caps it at net.core.somaxconn).
  const [host, port] = splitAddress(opts.address);
  const where =
    opts.fd === undefined
      ? { host, port, backlog: BACKLOG, reusePort: opts.reusePort }
      : { fd: opts.fd, backlog: BACKLOG };
  await new Promise<void>((resolve, reject) => server.once('error', reject).listen(where, resolve));
  return {
    port: (server.address() as AddressInfo).port,
    fd: (server as unknown as { _handle?: { fd?: number } })._handle?.fd ?? -1,
    server,
    reload,
    drain: (timeoutMs) => {
      clearInterval(timer);
      return served.drain(timeoutMs);
    },
    close: () =>
      new Promise<void>((resolve) => {
        clearInterval(timer);
        server.close(() => resolve());
        server.closeIdleConnections();
      }),
  };
}

/**
 * See HttpsServer.drain. The app is wrapped rather than watched: a listener per request would cost every
 * request for the sake of the last ones.
 */
function drainable(
  server: () => Server,
  app: RequestListener,
): { app: RequestListener; drain: (timeoutMs: number) => Promise<void> } {
  let draining = false;
  return {
    app: (req, res) => {
      if (req.socket.timeout) req.socket.setTimeout(0);
      if (draining) res.shouldKeepAlive = false;
      app(req, res);
    },
    drain: async (timeoutMs) => {
      draining = true;
      const s = server();
      s.on('secureConnection', (socket: Socket) => socket.destroy());
      const deadline = Date.now() + timeoutMs;
      // A busy connection closes after its response (no keep-alive once draining); an idle one is closed here.
      while (Date.now() < deadline) {
        s.closeIdleConnections();
        const open = await new Promise<number>((resolve) => s.getConnections((_err, n) => resolve(n)));
        if (open === 0) return;
        await new Promise((r) => setTimeout(r, 50));
      }
    },
  };
}
