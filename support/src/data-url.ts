/**
 * RFC 2397 data URLs, the one source an Ignition config can carry inline: the ignition server counts their
 * bytes against its budget and reads the kubelet config from one, and the agent writes them to hosts. One
 * decoder, so they all read the same bytes from the same URL.
 */

export class InvalidDataUrlError extends Error {
  override readonly name = 'InvalidDataUrlError';
}

/** The bytes of a data URL; undefined for another scheme. A percent-encoding that does not decode is refused. */
export function dataUrlBytes(url: string): Buffer | undefined {
  const match = /^data:([^,]*),(.*)$/s.exec(url);
  if (!match) return undefined;
  const [, meta = '', data = ''] = match;
  if (meta.split(';').includes('base64')) return Buffer.from(data, 'base64');
  try {
    return Buffer.from(decodeURIComponent(data), 'utf8');
  } catch (err) {
    throw new InvalidDataUrlError(`data URL "${url.slice(0, 40)}" is not valid percent-encoding`, { cause: err });
  }
}
