import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { Writable } from 'node:stream';
import { createLogger, REDACTED, sanitize, scrub } from './logger.js';

const JWT = 'eyJhbGciOiJFUzI1NiJ9.eyJwb29sIjoiZGVmYXVsdC9wIn0.c2lnbmF0dXJlLWJ5dGVz';
/** A kubeadm bootstrap token: `<6-char id>.<16-char secret>`. */
const BOOTSTRAP = 'k9f3az.0h4x8q2m7c1v5b6n';
const SECRET_DATA = 'c2VjcmV0LWRlZXAtZGF0YQ==';

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

/** Logs through a fresh root logger and returns the output, parsed line by line and raw. */
function logged(fn: (log: ReturnType<typeof createLogger>) => void): { out: string; lines: Record<string, unknown>[] } {
  const { lines, stream } = capture();
  fn(createLogger({ name: 't', destination: stream }));
  return { out: lines.join(''), lines: lines.map((l) => JSON.parse(l) as Record<string, unknown>) };
}

describe('createLogger', () => {
  it('when a token, a header or Secret data is logged by any route, it should never reach the output', () => {
    const { out, lines } = logged((log) => {
      log.info({ token: JWT, req: { headers: { authorization: `Bearer ${JWT}` } } }, 'fetch');
      log.info({ secret: { data: { token: 'c2VjcmV0' } } }, 'secret');
      log.info({ note: `header was Bearer ${JWT}` }, `message quoting ${JWT}`);
      log.error({ err: new Error(`401 for token ${JWT}`) }, 'failed');
      log.child({ nodePool: 'ns/p', token: 'plain-secret-value' }).info('child');
    });
    assert.equal(out.includes(JWT), false, out);
    assert.equal(out.includes('c2VjcmV0'), false, out);
    assert.equal(out.includes('plain-secret-value'), false, out);
    assert.match(out, /"nodePool":"ns\/p"/);
    assert.equal(lines.length, 5);
  });

  it('when Secret data sits at any depth (an API error body, three levels down, a child binding), it should be redacted', () => {
    const { out, lines } = logged((log) => {
      log.warn({ err: { response: { body: { data: { token: SECRET_DATA } } } } }, 'apiserver answered');
      log.info({ a: { b: { c: { kind: 'Secret', data: { value: SECRET_DATA } } } } }, 'deep');
      log.info({ items: [{ metadata: { name: 's' }, stringData: { 'rotated-token': 'plain-rotated' } }] }, 'list');
      log.child({ secret: { data: { x: SECRET_DATA } } }).info('child');
      log.info({ l1: { l2: { l3: { l4: { l5: { l6: { l7: { l8: { note: `Bearer ${JWT}` } } } } } } } } }, 'very deep');
    });
    assert.equal(out.includes(SECRET_DATA), false, out);
    assert.equal(out.includes('plain-rotated'), false, out);
    assert.equal(out.includes(JWT), false, out);
    assert.deepEqual(
      (lines[1]?.a as { b: { c: unknown } }).b.c,
      { kind: 'Secret', data: REDACTED },
      'the rest of the object is kept',
    );
  });

  it('when a bootstrap token or a JWT appears in a message, a string field or an error, it should be masked wherever it is', () => {
    const { out } = logged((log) => {
      log.info(`joining with ${BOOTSTRAP}`);
      log.info({ command: `kubeadm join --token ${BOOTSTRAP} 10.0.0.1:6443` }, 'join');
      log.info('formatted %s and %o', BOOTSTRAP, { t: JWT });
      log.error(new Error(`rejected ${JWT} and ${BOOTSTRAP}`));
      log.warn({ list: [`x ${BOOTSTRAP}`, JWT] }, 'array');
    });
    assert.equal(out.includes(BOOTSTRAP), false, out);
    assert.equal(out.includes(BOOTSTRAP.split('.')[1] as string), false, out);
    assert.equal(out.includes(JWT), false, out);
    assert.match(
      out,
      /kubeadm join --token k9f3az\.\[REDACTED\] 10\.0\.0\.1:6443/,
      'the public token id is kept, the rest of the line too',
    );
  });

  it('when an Error has a cause (and fields of its own), it should keep them, serialized and redacted, not drop them', () => {
    const root = Object.assign(new Error(`connect refused, header Bearer ${JWT}`), { code: 'ECONNREFUSED' });
    const api = Object.assign(new Error('HTTP 422', { cause: root }), {
      statusCode: 422,
      body: { kind: 'Status', data: { token: SECRET_DATA }, message: 'denied' },
    });
    const outer = new Error('apply failed', { cause: api });
    const { out, lines } = logged((log) => log.error({ err: outer }, 'reconcile failed'));
    const err = lines[0]?.err as {
      type: string;
      message: string;
      stack: string;
      cause: { statusCode: number; body: { message: string; data: string }; cause: { message: string; code: string } };
    };
    assert.equal(err.type, 'Error');
    assert.equal(err.message, 'apply failed');
    assert.match(err.stack, /apply failed/);
    assert.equal(err.cause.statusCode, 422);
    assert.equal(err.cause.body.message, 'denied');
    assert.equal(err.cause.body.data, REDACTED);
    assert.equal(err.cause.cause.code, 'ECONNREFUSED');
    assert.equal(err.cause.cause.message, `connect refused, header Bearer ${REDACTED}`);
    assert.equal(out.includes(JWT), false, out);
    assert.equal(out.includes(SECRET_DATA), false, out);
  });

  it('when a logged object refers to itself, it should log it once and go on', () => {
    const loop: Record<string, unknown> = { name: 'loop' };
    loop.self = loop;
    const err = new Error('cyclic');
    (err as Error & { cause?: unknown }).cause = err;
    const { lines } = logged((log) => log.info({ loop, err }, 'cycle'));
    assert.deepEqual(lines[0]?.loop, { name: 'loop', self: '[Circular]' });
    assert.equal((lines[0]?.err as { cause: unknown }).cause, '[Circular]');
  });
});

