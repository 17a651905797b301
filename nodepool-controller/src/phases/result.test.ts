import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { NotReadyError } from '../../../support/src/errors.js';
import { AwaitingAnswer, combine, CONTINUE, NO_OUTCOME, requeueAfter, type PhaseResult } from './result.js';

const fold = (results: PhaseResult[]): ReturnType<typeof combine> => results.reduce(combine, NO_OUTCOME);

describe("folding the phases' results", () => {
  it('when every phase continues, it should ask for nothing', () => {
    assert.deepEqual(fold([CONTINUE, CONTINUE]), { stopped: false });
  });

  it('when phases ask to be requeued at different times, the earliest should win', () => {
    assert.equal(fold([requeueAfter(10_000), CONTINUE, requeueAfter(500), requeueAfter(3_000)]).requeueAfterMs, 500);
  });

  it('when a phase is not ready, it should keep the first not-ready and the requeues beside it', () => {
    const first = new NotReadyError('waiting for the token');
    const out = fold([
      requeueAfter(2_000),
      { kind: 'notReady', error: first },
      { kind: 'notReady', error: new NotReadyError('later') },
    ]);
    assert.equal(out.notReady, first);
    assert.equal(out.requeueAfterMs, 2_000);
    assert.equal(out.stopped, false);
  });

  it('when a later phase reports another not-ready after an awaited answer, it should not say every not-ready awaits an answer', () => {
    const awaiting = new AwaitingAnswer('waiting for the token just asked for');
    const out = fold([
      { kind: 'notReady', error: awaiting },
      { kind: 'notReady', error: new NotReadyError('a cache not read yet') },
    ]);
    assert.equal(out.notReady, awaiting);
    assert.equal(out.allAwaiting, false);
  });

  it('when every not-ready awaits an answer, it should say so', () => {
    const out = fold([
      { kind: 'notReady', error: new AwaitingAnswer('the token') },
      { kind: 'notReady', error: new AwaitingAnswer('the verdict') },
    ]);
    assert.equal(out.allAwaiting, true);
  });

  it('when a phase stops with a time to look again, it should stop the writing phases and requeue then', () => {
    assert.deepEqual(fold([{ kind: 'stop', afterMs: 4_500 }, requeueAfter(10_000)]), {
      stopped: true,
      requeueAfterMs: 4_500,
    });
  });

  it('when a phase stops without a time, it should stop and keep the other requeues', () => {
    assert.deepEqual(fold([requeueAfter(10_000), { kind: 'stop' }]), { stopped: true, requeueAfterMs: 10_000 });
  });
});
