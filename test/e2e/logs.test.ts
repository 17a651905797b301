import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { createLogger } from '../../support/src/logger.js';
import { createTokenAuthority } from '../../ignition-server/src/tokens.js';
import { ecKeyPem } from '../../ignition-server/testing/index.js';
import { describeFindings, scanLogs } from './logs.js';

const BOOTSTRAP = 'k9f3az.0h4x8q2m7c1v5b6n';

async function mint(pool: string): Promise<string> {
  const authority = await createTokenAuthority(ecKeyPem());
  return (await authority.mint({ pool, hash: 'abc', ttlMs: 3_600_000 })).token;
}

/** What a component would log about a token Secret, an API error and a request, as JSON lines. */
function componentLines(token: string): { logged: string; raw: string } {
  const lines: string[] = [];
  const log = createLogger({
    name: 'c',
    destination: new Writable({
      write(chunk: Buffer, _e, cb) {
        lines.push(chunk.toString());
        cb();
      },
    }),
  });
  const secret = {
    metadata: { name: 'p-abc', namespace: 'tenants' },
    data: { token: Buffer.from(token).toString('base64') },
    stringData: { token },
  };
  const err = new Error('apply failed', {
    cause: Object.assign(new Error(`401 for Bearer ${token}`), { body: { secret } }),
  });
  const entries: [Record<string, unknown>, string][] = [
    [{ secret }, 'token Secret'],
    [{ err }, 'reconcile failed'],
    [
      { headers: { authorization: `Bearer ${token}` }, join: `kubeadm join --token ${BOOTSTRAP}` },
      `fetched with ${token}`,
    ],
  ];
  for (const [obj, msg] of entries) log.info(obj, msg);
  const raw = entries
    .map(([obj, msg]) => JSON.stringify({ ...obj, err: { message: err.message, cause: String(err.cause) }, msg }))
    .join('\n');
  return { logged: lines.join(''), raw };
}

describe('scanLogs', () => {
  let dir: string;
  before(async () => (dir = await mkdtemp(join(tmpdir(), 'logscan-'))));
  after(() => rm(dir, { recursive: true, force: true }));

  it("when a log, at any depth of the folder, holds a token of the run, a bootstrap token or a stranger's JWT, it should name each file and line", async () => {
    const root = join(dir, 'findings');
    await mkdir(join(root, 'agents'), { recursive: true });
    const [ours, stranger] = [await mint('tenants/inplace'), await mint('other/pool')];
    await writeFile(join(root, 'ignition-server.log'), `{"msg":"Request","status":200}\n{"msg":"got ${stranger}"}\n`);
    await writeFile(join(root, 'agents', 'node-1.log'), `{"msg":"start"}\n{"msg":"start"}\n{"token":"${ours}"}\n`);
    await writeFile(join(root, 'agents', 'node-2.log'), `joined with ${BOOTSTRAP}\n`);
    await writeFile(join(root, 'drainer.log'), `{"msg":"Bearer [REDACTED]","token":"[REDACTED]"}\n`);
    const scan = await scanLogs(root, [ours, BOOTSTRAP, '']);
    assert.deepEqual(scan.files, ['agents/node-1.log', 'agents/node-2.log', 'drainer.log', 'ignition-server.log']);
    assert.deepEqual(scan.findings, [
      { file: 'agents/node-1.log', line: 3, what: 'a token value of the run' },
      { file: 'agents/node-2.log', line: 1, what: 'a token value of the run' },
      { file: 'ignition-server.log', line: 2, what: 'a JWT-shaped string' },
    ]);
    const text = describeFindings(scan.findings);
    assert.match(text, /^agents\/node-1\.log:3: a token value of the run$/m);
    assert.ok(!text.includes(ours) && !text.includes(BOOTSTRAP), 'the report never repeats a secret');
  });

  it("when the components' own logger wrote the lines, it should find nothing; the same objects written raw it should find", async () => {
    const token = await mint('tenants/inplace');
    const { logged, raw } = componentLines(token);
    await mkdir(join(dir, 'logger'));
    await writeFile(join(dir, 'logger', 'component.log'), logged);
    const clean = await scanLogs(join(dir, 'logger'), [token, BOOTSTRAP]);
    assert.deepEqual(clean.findings, [], describeFindings(clean.findings));
    await mkdir(join(dir, 'raw'));
    await writeFile(join(dir, 'raw', 'component.log'), raw);
    const dirty = await scanLogs(join(dir, 'raw'), [token, BOOTSTRAP]);
    assert.equal(dirty.findings.length, 3, describeFindings(dirty.findings));
  });
});
