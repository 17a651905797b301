/**
 * One session per guest cluster, opened and closed as the CAPI `<cluster>-kubeconfig` Secrets of the
 * management cluster come and go (or change): the drainer and the inplace-upgrader each keep one set of
 * informers per guest cluster this way. A changed kubeconfig (rotated credentials, moved endpoint) closes
 * the old session and opens a new one, so no informer keeps talking with stale credentials. Only the Secrets of
 * the namespaces served are listed and watched: a kubeconfig Secret elsewhere opens no session.
 */
import { createHash } from 'node:crypto';
import * as k8s from '#k8s';
import { kubeconfigSecretName, LABELS, SECRET_KEYS } from '../../api/src/keys.js';
import type { Namespaces } from './config.js';
import { NamespacedInformer } from './namespaced-informer.js';
import { kubeConfigOfSecret } from './guest-kubeconfigs.js';
import type { Logger } from './logger.js';
import { keyString } from './object-key.js';

export interface GuestCluster {
  /** `<namespace>/<cluster>`: the namespace is the management namespace holding the Cluster. */
  key: string;
  namespace: string;
  name: string;
  kubeConfig: k8s.KubeConfig;
  log: Logger;
}

export interface GuestClustersOptions<S> {
  kubeConfig: k8s.KubeConfig;
  /** The namespaces whose `<cluster>-kubeconfig` Secrets are watched (--namespaces). */
  namespaces: Namespaces;
  log: Logger;
  /** Builds the per-cluster informers (not started). */
  create: (cluster: GuestCluster) => S;
  /** Starts them; resolves once they are synced (an unreachable cluster keeps it pending, retrying). */
  start: (session: S) => Promise<void>;
  /** Stops them, synced or not. */
  close: (session: S) => Promise<void>;
  /** Called once a session is open (e.g. to enqueue everything that depends on that cluster). */
  onOpened?: (cluster: GuestCluster) => void;
}

interface Entry<S> {
  cluster: GuestCluster;
  digest: string;
  session: S;
  synced: boolean;
  closed: boolean;
}

export const clusterKey = (namespace: string, name: string): string => keyString({ namespace, name });

/** The cluster a kubeconfig Secret belongs to, when it follows the CAPI naming convention. */
function clusterOfSecret(secret: k8s.V1Secret): { namespace: string; name: string } | undefined {
  const name = secret.metadata?.labels?.[LABELS.capiClusterName];
  const namespace = secret.metadata?.namespace;
  if (!name || !namespace || secret.metadata?.name !== kubeconfigSecretName(name)) return undefined;
  return { namespace, name };
}

export class GuestClusters<S> {
  #opts: GuestClustersOptions<S>;
  #informer: NamespacedInformer<k8s.V1Secret>;
  #entries = new Map<string, Entry<S>>();
  /** The digest of each cluster's refused kubeconfig: a resync of the same Secret is not parsed or logged again. */
  #refused = new Map<string, string>();

  constructor(opts: GuestClustersOptions<S>) {
    this.#opts = opts;
    const core = opts.kubeConfig.makeApiClient(k8s.CoreV1Api);
    const labelSelector = LABELS.capiClusterName;
    this.#informer = new NamespacedInformer<k8s.V1Secret>({
      kubeConfig: opts.kubeConfig,
      namespaces: opts.namespaces,
      path: '/api/v1/secrets',
      labelSelector,
      list: (namespace) =>
        namespace === undefined
          ? core.listSecretForAllNamespaces({ labelSelector })
          : core.listNamespacedSecret({ namespace, labelSelector }),
      log: opts.log,
      onEvent: (secret, event) => (event === 'delete' ? this.#forget(secret) : this.#observe(secret)),
    });
  }

  async start(): Promise<void> {
    await this.#informer.start();
  }

  async stop(): Promise<void> {
    await this.#informer.stop();
    const entries = [...this.#entries.values()];
    this.#entries.clear();
    await Promise.all(entries.map((e) => this.#close(e)));
  }

  /** The open session of a cluster, if any. */
  get(key: string): S | undefined {
    const entry = this.#entries.get(key);
    return entry?.synced ? entry.session : undefined;
  }

  /** Every open session. */
  open(): { cluster: GuestCluster; session: S }[] {
    return [...this.#entries.values()].flatMap((e) => (e.synced ? [{ cluster: e.cluster, session: e.session }] : []));
  }

  #observe(secret: k8s.V1Secret): void {
    const id = clusterOfSecret(secret);
    const value = secret.data?.[SECRET_KEYS.kubeconfig];
    if (!id || !value) return;
    const key = clusterKey(id.namespace, id.name);
    const digest = createHash('sha256').update(value).digest('hex');
    const existing = this.#entries.get(key);
    if (existing?.digest === digest || this.#refused.get(key) === digest) return;
    if (existing) void this.#close(existing);
    let kubeConfig: k8s.KubeConfig;
    try {
      kubeConfig = kubeConfigOfSecret(secret);
    } catch (err) {
      this.#refused.set(key, digest);
      this.#entries.delete(key);
      this.#opts.log.error({ err, cluster: key }, 'Kubeconfig Secret refused: no session for this cluster');
      return;
    }
    this.#refused.delete(key);
    const cluster: GuestCluster = { key, ...id, kubeConfig, log: this.#opts.log.child({ cluster: key }) };
    const entry: Entry<S> = { cluster, digest, session: this.#opts.create(cluster), synced: false, closed: false };
    this.#entries.set(key, entry);
    void this.#startEntry(entry);
  }

  async #startEntry(entry: Entry<S>): Promise<void> {
    try {
      await this.#opts.start(entry.session);
      // The Secret may have gone (or changed) while the informers were syncing: close() already ran.
      if (entry.closed) return;
      entry.synced = true;
      entry.cluster.log.info('Guest cluster session open');
      this.#opts.onOpened?.(entry.cluster);
    } catch (err) {
      entry.cluster.log.error({ err }, 'Failed to open a guest cluster session');
    }
  }

  #forget(secret: k8s.V1Secret): void {
    const id = clusterOfSecret(secret);
    if (!id) return;
    const key = clusterKey(id.namespace, id.name);
    this.#refused.delete(key);
    const entry = this.#entries.get(key);
    if (!entry) return;
    this.#entries.delete(key);
    void this.#close(entry);
  }

  async #close(entry: Entry<S>): Promise<void> {
    if (entry.closed) return;
    entry.closed = true;
    entry.synced = false;
    await this.#opts.close(entry.session);
    entry.cluster.log.info('Guest cluster session closed');
  }
}
