import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { pickZone, type LocalMachine } from './local-machine.js';

const lm = (name: string, zone?: string): LocalMachine => ({
  metadata: { name, namespace: 'ns' },
  spec: zone === undefined ? {} : { failureDomain: zone },
});

describe('pickZone', () => {
  it('when the template names no zones, it should pick none', () => {
    assert.equal(pickZone([], [], 'a'), undefined);
  });

  it('when siblings already fill some zones, it should pick the least used one', () => {
    assert.equal(pickZone(['a', 'b', 'c'], [lm('x', 'a'), lm('y', 'b')], 'z'), 'c');
  });

  it('when several hosts choose at the same moment, it should spread them by name order', () => {
    const picks = ['m1', 'm2', 'm3'].map((self, _i, all) =>
      pickZone(
        ['a', 'b'],
        all.filter((n) => n !== self).map((n) => lm(n)),
        self,
      ),
    );
    assert.deepEqual(picks, ['a', 'b', 'a']);
  });
});
