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

const basicAuthorization = (c: RegistryCredentials): string =>
  `Basic ${Buffer.from(`${c.username}:${c.password}`).toString('base64')}`;

/** Sends the token request of a Bearer challenge with the caller's transport (its CA, redirects, size limit). */
export type TokenGet = (url: string, headers: Record<string, string>) => Promise<{ status: number; body: string }>;

/** The token of the token service's answer, never quoted in a message. */
function tokenOf(host: string, body: string): string {
  let parsed: { token?: string; access_token?: string };
  try {
    parsed = JSON.parse(body) as typeof parsed;
  } catch {
    // No cause: the parser's message would quote the body.
    throw new Error(`the token service of ${host} answered 200 with a body that is not JSON`);
  }
  const token = parsed.token ?? parsed.access_token;
  if (!token) throw new Error(`the token service of ${host} gave no token`);
  return token;
}

function basicAnswer(host: string, creds: RegistryCredentials | undefined): string {
  if (!creds) throw new Error(`registry ${host} needs credentials and the pull secret has none for it`);
  return basicAuthorization(creds);
}

/**
 * The Authorization a registry's 401 challenge asks for, for `actions` ("pull", "push,pull") on a repository:
 * Basic with the pull secret's credentials, or a Bearer token from the challenge's realm (the distribution token
 * flow, anonymously or with Basic credentials). Messages name the registry and the status, never a body or token.
 */
export async function answerChallenge(
  header: string | undefined,
  scope: { host: string; repository: string; actions: string },
  creds: RegistryCredentials | undefined,
  get: TokenGet,
): Promise<string> {
  const challenge = parseChallenge(header);
  if (challenge?.scheme === 'basic') return basicAnswer(scope.host, creds);
  const realm = challenge?.params['realm'];
  if (challenge?.scheme !== 'bearer' || !realm)
    throw new Error(`registry ${scope.host} refused access without a usable challenge`);
  const url = new URL(realm);
  const service = challenge.params['service'];
  if (service) url.searchParams.set('service', service);
  url.searchParams.set('scope', `repository:${scope.repository}:${scope.actions}`);
  const res = await get(url.toString(), creds ? { authorization: basicAuthorization(creds) } : {});
  if (res.status !== 200) throw new Error(`the token service of ${scope.host} answered ${res.status}`);
  return `Bearer ${tokenOf(scope.host, res.body)}`;
}
