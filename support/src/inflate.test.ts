import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { gzipSync } from 'node:zlib';
import { InflateBudget, InflateLimitError, InvalidGzipError } from './inflate.js';

const MIB = 1024 * 1024;
/** 700 MiB of zeros: under 1 MiB of gzip. */
const bomb = (): Buffer => {
  const zeros = Buffer.alloc(64 * MIB);
  const one = gzipSync(zeros, { level: 9 });
  // Concatenated gzip members inflate as one stream: 11 of them hold 704 MiB.
  return Buffer.concat(Array.from({ length: 11 }, () => one));
};

describe('InflateBudget', () => {
  it('when a gzip bomb is inflated, it should stop at the limit and name the sizes', async () => {
    const raw = bomb();
    assert.ok(raw.length < MIB);
    const before = process.memoryUsage().rss;
    await assert.rejects(new InflateBudget(64 * MIB).gunzip(raw, 'files of MachineConfig bomb'), (err) => {
      assert.ok(err instanceof InflateLimitError);
      assert.equal(err.message, 'files of MachineConfig bomb inflates past the limit of 64 MiB');
      return true;
    });
    assert.throws(() => new InflateBudget(64 * MIB).gunzipSync(raw, 'x'), InflateLimitError);
    assert.ok(process.memoryUsage().rss - before < 400 * MIB, 'never inflated the whole bomb');
  });

  it('when the contents inflate to exactly the limit, it should accept them', async () => {
    const raw = gzipSync(Buffer.alloc(MIB, 'a'));
    assert.equal((await new InflateBudget(MIB).gunzip(raw, 'x')).length, MIB);
    assert.equal(new InflateBudget(MIB).gunzipSync(raw, 'x').length, MIB);
  });

  it('when several files each fit but their sum does not, it should refuse the one that passes the sum', async () => {
    const budget = new InflateBudget(3 * MIB);
    const raw = gzipSync(Buffer.alloc(MIB));
    await budget.gunzip(raw, 'file a');
    budget.spend(MIB, 'file b');
    assert.throws(() => budget.gunzipSync(Buffer.concat([raw, raw]), 'file c'), {
      message: 'file c inflates past the limit of 3 MiB (2 MiB of it already taken before it)',
    });
    assert.equal(budget.used, 2 * MIB);
  });

  it('when the bytes are not gzip, it should say so rather than blame the budget', async () => {
    await assert.rejects(new InflateBudget(MIB).gunzip(Buffer.from('plain'), 'file a'), InvalidGzipError);
  });
});

describe('InflateBudget.count', () => {
  it('when a gzip bomb is counted, it should stop at the limit without holding what it inflated', async () => {
    const budget = new InflateBudget(64 * MIB);
    await assert.rejects(budget.count(bomb(), 'MachineConfig bomb (storage.files[/etc/zeros])'), {
      name: 'InflateLimitError',
      message: 'MachineConfig bomb (storage.files[/etc/zeros]) inflates past the limit of 64 MiB',
    });
  });

  it('when files are counted one after another, it should hold them to one sum', async () => {
    const budget = new InflateBudget(2 * MIB);
    const raw = gzipSync(Buffer.alloc(MIB));
    await budget.count(raw, 'a');
    await budget.count(raw, 'b');
    assert.equal(budget.used, 2 * MIB);
    await assert.rejects(budget.count(gzipSync('x'), 'c'), { message: /^c inflates past the limit of 2 MiB/ });
    await assert.rejects(new InflateBudget(MIB).count(Buffer.from('plain'), 'd'), InvalidGzipError);
  });
});
