/**
 * A TCP proxy in front of a test-bed apiserver that breaks the link the way networks and restarts do, so
 * clients are tested against the real apiserver under faults: `pass` forwards; `flap` cuts every connection a
 * while after it opened (a watch that connects and breaks at once); `down` cuts every connection and resets
 * new ones (an apiserver that went away). TLS passes through untouched: the serving certificate names
 * 127.0.0.1, whatever the port.
 */
import { connect, createServer, type Server, type Socket } from 'node:net';
import * as k8s from '#k8s';
import type { Cluster } from './cluster.js';

export type FaultMode = { kind: 'pass' } | { kind: 'flap'; cutAfterMs: number } | { kind: 'down' };

export class FaultProxy {
  /** Client connections accepted since the start. */
  accepted = 0;
  #server: Server;
  #port = 0;
  #target: URL;
  #mode: FaultMode = { kind: 'pass' };
  #open = new Set<Socket>();

  private constructor(target: URL) {
    this.#target = target;
    this.#server = createServer((client) => this.#accept(client));
  }

  static async start(target: string): Promise<FaultProxy> {
    const proxy = new FaultProxy(new URL(target));
    await new Promise<void>((resolve) => proxy.#server.listen(0, '127.0.0.1', resolve));
    proxy.#port = (proxy.#server.address() as { port: number }).port;
    return proxy;
  }

  get url(): string {
    return `https://127.0.0.1:${this.#port}`;
  }

  /** Client connections open now. */
  get open(): number {
    return this.#open.size;
  }

  /** A fault applies to the connections open now as well: `flap` and `down` cut them at once. */
  set mode(mode: FaultMode) {
    this.#mode = mode;
    if (mode.kind !== 'pass') for (const socket of this.#open) socket.destroy();
  }

  /** The cluster's admin kubeconfig, reaching it through this proxy. */
  kubeConfigFor(cluster: Cluster): k8s.KubeConfig {
    const kc = new k8s.KubeConfig();
    kc.loadFromString(cluster.kubeconfigYaml);
    const clusters = kc.clusters.map((c) => ({ ...c, server: this.url }));
    kc.loadFromOptions({ clusters, users: kc.users, contexts: kc.contexts, currentContext: kc.currentContext });
    return kc;
  }

  async close(): Promise<void> {
    for (const socket of this.#open) socket.destroy();
    await new Promise((resolve) => this.#server.close(resolve));
  }

  #accept(client: Socket): void {
    this.accepted++;
    if (this.#mode.kind === 'down') {
      client.resetAndDestroy();
      return;
    }
    const upstream = connect(Number(this.#target.port), this.#target.hostname);
    this.#open.add(client);
    const close = (): void => {
      this.#open.delete(client);
      client.destroy();
      upstream.destroy();
    };
    client.on('error', close).on('close', close);
    upstream.on('error', close).on('close', close);
    client.pipe(upstream).pipe(client);
    if (this.#mode.kind === 'flap') setTimeout(close, this.#mode.cutAfterMs).unref();
  }
}
