/**
 * A watch for test observers that must not miss a window: started again whenever the server ends it (or its
 * start fails, a second later) until stopped. Each start lists first, so the observer sees ADDED for every
 * object still there and misses no state a reconnect would skip.
 */
import * as k8s from '#k8s';

const RETRY_MS = 1000;

export class RestartingWatch<T extends k8s.KubernetesObject> {
  readonly #kc: k8s.KubeConfig;
  readonly #path: string;
  readonly #query: Record<string, string>;
  readonly #onEvent: (type: string, object: T) => void;
  #request: { abort(): void } | undefined;
  #stopped = false;

  constructor(
    kc: k8s.KubeConfig,
    path: string,
    query: Record<string, string>,
    onEvent: (type: string, object: T) => void,
  ) {
    this.#kc = kc;
    this.#path = path;
    this.#query = query;
    this.#onEvent = onEvent;
  }

  /** Resolves once the first watch is open; a failure of that first one is the caller's. */
  async start(): Promise<void> {
    const again = (): void => {
      if (!this.#stopped) this.start().catch(() => setTimeout(again, RETRY_MS));
    };
    const request = await new k8s.Watch(this.#kc).watch(
      this.#path,
      this.#query,
      (type: string, object: T) => this.#onEvent(type, object),
      again,
    );
    // Stopped while the watch was opening: nothing else will end it.
    if (this.#stopped) request.abort();
    this.#request = request;
  }

  stop(): void {
    this.#stopped = true;
    this.#request?.abort();
  }
}
