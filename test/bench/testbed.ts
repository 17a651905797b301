/**
 * Test-bed figures: warm start time of a cluster (launch → apiserver /readyz), and resident memory of a
 * running management cluster (etcd + apiserver + controller-manager, CRDs installed) and of a guest cluster
 * (the same + KWOK), sampled after they settle.
 *
 *   npm run build && node dist/test/bench/testbed.js [--runs 5]
 */
import { startCluster, installCapiCrds, installKindlingCrds, testbedBinDir } from '../bed/src/index.js';

const MiB = 1024 * 1024;
const runsFlag = process.argv.indexOf('--runs');
const runs = runsFlag > 0 ? Number(process.argv[runsFlag + 1]) : 5;
const out = (s: string): void => void process.stdout.write(`${s}\n`);

testbedBinDir();
const starts: number[] = [];
for (let i = 0; i < runs; i++) {
  const t0 = performance.now();
  const c = await startCluster({ name: `bench-${i}`, controllerManager: false });
  starts.push(performance.now() - t0);
  await c.stop();
}
starts.sort((a, b) => a - b);
out(
  `warm cluster start (etcd + kube-apiserver to /readyz), ${runs} runs: median ${(starts[Math.floor(runs / 2)] ?? 0).toFixed(0)} ms, min ${(starts[0] ?? 0).toFixed(0)} ms, max ${(starts.at(-1) ?? 0).toFixed(0)} ms`,
);

const mgmt = await startCluster({ name: 'bench-mgmt' });
const guest = await startCluster({
  name: 'bench-guest',
  kwok: true,
  management: { cluster: mgmt, namespace: 'default' },
});
await Promise.all([installKindlingCrds(mgmt), installCapiCrds(mgmt)]);
await new Promise((r) => setTimeout(r, 15_000));
out(
  `memory, management cluster (etcd, apiserver, controller-manager, 14 CRDs): ${(mgmt.rssBytes() / MiB).toFixed(0)} MiB RSS`,
);
out(
  `memory, guest cluster (etcd, apiserver, controller-manager, KWOK): ${(guest.rssBytes() / MiB).toFixed(0)} MiB RSS`,
);
await Promise.all([guest.stop(), mgmt.stop()]);
