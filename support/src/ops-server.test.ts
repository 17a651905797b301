import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Counter, Registry } from 'prom-client';
import { startOpsServer } from './ops-server.js';

describe('startOpsServer', () => {
  it('when caches are not synced yet, it should answer /readyz 503 naming them, and 200 once they are', async () => {
    let synced = false;
    const registry = new Registry();
    new Counter({ name: 'kindling_test_total', help: 'test', registers: [registry] }).inc(3);
    const ops = await startOpsServer({
      address: '127.0.0.1:0',
      registry,
      readiness: [{ name: 'nodepool cache', check: () => synced }],
    });
    try {
      const url = (p: string): string => `http://127.0.0.1:${ops.port}${p}`;
      assert.equal((await fetch(url('/healthz'))).status, 200);
      const notReady = await fetch(url('/readyz'));
      assert.equal(notReady.status, 503);
      assert.match(await notReady.text(), /not ready: nodepool cache/);
      synced = true;
      assert.equal((await fetch(url('/readyz'))).status, 200);
      assert.match(await (await fetch(url('/metrics'))).text(), /kindling_test_total 3/);
      assert.equal((await fetch(url('/nope'))).status, 404);
    } finally {
      await ops.close();
    }
  });
});