describe('createLogger in a process that exits at once', () => {
  /** The lines a process printed that logged through `createLogger(config)` and exited at once, as a component
   * that lost its leadership does (support/src/component.ts), its one pool thread busy as a loaded one's are. */
  function exitingProcessLines(config: string): string[] {
    const script = `
      const { createLogger } = await import(${JSON.stringify(new URL('./logger.js', import.meta.url).href)});
      const log = createLogger(${config});
      log.warn('started');
      await new Promise((r) => setTimeout(r, 50));
      (await import('node:crypto')).pbkdf2('p', 's', 300000, 64, 'sha512', () => {});
      log.error('Stopped leading');
      log.fatal('Lost leadership: exiting');
      process.exit(1);`;
    const run = spawnSync(process.execPath, ['--input-type=module', '-e', script], {
      env: { ...process.env, UV_THREADPOOL_SIZE: '1' },
      encoding: 'utf8',
    });
    assert.equal(run.status, 1, run.stderr);
    return run.stdout
      .trimEnd()
      .split('\n')
      .map((l) => (JSON.parse(l) as { msg: string }).msg);
  }

  it('when a synchronous logger logs its last lines just before process.exit, it should leave them all, in order', () => {
    assert.deepEqual(exitingProcessLines("{ name: 'exiting', level: 'warn', sync: true }"), [
      'started',
      'Stopped leading',
      'Lost leadership: exiting',
    ]);
  });
});

describe('sanitize', () => {
  it('when a value holds no secret, it should come back equal', () => {
    const value = { a: 1, b: [true, null, 'text', { c: 'ok' }], d: '2026-01-01T00:00:00Z', n: undefined };
    assert.deepEqual(sanitize(value), value);
  });

  it('when a key names a credential, whatever its case or spelling, it should redact the value', () => {
    assert.deepEqual(
      sanitize({
        Authorization: 'x',
        'rotated-token': 'y',
        rotatedToken: 'z',
        bearerToken: 'w',
        Password: 'p',
        'set-cookie': ['c'],
        tokens: 3,
      }),
      {
        Authorization: REDACTED,
        'rotated-token': REDACTED,
        rotatedToken: REDACTED,
        bearerToken: REDACTED,
        Password: REDACTED,
        'set-cookie': REDACTED,
        tokens: 3,
      },
    );
  });
});

describe('scrub', () => {
  it('when a string holds a bearer credential, it should mask it and keep the rest', () => {
    assert.equal(scrub('Authorization: Bearer abc.def-ghi'), 'Authorization: Bearer [REDACTED]');
    assert.equal(scrub('https://x/?auth=Bearer%20abc'), 'https://x/?auth=Bearer%20[REDACTED]', 'URL-encoded too');
    assert.equal(scrub('nothing secret'), 'nothing secret');
  });

  it('when a string holds a bootstrap token, it should mask its secret half only, and leave look-alikes alone', () => {
    assert.equal(scrub(`token ${BOOTSTRAP}.`), `token k9f3az.${REDACTED}.`);
    assert.equal(scrub('host abcdef.0123456789abcdefg'), 'host abcdef.0123456789abcdefg', '17 characters: not a token');
    assert.equal(
      scrub('image registry.local:5000/kindling/release:1.36.2'),
      'image registry.local:5000/kindling/release:1.36.2',
    );
  });
});
