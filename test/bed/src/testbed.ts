/** Where the test bed's binaries and Cluster API CRDs are: built once by build.sh, cached by version. */
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';

const BUILD_SCRIPT = fileURLToPath(new URL('../../../../test/bed/build.sh', import.meta.url));
/** A Node annotated with this (value "true") stands for a host whose kubelet died: KWOK stops heartbeating it
 * and marks it Ready=Unknown (stage node-down in kwok-stages.yaml). Written by tests; read by KWOK. */
export const KWOK_STAGES_FILE = fileURLToPath(new URL('../../../../test/bed/kwok-stages.yaml', import.meta.url));

let binDir: string | undefined;

/** Builds what is missing (a no-op when cached) and returns the bin folder. */
export function testbedBinDir(): string {
  if (binDir !== undefined) return binDir;
  const out = execFileSync('bash', [BUILD_SCRIPT], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] });
  const dir = out.trim().split('\n').pop() ?? '';
  if (!existsSync(join(dir, 'kube-apiserver'))) throw new Error(`test bed build did not produce binaries in "${dir}"`);
  binDir = dir;
  return dir;
}

export type TestbedBinary =
  'etcd' | 'kube-apiserver' | 'kube-controller-manager' | 'kube-scheduler' | 'kubectl' | 'kwok' | 'capi-manager';

export function testbedBinary(name: TestbedBinary): string {
  return join(testbedBinDir(), name);
}

/** The real Cluster API CRDs (cluster.x-k8s.io), copied from the sigs.k8s.io/cluster-api module. */
export function capiCrdDir(): string {
  return join(dirname(testbedBinDir()), 'crds', 'cluster-api');
}
