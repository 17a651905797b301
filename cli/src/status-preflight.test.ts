import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Socket } from 'node:net';
import * as k8s from '#k8s';
import { preflightProblem, statusPreflight, StatusPreflightError, type Served } from './status-preflight.js';

const SERVER = 'https://127.0.0.1:6443';
const ALL: [string, Served][] = [
  ['kindling.dev/v1beta1', ['nodepools', 'nodepools/status']],
  ['cluster.x-k8s.io/v1beta2', ['machinedeployments', 'machinesets', 'machines', 'clusters']],
];

describe('kindling status preflight', () => {
  it('when every resource status reads is served, it should find no problem', () => {
    assert.equal(preflightProblem(SERVER, new Map(ALL)), undefined);
  });

  it("when Cluster API's CRDs are missing, it should name the server, the missing resources and what installs them", () => {
    const problem = preflightProblem(SERVER, new Map([ALL[0] ?? ['', []], ['cluster.x-k8s.io/v1beta2', 'absent']]));
    assert.equal(
      problem,
      `the management cluster at ${SERVER} does not serve what status reads; missing:\n` +
        "  cluster.x-k8s.io/v1beta2 machinedeployments, machinesets, machines: Cluster API's CRDs (install Cluster API v1.14 or newer in the management cluster)",
    );
  });

  it('when only some resources of a group are served, it should list just the missing ones', () => {
    const problem = preflightProblem(
      SERVER,
      new Map([ALL[0] ?? ['', []], ['cluster.x-k8s.io/v1beta2', ['machines', 'clusters']]]),
    );
    assert.match(problem ?? '', /cluster\.x-k8s\.io\/v1beta2 machinedeployments, machinesets: /);
  });

  it('when nothing answers at the server, it should fail within its time bound with the address and the error', async () => {
    const held: Socket[] = [];
    const silent = createServer((socket) => void held.push(socket)); // accepts connections and never answers
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
    const { port } = silent.address() as { port: number };
    const kc = new k8s.KubeConfig();
    kc.loadFromOptions({
      clusters: [{ name: 'm', server: `https://127.0.0.1:${port}`, skipTLSVerify: true }],
      users: [{ name: 'u' }],
      contexts: [{ name: 'c', cluster: 'm', user: 'u' }],
      currentContext: 'c',
    });
    const started = Date.now();
    try {
      await assert.rejects(statusPreflight(kc, 300), (err) => {
        assert.ok(err instanceof StatusPreflightError);
        assert.equal(
          err.message,
          `cannot read the management cluster at https://127.0.0.1:${port}: the management cluster at https://127.0.0.1:${port} did not answer within 0.3 s`,
        );
        return true;
      });
      assert.ok(Date.now() - started < 5_000);
    } finally {
      held.forEach((s) => s.destroy());
      silent.close();
    }
  });
});
