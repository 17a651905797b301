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

  /**
   * Runs `apply` (the namespace's references worked out again) when `pool`'s references as of `event` differ
   * from those recorded (a deleted pool references none), and records them only once it succeeded: one that
   * threw is tried again at the pool's next event.
   */
  onChange(pool: NodePool, event: InformerEvent, apply: () => void): void {
    const key = keyString(keyOf(pool));
    const refs = event === 'delete' ? [] : [...this.#of(pool)].sort();
    // JSON, not a joined string: names are the tenant's, and `a` + `b` must not read as one name `a\nb`.
    const now = refs.length === 0 ? '' : JSON.stringify(refs);
    if (now === (this.#byPool.get(key) ?? '')) return;
    apply();
    if (now === '') this.#byPool.delete(key);
    else this.#byPool.set(key, now);
  }
}
