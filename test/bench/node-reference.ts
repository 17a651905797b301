/**
 * The Node.js reference of the ignition-server benchmark: what plain `node:https` does with the same TLS
 * certificate and options (`SERVING_TLS`: ciphers in the same order, no session tickets), the same bytes and the same check (the bearer token looked up in a map, the NodePool header
 * compared with the token's pool), one process per core (node:cluster, each accepting on the shared port).
 * No token verification, no revocation, no logging, no metrics: the ceiling of this runtime on this machine,
 * which Kindling's serving threads can approach but not pass.
 *
 * With `--threads`, one process instead, with a worker thread per core, each its own server on its own
 * listening socket of the port (`reusePort`), as Kindling's serving threads are (ignition-server/src/serving):
 * what this runtime costs in threads rather than processes, apart from anything Kindling adds.
 *
 *   node dist/test/bench/node-reference.js --addr 127.0.0.1:PORT --cert C --key K --tokens sites.json [--threads]
 */
import cluster from 'node:cluster';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:https';
import { availableParallelism } from 'node:os';
import { parseArgs } from 'node:util';
import { isMainThread, Worker, workerData } from 'node:worker_threads';
import { SERVING_TLS } from '../../support/src/https.js';

interface Options {
  addr: string;
  cert: string;
  key: string;
  tokens: string;
  /** Each listener its own socket on the port (the threads' way); the cluster's workers share the primary's. */
  reusePort: boolean;
}

interface Answer {
  pool: string;
  body: Buffer;
}

function load(path: string): Map<string, Answer> {
  const sites = JSON.parse(readFileSync(path, 'utf8')) as { token: string; pool: string; payload: string }[];
  const bodies = new Map<string, Buffer>();
  const byToken = new Map<string, Answer>();
  for (const s of sites) {
    const body = bodies.get(s.payload) ?? readFileSync(s.payload);
    bodies.set(s.payload, body);
    byToken.set(s.token, { pool: s.pool, body });
  }
  return byToken;
}

function serve({ addr, cert, key, tokens, reusePort }: Options): void {
  const byToken = load(tokens);
  const [host, port] = [addr.slice(0, addr.lastIndexOf(':')), Number(addr.slice(addr.lastIndexOf(':') + 1))];
  createServer({ ...SERVING_TLS, cert: readFileSync(cert), key: readFileSync(key) }, (req, res) => {
    const auth = req.headers.authorization ?? '';
    const a =
      req.method === 'GET' && req.url === '/ignition' && auth.startsWith('Bearer ')
        ? byToken.get(auth.slice(7))
        : undefined;
    if (!a) {
      res.writeHead(401, { 'Www-Authenticate': 'Bearer realm="ignition"' }).end('unauthorized');
      return;
    }
    const pool = req.headers.nodepool;
    if (typeof pool === 'string' && pool !== a.pool) {
      res.writeHead(403).end('forbidden');
      return;
    }
    res
      .writeHead(200, {
        'Content-Type': 'application/vnd.coreos.ignition+json;version=3.3.0',
        'Content-Length': a.body.length,
        'Cache-Control': 'no-store',
      })
      .end(a.body);
  }).listen({ port, host, reusePort });
}

function options(): Options {
  const { values } = parseArgs({
    options: {
      addr: { type: 'string' },
      cert: { type: 'string' },
      key: { type: 'string' },
      tokens: { type: 'string' },
      threads: { type: 'boolean' },
    },
  });
  return {
    addr: values.addr ?? '127.0.0.1:0',
    cert: values.cert ?? '',
    key: values.key ?? '',
    tokens: values.tokens ?? '',
    reusePort: values.threads === true,
  };
}

if (!isMainThread) {
  serve(workerData as Options);
} else if (!cluster.isPrimary) {
  serve(options());
} else {
  const opts = options();
  for (let i = 0; i < availableParallelism(); i++) {
    if (!opts.reusePort) cluster.fork();
    else new Worker(new URL(import.meta.url), { workerData: opts }).on('exit', () => process.exit(1));
  }
  cluster.on('exit', () => process.exit(1));
}
