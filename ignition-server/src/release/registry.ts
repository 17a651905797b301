/**
 * A small OCI distribution client over HTTPS: pull (manifests and blobs, digest-verified) and push (blob
 * uploads, manifest PUT). Authentication follows the registry's challenge: a 401 with
 * `WWW-Authenticate: Bearer realm=…,service=…,scope=…` gets a token from the realm (anonymously, or with the
 * pull secret's credentials as Basic auth); `Basic` challenges get the credentials directly.
 */
import { request as httpsRequest } from 'node:https';
import type { IncomingHttpHeaders } from 'node:http';
import { MAX_BLOB_BYTES, type ImageSource, type ManifestBytes } from './image.js';
import { isDigest } from './reference.js';
import { InvalidReleaseError, MEDIA_TYPES, ReleaseUnavailableError } from './types.js';
import { answerChallenge, type RegistryCredentials, type TokenGet } from '../../../support/src/registry-auth.js';

export { parseChallenge, parsePullSecret } from '../../../support/src/registry-auth.js';

export interface RegistryOptions {
  /** Extra CA certificates (PEM) trusted for registries, besides the system ones. */
  ca?: string;
  /** Credentials per registry host, from a dockerconfigjson pull secret. */
  credentials?: (host: string) => RegistryCredentials | undefined;
  timeoutMs?: number;
}

interface HttpResponse {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

interface HttpRequest {
  method: string;
  url: string;
  headers?: Record<string, string>;
  body?: Buffer;
  maxBytes?: number;
}

const MANIFEST_ACCEPT = [
  MEDIA_TYPES.ociIndex,
  MEDIA_TYPES.ociManifest,
  MEDIA_TYPES.dockerList,
  MEDIA_TYPES.dockerManifest,
].join(', ');

function send(req: HttpRequest, opts: RegistryOptions): Promise<HttpResponse> {
  const maxBytes = req.maxBytes ?? MAX_BLOB_BYTES;
  return new Promise((resolve, reject) => {
    const r = httpsRequest(
      req.url,
      {
        method: req.method,
        headers: req.headers,
        ca: opts.ca,
        timeout: opts.timeoutMs ?? 30_000,
        minVersion: 'TLSv1.2',
      },
      (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on('data', (c: Buffer) => {
          size += c.length;
          if (size > maxBytes) r.destroy(new InvalidReleaseError(`${req.url} answered more than ${maxBytes} bytes`));
          else chunks.push(c);
        });
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }),
        );
        res.on('error', reject);
      },
    );
    r.on('timeout', () => r.destroy(new Error(`${req.method} ${req.url} timed out`)));
    r.on('error', (err) =>
      reject(
        err instanceof InvalidReleaseError
          ? err
          : new ReleaseUnavailableError(`${req.method} ${req.url} failed: ${err.message}`, { cause: err }),
      ),
    );
    r.end(req.body);
  });
}

export class RegistryClient {
  readonly #host: string;
  readonly #repository: string;
  readonly #opts: RegistryOptions;
  /** Authorization per scope ("pull" or "push,pull"), once a challenge was answered. */
  readonly #auth = new Map<string, string>();

  constructor(host: string, repository: string, opts: RegistryOptions = {}) {
    this.#host = host;
    this.#repository = repository;
    this.#opts = opts;
  }

