/**
 * `kindling status` on a real management cluster that has Kindling's CRDs but not Cluster API's: it used to
 * hang with no output (its informers retried a resource the apiserver does not serve); it must say what is
 * missing and exit non-zero, in bounded time.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { installKindlingCrds, startCluster, type Cluster } from '../../test/bed/src/index.js';
import { main } from './main.js';

/** The most `kindling status` may take to give up here: its preflight's bound plus slack for a loaded machine. */
const BOUND_MS = 20_000;

describe("kindling status without Cluster API's CRDs, on the real test bed", () => {
  let mgmt: Cluster;

  before(async () => {
    mgmt = await startCluster({ name: 'mgmt', controllerManager: false });
    await installKindlingCrds(mgmt);
  });

  after(async () => {
    await mgmt?.stop();
  });

  it("when Cluster API's CRDs are not installed, it should say so, naming the server, and exit 1 instead of hanging", async () => {
    const err: string[] = [];
    const io = { out: () => {}, err: (t: string) => void err.push(t), env: {} };
    let timer: NodeJS.Timeout | undefined;
    const hung = new Promise<string>((r) => (timer = setTimeout(() => r('still running'), BOUND_MS)));
    const code = await Promise.race([main(['status', '-A', '--kubeconfig', mgmt.kubeconfigPath], io), hung]);
    clearTimeout(timer);
    assert.equal(code, 1, `kindling status after ${BOUND_MS / 1000} s: ${String(code)}`);
    const said = err.join('');
    assert.ok(said.startsWith(`kindling status: the management cluster at ${mgmt.server} does not serve`), said);
    assert.match(said, /cluster\.x-k8s\.io\/v1beta2 machinedeployments, machinesets, machines: Cluster API's CRDs/);
    assert.doesNotMatch(said, /kindling\.dev/);
  });
});
