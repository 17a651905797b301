import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { NodePool } from '../../api/src/nodepool.js';
import type { InformerEvent } from '../../support/src/informer.js';
import { PoolReferences } from './pool-references.js';

const pool = (name: string, config: string[], generation = 1): NodePool =>
  ({
    metadata: { name, namespace: 'tenant', generation },
    spec: { config: config.map((c) => ({ name: c })) },
  }) as unknown as NodePool;

const names = (p: NodePool): string[] => (p.spec.config ?? []).map((c) => c.name);

/** Whether the event made the namespace's references be worked out again. */
function changed(refs: PoolReferences, p: NodePool, e: InformerEvent): boolean {
  let applied = false;
  refs.onChange(p, e, () => void (applied = true));
  return applied;
}

describe('PoolReferences', () => {
  it('when a pool that references nothing comes and changes, it should say nothing changed', () => {
    const refs = new PoolReferences(names);
    assert.equal(changed(refs, pool('a', []), 'add'), false);
    assert.equal(changed(refs, pool('a', [], 2), 'update'), false);
    assert.equal(changed(refs, pool('a', []), 'delete'), false);
  });

  it('when a pool comes with references, it should say they changed once, not on its later events', () => {
    const refs = new PoolReferences(names);
    assert.equal(changed(refs, pool('a', ['x', 'y']), 'add'), true);
    assert.equal(changed(refs, pool('a', ['y', 'x'], 2), 'update'), false, 'the same names in another order');
    assert.equal(changed(refs, pool('a', ['x', 'y']), 'resync'), false);
  });

  it('when a pool names another object, lets go of one, or goes, it should say they changed', () => {
    const refs = new PoolReferences(names);
    changed(refs, pool('a', ['x']), 'add');
    assert.equal(changed(refs, pool('a', ['x', 'z']), 'update'), true);
    assert.equal(changed(refs, pool('a', ['z']), 'update'), true);
    assert.equal(changed(refs, pool('a', ['z']), 'delete'), true);
    assert.equal(changed(refs, pool('a', ['z']), 'add'), true, 'a pool of the same name again');
  });

  it('when two pools name the same object, it should keep each pool apart', () => {
    const refs = new PoolReferences(names);
    assert.equal(changed(refs, pool('a', ['x']), 'add'), true);
    assert.equal(changed(refs, pool('b', ['x']), 'add'), true);
    assert.equal(changed(refs, pool('a', ['x']), 'delete'), true);
    assert.equal(changed(refs, pool('b', ['x']), 'update'), false);
  });

  it('when two names would join into one (a name holding a newline), it should still see the change', () => {
    const refs = new PoolReferences(names);
    changed(refs, pool('a', ['x', 'y']), 'add');
    assert.equal(changed(refs, pool('a', ['x\ny']), 'update'), true);
  });

  it("when working out the references again fails, it should try again at the pool's next event", () => {
    const refs = new PoolReferences(names);
    assert.throws(() =>
      refs.onChange(pool('a', ['x']), 'add', () => {
        throw new Error('watch could not start');
      }),
    );
    assert.equal(changed(refs, pool('a', ['x']), 'resync'), true);
    assert.equal(changed(refs, pool('a', ['x']), 'resync'), false);
  });
});