  get #base(): string {
    return `https://${this.#host}/v2/${this.#repository}`;
  }

  /** Sends with the scope's authorization; answers a 401 challenge once, then retries. */
  async #call(req: HttpRequest, actions: string): Promise<HttpResponse> {
    const auth = this.#auth.get(actions);
    const first = await this.#follow({ ...req, headers: { ...req.headers, ...(auth ? { authorization: auth } : {}) } });
    if (first.status !== 401) return first;
    const authorization = await this.#answer(first.headers['www-authenticate'], actions);
    this.#auth.set(actions, authorization);
    return this.#follow({ ...req, headers: { ...req.headers, authorization } });
  }

  /** Follows redirects (blob storage); credentials never go to another host. */
  async #follow(req: HttpRequest): Promise<HttpResponse> {
    let current = req;
    for (let hops = 0; hops < 5; hops++) {
      const res = await send(current, this.#opts);
      const location = res.headers.location;
      if (![301, 302, 303, 307, 308].includes(res.status) || !location) return res;
      const next = new URL(location, current.url);
      const sameHost = next.host === new URL(current.url).host;
      const headers = { ...current.headers };
      if (!sameHost) delete headers.authorization;
      current = { ...current, url: next.toString(), headers };
    }
    throw new ReleaseUnavailableError(`too many redirects from ${req.url}`);
  }

  /** The challenge's answer (support/src/registry-auth.ts), its token request sent through #follow. */
  async #answer(challenge: string | undefined, actions: string): Promise<string> {
    const scope = { host: this.#host, repository: this.#repository, actions };
    const get: TokenGet = async (url, headers) => {
      const res = await this.#follow({ method: 'GET', url, headers, maxBytes: 1024 * 1024 });
      return { status: res.status, body: res.body.toString('utf8') };
    };
    try {
      return await answerChallenge(challenge, scope, this.#opts.credentials?.(this.#host), get);
    } catch (err) {
      if (err instanceof ReleaseUnavailableError) throw err;
      throw new ReleaseUnavailableError(err instanceof Error ? err.message : String(err), { cause: err });
    }
  }

  /**
   * The registry, the status and what was being done, never the body: the message lands in the token
   * Secret's annotation and an Event, readable by whoever wrote the reference, and a body is whatever the
   * host answered (an internal service's page, if a reference ever pointed at one).
   */
  #check(res: HttpResponse, what: string): HttpResponse {
    if (res.status >= 200 && res.status < 300) return res;
    throw new ReleaseUnavailableError(
      `${what} of ${this.#repository} on registry ${this.#host} failed: HTTP ${res.status}`,
    );
  }

  async getManifest(reference: string): Promise<ManifestBytes> {
    const found = await this.findManifest(reference);
    if (!found)
      throw new ReleaseUnavailableError(
        `fetching manifest ${reference} of ${this.#repository} on registry ${this.#host} failed: HTTP 404`,
      );
    return found;
  }

  /** The manifest under a tag or digest; undefined when the registry has none (404). */
  async findManifest(reference: string): Promise<ManifestBytes | undefined> {
    const res = await this.#call(
      {
        method: 'GET',
        url: `${this.#base}/manifests/${reference}`,
        headers: { accept: MANIFEST_ACCEPT },
        maxBytes: 4 * 1024 * 1024,
      },
      'pull',
    );
    if (res.status === 404) return undefined;
    this.#check(res, `fetching manifest ${reference}`);
    return { bytes: res.body, mediaType: String(res.headers['content-type'] ?? '').split(';')[0] ?? '' };
  }

  /** The repository's tags (one page: the registry's default page size). */
  async listTags(): Promise<string[]> {
    const res = this.#check(
      await this.#call({ method: 'GET', url: `${this.#base}/tags/list`, maxBytes: 4 * 1024 * 1024 }, 'pull'),
      'listing the tags',
    );
    return (JSON.parse(res.body.toString('utf8')) as { tags?: string[] | null }).tags ?? [];
  }

  async getBlob(digest: string): Promise<Buffer> {
    return this.#check(
      await this.#call({ method: 'GET', url: `${this.#base}/blobs/${digest}` }, 'pull'),
      `fetching blob ${digest}`,
    ).body;
  }

  async #hasBlob(digest: string): Promise<boolean> {
    const res = await this.#call({ method: 'HEAD', url: `${this.#base}/blobs/${digest}` }, 'push,pull');
    return res.status === 200;
  }

  /** Monolithic upload: POST a session, PUT the bytes with their digest. */
  async putBlob(digest: string, bytes: Buffer): Promise<void> {
    if (await this.#hasBlob(digest)) return;
    const start = this.#check(
      await this.#call(
        { method: 'POST', url: `${this.#base}/blobs/uploads/`, headers: { 'content-length': '0' } },
        'push,pull',
      ),
      'starting an upload',
    );
    const location = new URL(String(start.headers.location ?? ''), `https://${this.#host}`);
    location.searchParams.set('digest', digest);
    const headers = { 'content-type': 'application/octet-stream', 'content-length': String(bytes.length) };
    this.#check(
      await this.#call({ method: 'PUT', url: location.toString(), headers, body: bytes }, 'push,pull'),
      `uploading blob ${digest}`,
    );
  }

  async putManifest(reference: string, bytes: Buffer, mediaType: string): Promise<void> {
    const headers = { 'content-type': mediaType, 'content-length': String(bytes.length) };
    this.#check(
      await this.#call(
        { method: 'PUT', url: `${this.#base}/manifests/${reference}`, headers, body: bytes },
        'push,pull',
      ),
      `pushing manifest ${reference}`,
    );
  }
}

/** Digests come from the registry's manifests: only a well-formed one goes into a URL (and a message). */
function digestOnly(digest: string): string {
  if (!isDigest(digest))
    throw new InvalidReleaseError('a manifest names a blob or manifest by something other than a sha256 digest');
  return digest;
}

export function registrySource(client: RegistryClient, reference: string): ImageSource {
  return {
    root: () => client.getManifest(reference),
    manifest: async (digest) => client.getManifest(digestOnly(digest)),
    blob: async (digest) => client.getBlob(digestOnly(digest)),
  };
}
