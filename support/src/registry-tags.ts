/**
 * The tags of an image's repository (`GET /v2/<repository>/tags/list`), for `kindling plan`'s upgrade targets:
 * one read-only call, answering the registry's challenge once (registry-auth.ts). Messages name the registry and the status, never a body or a token.
 */
import { request } from 'node:https';
import { answerChallenge, type RegistryCredentials } from './registry-auth.js';

export interface TagListOptions {
  /** Extra CA certificates (PEM) trusted for the registry. */
  ca?: string;
  credentials?: (host: string) => RegistryCredentials | undefined;
  timeoutMs?: number;
}

/**
 * `[docker://]registry.local:5000/kindling/release:1.36.3[@sha256:…]` → host and repository, read as the ignition
 * server reads a release: the host is written out (no registry is implied), and an OCI layout has no tags to list.
 */
export function imageRepository(image: string): { host: string; repository: string } {
  if (/^oci(-archive)?:/.test(image)) throw new Error(`"${image}" is an OCI layout, not a registry: no tags to list`);
  const name = (image.replace(/^docker:\/\//, '').split('@')[0] ?? '').replace(/:[^/:]*$/, '');
  const slash = name.indexOf('/');
  if (slash <= 0) throw new Error(`"${image}" names no registry host (expected host[:port]/repository[:tag])`);
  return { host: name.slice(0, slash), repository: name.slice(slash + 1) };
}

const MAX_BYTES = 4 * 1024 * 1024;

function get(
  url: string,
  headers: Record<string, string>,
  opts: TagListOptions,
): Promise<{ status: number; auth?: string; body: string }> {
  return new Promise((resolve, reject) => {
    const r = request(
      url,
      { headers, ca: opts.ca, timeout: opts.timeoutMs ?? 15_000, minVersion: 'TLSv1.2' },
      (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on('data', (c: Buffer) => {
          size += c.length;
          if (size > MAX_BYTES) r.destroy(new Error(`${new URL(url).host} answered more than ${MAX_BYTES} bytes`));
          else chunks.push(c);
        });
        res.on('end', () =>
          resolve({
            status: res.statusCode ?? 0,
            auth: res.headers['www-authenticate'],
            body: Buffer.concat(chunks).toString('utf8'),
          }),
        );
        res.on('error', reject);
      },
    );
    r.on('timeout', () => r.destroy(new Error(`GET ${url} timed out`)));
    r.on('error', (err) => reject(new Error(`GET ${url} failed: ${err.message}`, { cause: err })));
    r.end();
  });
}

/** The tags of the image's repository (the registry's first page). */
export async function listImageTags(image: string, opts: TagListOptions = {}): Promise<string[]> {
  const { host, repository } = imageRepository(image);
  const url = `https://${host}/v2/${repository}/tags/list`;
  let res = await get(url, {}, opts);
  if (res.status === 401) {
    const scope = { host, repository, actions: 'pull' };
    const authorization = await answerChallenge(res.auth, scope, opts.credentials?.(host), (u, h) => get(u, h, opts));
    res = await get(url, { authorization }, opts);
  }
  if (res.status !== 200)
    throw new Error(`listing the tags of ${repository} on registry ${host} failed: HTTP ${res.status}`);
  try {
    return (JSON.parse(res.body) as { tags?: string[] | null }).tags ?? [];
  } catch {
    throw new Error(`registry ${host} answered the tag list of ${repository} with a body that is not JSON`);
  }
}
