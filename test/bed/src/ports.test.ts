import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { freePort, keptPort } from './ports.js';

const listen = (port: number): Promise<Server> =>
  new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve(server));
  });
const close = (server: Server): Promise<void> => new Promise((resolve) => server.close(() => resolve()));

describe('ports', () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'kindling-ports-'));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('when ports are drawn, it should hand out each once, below the range the kernel picks from (or from it, when it leaves no room below)', async () => {
    const low = Number((await readFile('/proc/sys/net/ipv4/ip_local_port_range', 'utf8')).trim().split(/\s+/)[0]);
    const [from, to] = low - 10_000 >= 1_000 ? [10_000, low] : [low, 65_536];
    const ports = await Promise.all(Array.from({ length: 50 }, () => freePort()));
    assert.equal(new Set(ports).size, ports.length);
    for (const port of ports) assert.ok(port >= from && port < to, `${port} outside [${from}, ${to})`);
  });

  it('when a port was kept, it should be given again, and written on first use', async () => {
    const file = join(dir, 'first');
    const port = await keptPort(file);
    assert.equal(Number(await readFile(file, 'utf8')), port);
    assert.equal(await keptPort(file), port);
  });

  it('when another process holds a kept port, it should refuse it naming the file, or move it when movable', async () => {
    const held = await listen(0);
    const port = (held.address() as { port: number }).port;
    const file = join(dir, 'held');
    await writeFile(file, `${port}\n`);
    try {
      await assert.rejects(keptPort(file, { waitMs: 200 }), (err: Error) => {
        assert.match(err.message, new RegExp(`port ${port}, kept in ${file}.*held by another process`));
        return true;
      });
      const moved = await keptPort(file, { movable: true });
      assert.notEqual(moved, port);
      assert.equal(Number(await readFile(file, 'utf8')), moved);
    } finally {
      await close(held);
    }
  });

  it('when the predecessor lets a kept port go while it is waited for, it should be given', async () => {
    const held = await listen(0);
    const port = (held.address() as { port: number }).port;
    const file = join(dir, 'released');
    await writeFile(file, `${port}\n`);
    setTimeout(() => void close(held), 300);
    assert.equal(await keptPort(file, { waitMs: 3_000 }), port);
  });
});
