/**
 * A guest cluster's kubeconfig is data a tenant wrote (its `<cluster>-kubeconfig` Secret), never code.
 * client-node's own loader honours `exec` and `auth-provider` (it runs a command or a plugin), `token-file` and
 * the file paths (it reads a file of the reading machine, such as its ServiceAccount token, and sends it to the
 * server the kubeconfig names), `proxy-url` and `insecure-skip-tls-verify`. So a guest kubeconfig is parsed
 * here as plain YAML, every key is checked against the few inline values a client needs, anything else is
 * refused with the field it names, and the client config is built from the vetted values alone.
 *
 * The operator's own kubeconfig (`--kubeconfig`, the in-cluster ServiceAccount) is not a tenant's: it is
 * loaded by loadKubeConfig as it is.
 */
import { parseDocument } from 'yaml';
import { CONDITIONS } from '../../api/src/conditions.js';
import { TerminalError } from './errors.js';
import { ApiKubeConfig } from './kubeconfig.js';

/** What Kindling takes from a guest kubeconfig: the current context's cluster and user, inline values only. */
export interface GuestKubeconfig {
  /** An https URL. */
  server: string;
  /** Base64 PEM, as in the kubeconfig. */
  caData?: string;
  tlsServerName?: string;
  token?: string;
  /** Base64 PEM; with keyData or not at all. */
  certData?: string;
  keyData?: string;
}

export const GUEST_KUBECONFIG_REFUSED = CONDITIONS.SupportedVersionSkew.reasons.GuestKubeconfigRefused;

/** A guest kubeconfig Kindling will not use; `field` is where it is, such as `users[0].user.exec`. */
export class GuestKubeconfigRefusedError extends TerminalError {
  constructor(
    readonly field: string,
    why: string,
  ) {
    super(`the guest kubeconfig is refused: ${field} ${why}`, GUEST_KUBECONFIG_REFUSED);
  }
}

/** The first GuestKubeconfigRefusedError in an error's cause chain. */
export function findKubeconfigRefusal(err: unknown): GuestKubeconfigRefusedError | undefined {
  for (let e: unknown = err; e instanceof Error; e = e.cause) if (e instanceof GuestKubeconfigRefusedError) return e;
  return undefined;
}

const TOP_FIELDS = ['apiVersion', 'kind', 'clusters', 'users', 'contexts', 'current-context', 'preferences'];
const CLUSTER_FIELDS = ['server', 'certificate-authority-data', 'tls-server-name'];
const USER_FIELDS = ['token', 'client-certificate-data', 'client-key-data'];
const CONTEXT_FIELDS = ['cluster', 'user', 'namespace'];

const A_FILE = 'names a file of the reading machine, whose content would be sent to the server; give the data inline';
const IMPERSONATION = 'asks for impersonation, which a guest kubeconfig may not';
const REFUSED: Record<string, string> = {
  exec: 'would run a command',
  'auth-provider': 'would run an authentication plugin',
  'proxy-url': 'would send every request through another host',
  'insecure-skip-tls-verify': "would turn off the check of the server's certificate",
  username: 'is basic authentication, which a guest kubeconfig may not use',
  password: 'is basic authentication, which a guest kubeconfig may not use',
};

function whyRefused(key: string, allowed: readonly string[]): string {
  const why = Object.hasOwn(REFUSED, key) ? REFUSED[key] : undefined;
  if (why !== undefined) return why;
  if (/(-file|File)$/.test(key) || ['certificate-authority', 'client-certificate', 'client-key'].includes(key))
    return A_FILE;
  if (/^(as|impersonate)(-|$)/i.test(key)) return IMPERSONATION;
  return `is not a field Kindling accepts here (only ${allowed.join(', ')})`;
}

type YamlMap = Map<unknown, unknown>;

/** The path of `key` under `field` (`users[0].user` + `exec`); a top-level key is its own path. */
const under = (field: string, key: string): string => (field === '' ? key : `${field}.${key}`);

function yamlOf(text: string): unknown {
  const doc = parseDocument(text, { uniqueKeys: true });
  const error = doc.errors[0];
  // The parser's own message quotes the source line, which may hold a credential: only its code and position.
  if (error) {
    const at = error.linePos?.[0];
    throw new GuestKubeconfigRefusedError(
      'the kubeconfig',
      `is not valid YAML (${error.code}${at ? ` at line ${at.line}` : ''})`,
    );
  }
  return doc.toJS({ mapAsMap: true });
}

function mapping(value: unknown, field: string): YamlMap {
  if (!(value instanceof Map)) throw new GuestKubeconfigRefusedError(field, 'is not a mapping');
  return value;
}

function checkKeys(m: YamlMap, field: string, allowed: readonly string[]): void {
  for (const key of m.keys()) {
    // A tenant's key goes into a condition message: a long one is cut.
    const name = String(key).slice(0, 63);
    if (typeof key !== 'string' || !allowed.includes(key))
      throw new GuestKubeconfigRefusedError(under(field, name), whyRefused(name, allowed));
  }
}

