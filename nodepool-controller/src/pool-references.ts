/**
 * What each pool references beyond its children (the ConfigMaps it names, the template it reads), as its last
 * event showed it: a pool's event changes what its namespace references only when that pool's own references
 * changed. Most pool events are a status or a finalizer; working out the namespace's references again on each
 * scanned every pool of the namespace, twice, quadratic in the pools over a thousand pools' convergence.
 */
import type { NodePool } from '../../api/src/nodepool.js';
import type { InformerEvent } from '../../support/src/informer.js';
import { keyOf, keyString } from '../../support/src/object-key.js';

export class PoolReferences {
  readonly #of: (pool: NodePool) => readonly string[];
  /** By pool key; a pool that references nothing has no entry. */
  readonly #byPool = new Map<string, string>();

  constructor(of: (pool: NodePool) => readonly string[]) {
    this.#of = of;
  }

  /** Records `pool`'s references as of `event` (a deleted pool references nothing): whether they changed. */
  changed(pool: NodePool, event: InformerEvent): boolean {
    const key = keyString(keyOf(pool));
    const now = event === 'delete' ? '' : [...this.#of(pool)].sort().join('\n');
    if (now === (this.#byPool.get(key) ?? '')) return false;
    if (now === '') this.#byPool.delete(key);
    else this.#byPool.set(key, now);
    return true;
  }
}
