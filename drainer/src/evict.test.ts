import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import * as k8s from '#k8s';
import { parsePdbRefusal } from './evict.js';

/** An error as client-node throws it for an apiserver Status (the body is the Status JSON, as received). */
const apiError = (code: number, status: object): k8s.ApiException<string> =>
  new k8s.ApiException(
    code,
    `HTTP-Code: ${code}`,
    JSON.stringify({ kind: 'Status', apiVersion: 'v1', status: 'Failure', code, ...status }),
    {},
  );
const refused = (cause: string): k8s.ApiException<string> =>
  apiError(429, {
    reason: 'TooManyRequests',
    message: "Cannot evict pod as it would violate the pod's disruption budget.",
    details: { causes: [{ reason: 'DisruptionBudget', message: cause }] },
  });

describe('parsePdbRefusal', () => {
  it('when the apiserver refuses for want of healthy pods, it should name the budget in the pod namespace with disruptionsAllowed 0', () => {
    assert.deepEqual(
      parsePdbRefusal(refused('The disruption budget web needs 3 healthy pods and has 3 currently'), 'shop'),
      {
        pdb: 'shop/web',
        disruptionsAllowed: 0,
        detail: 'needs 3 healthy pods and has 3 currently',
      },
    );
  });

  it('when the budget failed to sync or gives another reason, it should still name it (disruptionsAllowed is 0 for every such refusal)', () => {
    const refusal = parsePdbRefusal(
      refused('The disruption budget db does not allow evicting pods currently because it failed sync: no controller'),
      'data',
    );
    assert.deepEqual(refusal, {
      pdb: 'data/db',
      disruptionsAllowed: 0,
      detail: 'does not allow evicting pods currently because it failed sync: no controller',
    });
  });

  it('when the disruption controller has not processed the budget yet, it should name it without claiming a disruptionsAllowed', () => {
    assert.deepEqual(
      parsePdbRefusal(refused('The disruption budget web is still being processed by the server.'), 'shop'),
      {
        pdb: 'shop/web',
        detail: 'is still being processed by the server',
      },
    );
  });

  it('when a 429 is throttling (no DisruptionBudget cause), or the error is not a 429, it should be no refusal by a budget', () => {
    assert.equal(
      parsePdbRefusal(
        apiError(429, { reason: 'TooManyRequests', message: 'too many requests, please try again later' }),
        'shop',
      ),
      undefined,
    );
    assert.equal(
      parsePdbRefusal(
        apiError(500, {
          message: 'This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.',
        }),
        'shop',
      ),
      undefined,
    );
    assert.equal(parsePdbRefusal(new Error('socket hang up'), 'shop'), undefined);
    assert.equal(parsePdbRefusal(new k8s.ApiException(429, 'x', 'not json', {}), 'shop'), undefined);
  });
});
