/**
 * The watch echo of the controller's own writes. Every apply comes back through its informer as an add or an
 * update carrying exactly the object the apply returned; the reconcile that wrote it already saw that object
 * (the OverlayCache hands it to the rest of that reconcile), so waking the pool for it again only repeats a
 * reconcile that writes nothing: at a thousand new pools, three of every five reconciles.
 *
 * An event is the controller's own echo only when its resourceVersion is the very one a write of the
 * controller's returned for that object; anything else (someone else's change, a relist, a delete) wakes the
 * pool. An event that arrives while a write to the same object is still on its way (the watch can be faster
 * than the write's answer) is held until that answer says whose it was, so a change of someone else's landing
 * with a write of ours is never taken for our echo, and one of ours is not mistaken for news.
 */
import type * as k8s from '#k8s';
import type { InformerEvent } from '../../support/src/informer.js';

/** What the controller knows about one object's writes. */
interface Tracked {
  /** Writes to it still waiting for their answer. */
  inFlight: number;
  /** The resourceVersions our answered writes returned (a reconcile may write the object twice: its finalizer,
   * then its status), each until its echo arrives or the watch passes it. */
  ownVersions: string[];
  /** Events held until the writes in flight answer: their resourceVersion, and what waking them does. */
  held: { version: string; wake: () => void }[];
  /**
   * A write failed since the last that answered. It may have been applied all the same (a timeout, a reset), and
   * the retry's answer, changing nothing then, carries the version of whatever came last, maybe someone else's
   * change still on its way: that answer is not taken for an echo.
   */
  failed: boolean;
}

/** Versions awaited per object at most: a write that changes nothing brings no echo to clear its own. */
const MAX_OWN_VERSIONS = 4;

/** etcd resourceVersions are integers in practice; only used to forget an echo the watch has gone past. */
const versionNumber = (version: string | undefined): number => Number(version ?? 0) || 0;

const versionOf = (obj: k8s.KubernetesObject | undefined): string => obj?.metadata?.resourceVersion ?? '';

export class OwnWrites {
  readonly #objects = new Map<string, Tracked>();

  /**
   * Runs `write` (an apply to `obj`, of kind `kind`); its answer's resourceVersion becomes an echo to skip,
   * unless `wakeOnEcho` (a write whose result the writing reconcile did not read back: the next one must).
   */
  async track<T extends k8s.KubernetesObject>(
    kind: string,
    obj: k8s.KubernetesObject,
    write: () => Promise<T>,
    wakeOnEcho = false,
  ): Promise<T> {
    const id = idOf(kind, obj);
    const tracked = this.#objects.get(id) ?? { inFlight: 0, ownVersions: [], held: [], failed: false };
    this.#objects.set(id, tracked);
    tracked.inFlight++;
    let answer: T | undefined;
    try {
      answer = await write();
      return answer;
    } finally {
      tracked.inFlight--;
      if (answer === undefined) tracked.failed = true;
      else this.#answered(tracked, versionOf(answer), wakeOnEcho);
      this.#release(id, tracked);
    }
  }

  #answered(tracked: Tracked, version: string, wakeOnEcho: boolean): void {
    const trusted = !wakeOnEcho && !tracked.failed;
    tracked.failed = false;
    if (trusted && !tracked.ownVersions.includes(version))
      tracked.ownVersions = [...tracked.ownVersions.slice(1 - MAX_OWN_VERSIONS), version];
  }

  /**
   * Whether an informer event wakes its pool now (true), or not now: it is our own echo, or it is held while
   * writes to the object are in flight and `later` is called once they answered if it proved not to be ours.
   */
  route(kind: string, obj: k8s.KubernetesObject, event: InformerEvent, later: () => void): boolean {
    const id = idOf(kind, obj);
    const tracked = this.#objects.get(id);
    if (tracked === undefined || event === 'resync') return true;
    if (event === 'delete') {
      this.#objects.delete(id);
      tracked.held.splice(0).forEach((h) => h.wake());
      return true;
    }
    if (tracked.inFlight === 0) return !this.#isEcho(id, tracked, versionOf(obj));
    tracked.held.push({ version: versionOf(obj), wake: later });
    return false;
  }

  /** Objects with a write in flight, an echo awaited, events held or a failed write: the unit tests' measure of
   * leaks. */
  get size(): number {
    return this.#objects.size;
  }

  /** The writes in flight answered: each held event is our echo or wakes. */
  #release(id: string, tracked: Tracked): void {
    if (tracked.inFlight > 0) return;
    const held = tracked.held.splice(0);
    for (const h of held) if (!this.#isEcho(id, tracked, h.version)) h.wake();
    if (tracked.ownVersions.length === 0) this.#drop(id, tracked);
  }

  /** Forgets the object, unless a delete already did and a newer write tracks it again, or a write of it failed. */
  #drop(id: string, tracked: Tracked): void {
    if (this.#objects.get(id) === tracked && !tracked.failed) this.#objects.delete(id);
  }

  /** An event at `version` is our echo when one of our writes returned it. The versions it passes will bring no
   * echo any more (a write that changed nothing brings none, and the watch is in order): forgotten. */
  #isEcho(id: string, tracked: Tracked, version: string): boolean {
    const echo = tracked.ownVersions.includes(version);
    const at = versionNumber(version);
    tracked.ownVersions = tracked.ownVersions.filter((own) => own !== version && versionNumber(own) > at);
    if (tracked.ownVersions.length === 0 && tracked.inFlight === 0) this.#drop(id, tracked);
    return echo;
  }
}

const idOf = (kind: string, obj: k8s.KubernetesObject): string =>
  `${kind}/${obj.metadata?.namespace ?? ''}/${obj.metadata?.name ?? ''}`;
