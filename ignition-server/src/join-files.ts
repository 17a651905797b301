/**
 * The join files spliced into a served payload (see join.ts): pure rendering, no Kubernetes client, so the
 * serving threads that splice them load nothing else.
 */
import { HOST_PATHS } from '../../api/src/host-paths.js';

/** What one token's join material is made of. */
export interface JoinMaterial {
  server: string;
  caPem: string;
  /** `<id>.<secret>`. */
  bootstrapToken: string;
}

/**
 * The bootstrap kubeconfig a kubelet starts TLS bootstrap with, as JSON (which every kubeconfig reader takes,
 * JSON being YAML): each host of a boot storm gets its own, rendered on its first fetch, and the YAML library
 * took about 300 µs per host for what JSON writes in 10.
 */
export function bootstrapKubeconfig(m: JoinMaterial): string {
  const kubeconfig = {
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [
      {
        name: 'guest',
        cluster: { server: m.server, 'certificate-authority-data': Buffer.from(m.caPem).toString('base64') },
      },
    ],
    users: [{ name: 'kubelet-bootstrap', user: { token: m.bootstrapToken } }],
    contexts: [{ name: 'bootstrap', context: { cluster: 'guest', user: 'kubelet-bootstrap' } }],
    'current-context': 'bootstrap',
  };
  return `${JSON.stringify(kubeconfig, null, 2)}\n`;
}

const dataUrl = (text: string): string => `data:;base64,${Buffer.from(text).toString('base64')}`;

/**
 * The join files as they are spliced into `storage.files` of a served payload: each entry preceded by a
 * comma, since they go after the payload's own files (which always hold at least the release identity).
 */
export function joinFileBytes(m: JoinMaterial): Buffer {
  const files = [
    { path: HOST_PATHS.guestCa, mode: 0o644, overwrite: true, contents: { source: dataUrl(m.caPem) } },
    {
      path: HOST_PATHS.bootstrapKubeconfig,
      mode: 0o600,
      overwrite: true,
      contents: { source: dataUrl(bootstrapKubeconfig(m)) },
    },
  ];
  return Buffer.from(files.map((f) => `,${JSON.stringify(f)}`).join(''));
}
