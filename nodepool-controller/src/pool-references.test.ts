import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { NodePool } from '../../api/src/nodepool.js';
import { PoolReferences } from './pool-references.js';

const pool = (name: string, config: string[], generation = 1): NodePool =>
  ({
    metadata: { name, namespace: 'tenant', generation },
    spec: { config: config.map((c) => ({ name: c })) },
  }) as unknown as NodePool;

const names = (p: NodePool): string[] => (p.spec.config ?? []).map((c) => c.name);

describe('PoolReferences', () => {
  it('when a pool that references nothing comes and changes, it should say nothing changed', () => {
    const refs = new PoolReferences(names);
    assert.equal(refs.changed(pool('a', []), 'add'), false);
    assert.equal(refs.changed(pool('a', [], 2), 'update'), false);
    assert.equal(refs.changed(pool('a', []), 'delete'), false);
  });

  it('when a pool comes with references, it should say they changed once, not on its later events', () => {
    const refs = new PoolReferences(names);
    assert.equal(refs.changed(pool('a', ['x', 'y']), 'add'), true);
    assert.equal(refs.changed(pool('a', ['y', 'x'], 2), 'update'), false, 'the same names in another order');
    assert.equal(refs.changed(pool('a', ['x', 'y']), 'resync'), false);
  });

  it('when a pool names another object, lets go of one, or goes, it should say they changed', () => {
    const refs = new PoolReferences(names);
    refs.changed(pool('a', ['x']), 'add');
    assert.equal(refs.changed(pool('a', ['x', 'z']), 'update'), true);
    assert.equal(refs.changed(pool('a', ['z']), 'update'), true);
    assert.equal(refs.changed(pool('a', ['z']), 'delete'), true);
    assert.equal(refs.changed(pool('a', ['z']), 'add'), true, 'a pool of the same name again');
  });

  it('when two pools name the same object, it should keep each pool apart', () => {
    const refs = new PoolReferences(names);
    assert.equal(refs.changed(pool('a', ['x']), 'add'), true);
    assert.equal(refs.changed(pool('b', ['x']), 'add'), true);
    assert.equal(refs.changed(pool('a', ['x']), 'delete'), true);
    assert.equal(refs.changed(pool('b', ['x']), 'update'), false);
  });
});
