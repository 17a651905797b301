/**
 * Test helpers: the join material the ignition server's payload puts on a host (HOST_PATHS), for a guest of
 * the test bed and a bootstrap token, as files by host path; written into a host root, or as Ignition files.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { HOST_PATHS } from '../../../api/src/host-paths.js';
import { BOOTSTRAP_GROUP } from '../../../api/src/keys.js';
import {
  approveKubeletCsrsOf,
  bindGroup,
  createBootstrapToken,
  tokenKubeconfigYaml,
  type Cluster,
} from '../../../test/bed/src/index.js';

export interface JoinMaterialOptions {
  token: string;
  kubeletVersion?: string;
  registerWithTaints?: { key: string; value?: string; effect: string }[];
}

export function joinMaterialFiles(guest: Cluster, opts: JoinMaterialOptions): Record<string, string> {
  const version = opts.kubeletVersion ?? 'v1.36.2';
  return {
    [HOST_PATHS.bootstrapKubeconfig]: tokenKubeconfigYaml(guest, opts.token),
    [HOST_PATHS.guestCa]: guest.ca.certPem,
    [HOST_PATHS.kubeletConfig]: JSON.stringify({
      apiVersion: 'kubelet.config.k8s.io/v1beta1',
      kind: 'KubeletConfiguration',
      registerWithTaints: opts.registerWithTaints ?? [],
    }),
    [HOST_PATHS.releaseInfo]: releaseJson(version),
  };
}

export const releaseJson = (kubeletVersion: string): string =>
  JSON.stringify({
    version: kubeletVersion.replace(/^v/, ''),
    kubeletVersion,
    osImage: `Kindling Linux ${kubeletVersion.replace(/^v/, '')}`,
    digest: 'sha256:0',
  });

export async function writeHostFiles(root: string, files: Record<string, string>): Promise<void> {
  for (const [path, content] of Object.entries(files)) {
    await mkdir(dirname(join(root, path)), { recursive: true });
    await writeFile(join(root, path), content);
  }
}

/** The same files as an Ignition config's storage.files. */
export function ignitionFiles(
  files: Record<string, string>,
): { path: string; mode: number; contents: { source: string } }[] {
  return Object.entries(files).map(([path, content]) => ({
    path,
    mode: 0o600,
    contents: { source: `data:;base64,${Buffer.from(content).toString('base64')}` },
  }));
}

/**
 * What lets hosts of a guest join when the test is not about joining: the bootstrap group bound as Kindling's
 * guest set-up binds it, one bootstrap token, the join files for the hosts' boot config, and the test approving
 * that token's kubelet CSRs (Kindling's approver is the nodepool-controller's, tested there).
 */
export async function hostsCanJoin(guest: Cluster): Promise<{ files: ReturnType<typeof ignitionFiles>; stop(): void }> {
  await bindGroup(guest, BOOTSTRAP_GROUP, 'system:node-bootstrapper');
  const token = await createBootstrapToken(guest, { groups: [BOOTSTRAP_GROUP] });
  const approver = approveKubeletCsrsOf(guest, token.username);
  return { files: ignitionFiles(joinMaterialFiles(guest, { token: token.token })), stop: () => approver.stop() };
}
