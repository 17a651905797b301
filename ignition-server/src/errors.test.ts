import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { HttpError, IGNITION_ERRORS, type ErrorSpec, type IgnitionErrorCode } from './errors.js';

/** docs/errors.md (this module runs from dist/ignition-server/src/). */
const ERRORS_DOC = fileURLToPath(new URL('../../../docs/errors.md', import.meta.url));

/** The rows of the doc's table: `| \`CODE\` | status | message | what to do |`. */
function documented(): Map<string, ErrorSpec & { advice: string }> {
  const rows = new Map<string, ErrorSpec & { advice: string }>();
  for (const line of readFileSync(ERRORS_DOC, 'utf8').split('\n')) {
    const m = /^\| `([A-Z_]+)` \| (\d{3}) \| ([^|]+?) \| ([^|]*?) \|$/.exec(line);
    if (!m) continue;
    assert.ok(!rows.has(m[1] as string), `${m[1]} is listed twice in docs/errors.md`);
    rows.set(m[1] as string, { status: Number(m[2]), message: m[3] as string, advice: m[4] as string });
  }
  return rows;
}

describe('error registry', () => {
  it('when the registry and docs/errors.md are compared, it should find every code in both, with the same status and message and some advice', () => {
    const docs = documented();
    const codes = Object.keys(IGNITION_ERRORS) as IgnitionErrorCode[];
    assert.deepEqual(
      [...docs.keys()].sort(),
      [...codes].sort(),
      'the codes of docs/errors.md and ignition-server/src/errors.ts',
    );
    for (const code of codes) {
      const row = docs.get(code);
      assert.equal(row?.status, IGNITION_ERRORS[code].status, `${code}: status`);
      assert.equal(row?.message, IGNITION_ERRORS[code].message, `${code}: message`);
      assert.ok((row?.advice.length ?? 0) > 20, `${code}: what to do`);
    }
  });

  it('when a code is thrown, it should answer with its status, the code in the header and as the first word of the body, and a challenge only on 401', () => {
    const revoked = new HttpError('IGN_TOKEN_REVOKED');
    assert.equal(revoked.status, 401);
    assert.equal(revoked.headers['kindling-error'], 'IGN_TOKEN_REVOKED');
    assert.match(revoked.headers['www-authenticate'] ?? '', /^Bearer /);
    assert.equal(revoked.body, 'IGN_TOKEN_REVOKED: token revoked or unknown\n');
    const old = new HttpError('IGN_SPEC_TOO_OLD', '3.4.0 or newer');
    assert.equal(old.status, 406);
    assert.equal(old.headers['www-authenticate'], undefined);
    assert.equal(old.body, `IGN_SPEC_TOO_OLD: ${IGNITION_ERRORS.IGN_SPEC_TOO_OLD.message} (3.4.0 or newer)\n`);
  });

  it('when codes are listed, it should give each a distinct message, so a body alone names its cause', () => {
    const messages = Object.values(IGNITION_ERRORS).map((e) => e.message);
    assert.equal(new Set(messages).size, messages.length);
  });
});