function text(m: YamlMap, key: string, field: string): string | undefined {
  const value = m.get(key);
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'string' || value === '')
    throw new GuestKubeconfigRefusedError(under(field, key), 'is not a non-empty string');
  return value;
}

function required(m: YamlMap, key: string, field: string): string {
  const value = text(m, key, field);
  if (value === undefined) throw new GuestKubeconfigRefusedError(under(field, key), 'is missing');
  return value;
}

interface Entry {
  field: string;
  body: YamlMap;
}

/** A named list (`clusters`, `users`, `contexts`), every entry checked, by name. */
function entries(top: YamlMap, list: string, inner: string, allowed: readonly string[]): Map<string, Entry> {
  const items = top.get(list) ?? [];
  if (!Array.isArray(items)) throw new GuestKubeconfigRefusedError(list, 'is not a list');
  const out = new Map<string, Entry>();
  items.forEach((item: unknown, i) => {
    const at = `${list}[${i}]`;
    const entry = mapping(item, at);
    checkKeys(entry, at, ['name', inner]);
    const name = required(entry, 'name', at);
    if (out.has(name)) throw new GuestKubeconfigRefusedError(`${at}.name`, `repeats the name of another entry`);
    const field = `${at}.${inner}`;
    const body = mapping(entry.get(inner) ?? new Map(), field);
    checkKeys(body, field, allowed);
    out.set(name, { field, body });
  });
  return out;
}

function named(list: Map<string, Entry>, name: string, field: string): Entry {
  const entry = list.get(name);
  if (!entry) throw new GuestKubeconfigRefusedError(field, 'names no entry of the kubeconfig');
  return entry;
}

function base64(m: YamlMap, key: string, field: string): string | undefined {
  const value = text(m, key, field);
  if (value !== undefined && !/^[A-Za-z0-9+/=\s]+$/.test(value))
    throw new GuestKubeconfigRefusedError(under(field, key), 'is not base64');
  return value;
}

function clusterOf({ field, body }: Entry): Pick<GuestKubeconfig, 'server' | 'caData' | 'tlsServerName'> {
  const server = required(body, 'server', field);
  let url: URL;
  try {
    url = new URL(server);
  } catch {
    throw new GuestKubeconfigRefusedError(`${field}.server`, 'is not a URL');
  }
  if (url.protocol !== 'https:') throw new GuestKubeconfigRefusedError(`${field}.server`, 'is not an https URL');
  if (url.username !== '' || url.password !== '')
    throw new GuestKubeconfigRefusedError(`${field}.server`, 'carries credentials in the URL');
  return {
    server: server.replace(/\/$/, ''),
    caData: base64(body, 'certificate-authority-data', field),
    tlsServerName: text(body, 'tls-server-name', field),
  };
}

function userOf({ field, body }: Entry): Pick<GuestKubeconfig, 'token' | 'certData' | 'keyData'> {
  const token = text(body, 'token', field);
  // A header value: a line break in it would be a second header.
  if (token !== undefined && !/^[\x21-\x7e]+$/.test(token))
    throw new GuestKubeconfigRefusedError(`${field}.token`, 'holds characters a bearer token cannot');
  const certData = base64(body, 'client-certificate-data', field);
  const keyData = base64(body, 'client-key-data', field);
  if ((certData === undefined) !== (keyData === undefined))
    throw new GuestKubeconfigRefusedError(field, 'has only one of client-certificate-data and client-key-data');
  return { token, certData, keyData };
}

/** The vetted values of a guest kubeconfig; throws GuestKubeconfigRefusedError naming the first field refused. */
export function parseGuestKubeconfig(yaml: string): GuestKubeconfig {
  const top = mapping(yamlOf(yaml), 'the kubeconfig');
  checkKeys(top, '', TOP_FIELDS);
  const clusters = entries(top, 'clusters', 'cluster', CLUSTER_FIELDS);
  const users = entries(top, 'users', 'user', USER_FIELDS);
  const contexts = entries(top, 'contexts', 'context', CONTEXT_FIELDS);
  const context = named(contexts, required(top, 'current-context', ''), 'current-context');
  const cluster = named(clusters, required(context.body, 'cluster', context.field), `${context.field}.cluster`);
  const userName = text(context.body, 'user', context.field);
  const user = userName === undefined ? undefined : named(users, userName, `${context.field}.user`);
  return { ...clusterOf(cluster), ...(user ? userOf(user) : {}) };
}

/** The client config of a guest kubeconfig, made from its vetted values only (see parseGuestKubeconfig). */
export function guestKubeConfig(yaml: string): ApiKubeConfig {
  const v = parseGuestKubeconfig(yaml);
  const kc = new ApiKubeConfig();
  kc.loadFromOptions({
    clusters: [
      { name: 'guest', server: v.server, caData: v.caData, tlsServerName: v.tlsServerName, skipTLSVerify: false },
    ],
    users: [{ name: 'guest', token: v.token, certData: v.certData, keyData: v.keyData }],
    contexts: [{ name: 'guest', cluster: 'guest', user: 'guest' }],
    currentContext: 'guest',
  });
  return kc;
}
