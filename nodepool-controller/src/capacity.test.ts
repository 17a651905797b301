import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { ANNOTATIONS } from '../../api/src/keys.js';
import { keepLiveCapacity } from './capacity.js';

describe('capacity kept over a failed template read', () => {
  const computed = { annotations: {}, message: 'LocalMachineTemplate t cannot be read (timeout)' };

  it('when the template cannot be read and the child carries capacity, it should keep that capacity with the message', () => {
    const live = {
      [ANNOTATIONS.autoscalerCapacityCpu]: '4',
      [ANNOTATIONS.autoscalerCapacityMemory]: '16G',
      other: 'x',
    };
    assert.deepEqual(keepLiveCapacity(computed, live), {
      ...computed,
      annotations: { [ANNOTATIONS.autoscalerCapacityCpu]: '4', [ANNOTATIONS.autoscalerCapacityMemory]: '16G' },
    });
  });

  it('when the child carries no capacity, it should leave what was computed', () => {
    assert.deepEqual(keepLiveCapacity(computed, { other: 'x' }), computed);
    assert.equal(keepLiveCapacity(undefined, {}), undefined);
  });
});
