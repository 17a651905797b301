import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { answerFor, HALTED_RETRY_MAX_SECONDS, superseded } from './update-answer.js';

describe('how UpdateMachine answers Cluster API', () => {
  it('when a node stays Degraded towards the target, it should answer Success with a retryAfterSeconds that doubles up to the cap, never a Failure Cluster API calls again at once', () => {
    const answers = [0, 1, 2, 3, 4, 5, 40].map((attempt) =>
      answerFor({ state: 'halted', attempt, message: 'Node n1: health check failed' }, 5),
    );
    assert.deepEqual(
      answers.map((a) => [a.status, a.retryAfterSeconds]),
      [
        ['Success', 5],
        ['Success', 10],
        ['Success', 20],
        ['Success', 40],
        ['Success', 80],
        ['Success', HALTED_RETRY_MAX_SECONDS],
        ['Success', HALTED_RETRY_MAX_SECONDS],
      ],
    );
    assert.equal(answers[0]?.message, 'Node n1: health check failed');
  });

  it('when the update moves on, is done or cannot be acted on, it should answer as before: Success 5, Success 0, Failure 0', () => {
    assert.deepEqual(answerFor({ state: 'in-progress', message: 'm' }, 5), {
      status: 'Success',
      retryAfterSeconds: 5,
      message: 'm',
    });
    assert.deepEqual(answerFor({ state: 'done', message: 'm' }, 5), {
      status: 'Success',
      retryAfterSeconds: 0,
      message: 'm',
    });
    assert.deepEqual(answerFor({ state: 'failed', message: 'm' }, 5), {
      status: 'Failure',
      retryAfterSeconds: 0,
      message: 'm',
    });
  });
});

describe('when an update Cluster API asks for is superseded', () => {
  it('when the MachineDeployment names another hash and the node failed on the target or was never handed it, it should be superseded', () => {
    assert.equal(superseded('broken', 'good', 'degraded'), true);
    assert.equal(superseded('broken', 'good', 'idle'), true);
  });

  it('when the node is still working towards the target, is done, or the MachineDeployment names the target or nothing, it should not count the update as superseded', () => {
    assert.equal(superseded('broken', 'good', 'updating'), false);
    assert.equal(superseded('broken', 'good', 'done'), false);
    assert.equal(superseded('broken', 'broken', 'degraded'), false);
    assert.equal(superseded('broken', undefined, 'degraded'), false);
  });
});
