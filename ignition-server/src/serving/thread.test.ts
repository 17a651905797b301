import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Payload } from '../payload/payload.js';
import type { SharedPayload } from './messages.js';
import { lookups } from './thread.js';

const KEY = 'a'.repeat(64);

function shared(text: string): SharedPayload {
  const bytes = new SharedArrayBuffer(text.length);
  Buffer.from(bytes).write(text);
  return { key: KEY, minVersion: '3.0.0', joinAt: 0, bytes, offset: 0, length: text.length };
}

/** A main thread whose answers the test gives, one per question asked. */
function mainThread(): {
  ask: (key: string) => Promise<SharedPayload | undefined>;
  asked: string[];
  answer: (p?: SharedPayload) => void;
  fail: (err: Error) => void;
} {
  const asked: string[] = [];
  const waiting: { resolve: (p?: SharedPayload) => void; reject: (err: Error) => void }[] = [];
  return {
    asked,
    ask: (key) => {
      asked.push(key);
      return new Promise((resolve, reject) => waiting.push({ resolve, reject }));
    },
    answer: (p) => waiting.shift()?.resolve(p),
    fail: (err) => waiting.shift()?.reject(err),
  };
}

describe("a serving thread's lookups", () => {
  it('when many requests miss the same payload at once, it should ask the main thread once and answer them all', async () => {
    const main = mainThread();
    const lookup = lookups(new Map(), main.ask);
    const waiting = Array.from({ length: 20 }, () => lookup(KEY));
    main.answer(shared('payload'));
    const found = await Promise.all(waiting);
    assert.deepEqual(main.asked, [KEY]);
    assert.ok(found.every((p) => p?.tail.toString() === 'payload'));
  });

  it("when the payload reached this thread's memory meanwhile, it should answer with that copy", async () => {
    const main = mainThread();
    const held: Payload = { key: KEY, minVersion: '3.0.0', joinAt: 0, tail: Buffer.from('held') };
    const payloads = new Map<string, Payload>();
    const lookup = lookups(payloads, main.ask);
    const waiting = lookup(KEY);
    payloads.set(KEY, held);
    main.answer(shared('read back'));
    assert.equal(await waiting, held);
  });

  it('when a question was answered, the next miss should ask again', async () => {
    const main = mainThread();
    const lookup = lookups(new Map(), main.ask);
    const first = lookup(KEY);
    main.answer(undefined);
    assert.equal(await first, undefined);
    const second = lookup(KEY);
    main.answer(shared('now'));
    assert.equal((await second)?.tail.toString(), 'now');
    assert.deepEqual(main.asked, [KEY, KEY]);
  });

  it('when the main thread fails to answer, every request waiting on the question should see the failure', async () => {
    const main = mainThread();
    const lookup = lookups(new Map(), main.ask);
    const waiting = [lookup(KEY), lookup(KEY)];
    main.fail(new Error('no answer'));
    for (const w of waiting) await assert.rejects(w, /no answer/);
  });
});
