/**
 * The join files spliced into a served payload (see join.ts): pure rendering, no Kubernetes client, so the
 * serving threads that splice them load nothing else.
 */
import { stringify } from 'yaml';
import { HOST_PATHS } from '../../api/src/host-paths.js';

/** What one token's join material is made of. */
export interface JoinMaterial {
  server: string;
  caPem: string;
  /** `<id>.<secret>`. */
  bootstrapToken: string;
}

/** The bootstrap kubeconfig a kubelet starts TLS bootstrap with. */
export function bootstrapKubeconfig(m: JoinMaterial): string {
  return stringify({
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
  });
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
