import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { createLogger, scrub } from './logger.js';

const JWT = 'eyJhbGciOiJFUzI1NiJ9.eyJwb29sIjoiZGVmYXVsdC9wIn0.c2lnbmF0dXJlLWJ5dGVz';

function capture(): { lines: string[]; stream: Writable } {
  const lines: string[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _enc, cb) {
      lines.push(chunk.toString());
      cb();
    },
  });
  return { lines, stream };
}

describe('createLogger', () => {
  it('when a token, a header or Secret data is logged by any route, it should never reach the output', () => {
    const { lines, stream } = capture();
    const log = createLogger({ name: 't', destination: stream });
    log.info({ token: JWT, req: { headers: { authorization: `Bearer ${JWT}` } } }, 'fetch');
    log.info({ secret: { data: { token: 'c2VjcmV0' } } }, 'secret');
    log.info({ note: `header was Bearer ${JWT}` }, `message quoting ${JWT}`);
    log.error({ err: new Error(`401 for token ${JWT}`) }, 'failed');
    log.child({ nodePool: 'ns/p', token: 'plain-secret-value' }).info('child');
    const out = lines.join('');
    assert.equal(out.includes(JWT), false, out);
    assert.equal(out.includes('c2VjcmV0'), false, out);
    assert.equal(out.includes('plain-secret-value'), false, out);
    assert.match(out, /"nodePool":"ns\/p"/);
    assert.equal(lines.length, 5);
  });
});

describe('scrub', () => {
  it('when a string holds a bearer credential, it should mask it and keep the rest', () => {
    assert.equal(scrub('Authorization: Bearer abc.def-ghi'), 'Authorization: Bearer [REDACTED]');
    assert.equal(scrub('nothing secret'), 'nothing secret');
  });
});
