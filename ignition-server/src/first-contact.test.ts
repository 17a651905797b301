/**
 * `kindling ignition-server` started with no reachable cluster, as its own process: it used to retry inside its
 * informers without a word. It must say where it is going, and at each failed attempt the server and the
 * error, with backoff, and keep running (and trying) until it is stopped.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ignitionServerArgs, writeIgnitionServerFiles, type IgnitionServerFiles } from '../testing/index.js';

/** A loopback port nothing listens on: every connection is refused by the real socket layer. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as { port: number };
  await new Promise((r) => server.close(r));
  return port;
}

describe('kindling ignition-server with no reachable cluster', () => {
  let dir: string;
  let files: IgnitionServerFiles;
  let server: string;
  let kubeconfigPath: string;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'kindling-first-contact-'));
    files = await writeIgnitionServerFiles(join(dir, 'files'), []);
    server = `https://127.0.0.1:${await closedPort()}`;
    kubeconfigPath = join(dir, 'kubeconfig');
    await writeFile(
      kubeconfigPath,
      `apiVersion: v1
kind: Config
clusters: [{ name: m, cluster: { server: "${server}", insecure-skip-tls-verify: true } }]
users: [{ name: u, user: { token: never-logged-token-value } }]
contexts: [{ name: c, context: { cluster: m, user: u } }]
current-context: c
`,
    );
  });

  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('when the apiserver cannot be reached, it should log the address and the error with backoff and keep running', async () => {
    const [script = '', ...args] = ignitionServerArgs(files, {
      kubeconfigPath,
      namespace: 'tenant-a',
      port: 0,
      opsPort: 0,
      cacheDir: join(dir, 'cache'),
    });
    const child = spawn(process.execPath, [script, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    const failed = `Cannot reach the management cluster at ${server}: `;
    // Alive when its second failure is logged; a loaded machine may take seconds to start it.
    const secondFailure = new Promise<boolean>((resolve) => {
      const seen = (chunk: Buffer): void => {
        out += chunk.toString();
        if (out.split(failed).length > 2) resolve(true);
      };
      child.stdout.on('data', seen);
      child.stderr.on('data', seen);
    });
    const exited = new Promise<number | null>((r) => child.once('exit', r));
    const alive = await Promise.race([
      exited.then(() => false),
      secondFailure,
      new Promise<boolean>((r) => setTimeout(() => r(false), 60_000).unref()),
    ]);
    // The line in flight when the second failure was seen is complete once the process has exited.
    child.kill('SIGTERM');
    await exited;
    assert.equal(
      alive,
      true,
      `it exited, or did not fail twice within a minute, while the cluster was unreachable:\n${out}`,
    );
    const messages = out
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => String((JSON.parse(l) as { msg?: string }).msg));
    assert.equal(messages[0], `Contacting the management cluster at ${server}`);
    const failures = messages.filter((m) => m.startsWith(failed));
    assert.ok(failures.length >= 2, out);
    assert.match(failures[0] ?? '', /ECONNREFUSED.*; retrying in 1 s$/);
    assert.match(failures[1] ?? '', /; retrying in 2 s$/);
    assert.equal(out.includes('never-logged-token-value'), false);
  });
});
