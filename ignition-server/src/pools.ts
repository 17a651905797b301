/**
 * The NodePools of the namespaces the server serves, as the token-Secret decision reads them: a token Secret is
 * acted on only for the pool that owns it (token-secret-decision.ts). Each pool is kept slim: its identity, its
 * release and cluster, and what its status reports.
 */
import * as k8s from '#k8s';
import { customResource, NamespacedInformer } from '../../support/src/namespaced-informer.js';
import type { Namespaces } from '../../support/src/config.js';
import type { Logger } from '../../support/src/logger.js';
import { type NodePool } from '../../api/src/nodepool.js';
import type { PoolFacts } from './token-secret-decision.js';
import { RESOURCES } from '../../api/src/resources.js';

export interface PoolInformersOptions {
  kubeConfig: k8s.KubeConfig;
  log: Logger;
  /** As the token-Secret controller's: the namespaces served, or 'all'. */
  namespaces: Namespaces;
  /** A pool was added, changed or deleted: the verdicts on its token Secrets may change. */
  onChange: (namespace: string, name: string) => void;
}

/** Only what the decision reads: a pool's spec and status may be large (conditions, rollout records). */
function slimPool(pool: NodePool): NodePool {
  // The resourceVersion stays: the informer tells an update from a resync by it.
  const { name, namespace, uid, generation, resourceVersion } = pool.metadata;
  const s = pool.status;
  return {
    apiVersion: pool.apiVersion,
    kind: pool.kind,
    metadata: { name, namespace, uid, generation, resourceVersion },
    spec: { clusterName: pool.spec.clusterName, release: pool.spec.release } as NodePool['spec'],
    status: s && {
      configHash: s.configHash,
      observedGeneration: s.observedGeneration,
      conditions: s.conditions,
      ...(s.rollout ? { rollout: { ...s.rollout, changes: [] } } : {}),
    },
  };
}

export class PoolInformers {
  readonly #informer: NamespacedInformer<NodePool>;

  constructor(opts: PoolInformersOptions) {
    this.#informer = new NamespacedInformer<NodePool>({
      kubeConfig: opts.kubeConfig,
      namespaces: opts.namespaces,
      ...customResource<NodePool>(opts.kubeConfig.makeApiClient(k8s.CustomObjectsApi), RESOURCES.nodePools),
      transform: slimPool,
      log: opts.log.child({ informer: 'nodepools' }),
      onEvent: (pool) => opts.onChange(pool.metadata.namespace ?? '', pool.metadata.name),
    });
  }

  get synced(): boolean {
    return this.#informer.synced;
  }

  start(): Promise<void> {
    return this.#informer.start();
  }

  stop(): Promise<void> {
    return this.#informer.stop();
  }

  /** The pool of that name in that namespace, if it exists. */
  get(namespace: string, name: string): PoolFacts | undefined {
    return this.#informer.get({ namespace, name });
  }
}
