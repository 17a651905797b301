/**
 * How OCI registries are authenticated, shared by the ignition server's registry client and the CLI's tag list:
 * credentials from a dockerconfigjson pull secret, the registry's `WWW-Authenticate` challenge, and the Basic
 * header. Nothing here logs or quotes a credential.
 */
export interface RegistryCredentials {
  username: string;
  password: string;
}

/** Reads `{"auths": {"host": {"auth": b64(user:pass)} | {"username","password"}}}`. */
export function parsePullSecret(json: string): (host: string) => RegistryCredentials | undefined {
  const parsed = JSON.parse(json) as {
    auths?: Record<string, { auth?: string; username?: string; password?: string }>;
  };
  const byHost = new Map<string, RegistryCredentials>();
  for (const [key, entry] of Object.entries(parsed.auths ?? {})) {
    const host = key.replace(/^https?:\/\//, '').replace(/\/.*$/, '');
    const decoded = entry.auth
      ? Buffer.from(entry.auth, 'base64').toString('utf8')
      : `${entry.username ?? ''}:${entry.password ?? ''}`;
    const colon = decoded.indexOf(':');
    if (colon > 0) byHost.set(host, { username: decoded.slice(0, colon), password: decoded.slice(colon + 1) });
  }
  return (host) =>
    byHost.get(host) ??
    (host === 'registry-1.docker.io' ? (byHost.get('docker.io') ?? byHost.get('index.docker.io')) : undefined);
}

/** `Bearer realm="…",service="…"` → { scheme, params }. */
export function parseChallenge(
  header: string | undefined,
): { scheme: string; params: Record<string, string> } | undefined {
  if (!header) return undefined;
  const m = /^(\w+)\s*(.*)$/.exec(header.trim());
  if (!m) return undefined;
  const params: Record<string, string> = {};
  for (const p of (m[2] ?? '').matchAll(/(\w+)="([^"]*)"/g)) params[(p[1] ?? '').toLowerCase()] = p[2] ?? '';
  return { scheme: (m[1] ?? '').toLowerCase(), params };
}

export const basicAuthorization = (c: RegistryCredentials): string =>
  `Basic ${Buffer.from(`${c.username}:${c.password}`).toString('base64')}`;
