/** The reconciler's view of the management cluster: one overlay cache per informer, plus the pool-scoped lists
 * (read through the informers' index of LABELS.nodePool, see controller.ts). */
import type * as k8s from '#k8s';
import { LABELS } from '../../api/src/keys.js';
import type { NodePool } from '../../api/src/nodepool.js';
import {
  CAPI_API_VERSION,
  type Machine,
  type MachineDeployment,
  type MachineHealthCheck,
  type MachineSet,
} from '../../api/src/capi.js';
import type { KindlingConfig, KindlingConfigTemplate } from '../../api/src/bootstrap.js';
import type { InformerEvent } from '../../support/src/informer.js';
import { OverlayCache, type CacheSource } from './store.js';

export interface CacheSources {
  nodePools: CacheSource<NodePool>;
  configMaps: CacheSource<k8s.V1ConfigMap>;
  secrets: CacheSource<k8s.V1Secret>;
  machineSets: CacheSource<MachineSet>;
  machineDeployments: CacheSource<MachineDeployment>;
  healthChecks: CacheSource<MachineHealthCheck>;
  machines: CacheSource<Machine>;
  /** Kindling's bootstrap provider (ClusterAPI engine); absent: no pool uses it (unit tests). */
  kindlingConfigs?: CacheSource<KindlingConfig>;
  kindlingConfigTemplates?: CacheSource<KindlingConfigTemplate>;
}

const EMPTY: CacheSource<never> = { get: () => undefined, list: () => [] };

export interface ChildCache {
  cache: OverlayCache<k8s.KubernetesObject>;
  apiVersion: string;
  kind: 'MachineSet' | 'MachineDeployment' | 'MachineHealthCheck';
}

const ofPool =
  (pool: string) =>
  (o: k8s.KubernetesObject): boolean =>
    o.metadata?.labels?.[LABELS.nodePool] === pool;

/** The caches the controller writes through: each hears its informer's events (observe). */
export type Observed = Exclude<keyof CacheSources, 'configMaps'>;

export class Caches {
  readonly nodePools: OverlayCache<NodePool>;
  readonly configMaps: OverlayCache<k8s.V1ConfigMap>;
  readonly secrets: OverlayCache<k8s.V1Secret>;
  readonly machineSets: OverlayCache<MachineSet>;
  readonly machineDeployments: OverlayCache<MachineDeployment>;
  readonly healthChecks: OverlayCache<MachineHealthCheck>;
  readonly machines: OverlayCache<Machine>;
  readonly kindlingConfigs: OverlayCache<KindlingConfig>;
  readonly kindlingConfigTemplates: OverlayCache<KindlingConfigTemplate>;

  constructor(s: CacheSources) {
    this.nodePools = new OverlayCache(s.nodePools);
    this.configMaps = new OverlayCache(s.configMaps);
    this.secrets = new OverlayCache(s.secrets);
    this.machineSets = new OverlayCache(s.machineSets);
    this.machineDeployments = new OverlayCache(s.machineDeployments);
    this.healthChecks = new OverlayCache(s.healthChecks);
    this.machines = new OverlayCache(s.machines);
    this.kindlingConfigs = new OverlayCache(s.kindlingConfigs ?? EMPTY);
    this.kindlingConfigTemplates = new OverlayCache(s.kindlingConfigTemplates ?? EMPTY);
  }

  /**
   * An event of the informer behind `source`, for its overlay to forget the writes that informer has moved past
   * (OverlayCache#observe): each informer's onEvent passes every event here. Only the overlays the controller
   * writes through need it; the ConfigMaps are only read.
   */
  observe(source: Observed, obj: k8s.KubernetesObject, event: InformerEvent): void {
    this[source].observe(obj, event);
  }

  /** The pool's token and user-data Secrets. */
  poolSecrets(namespace: string, pool: string): k8s.V1Secret[] {
    return this.secrets.list(namespace, ofPool(pool), pool);
  }

  /** Every MachineSet of the pool: its own (InPlace) or those CAPI made from its MachineDeployment (Replace). */
  poolMachineSets(namespace: string, pool: string): MachineSet[] {
    return this.machineSets.list(namespace, ofPool(pool), pool);
  }

  poolMachines(namespace: string, pool: string): Machine[] {
    return this.machines.list(namespace, ofPool(pool), pool);
  }

  /** The KindlingConfigs Cluster API cloned for the pool's Machines (ClusterAPI engine). */
  poolKindlingConfigs(namespace: string, pool: string): KindlingConfig[] {
    return this.kindlingConfigs.list(namespace, ofPool(pool), pool);
  }

  poolKindlingConfigTemplates(namespace: string, pool: string): KindlingConfigTemplate[] {
    return this.kindlingConfigTemplates.list(namespace, ofPool(pool), pool);
  }

  /** The children named after the pool, in deletion order (health check first, so it remediates nothing). */
  children(): ChildCache[] {
    return [
      { cache: this.healthChecks, apiVersion: CAPI_API_VERSION, kind: 'MachineHealthCheck' },
      { cache: this.machineDeployments, apiVersion: CAPI_API_VERSION, kind: 'MachineDeployment' },
      { cache: this.machineSets, apiVersion: CAPI_API_VERSION, kind: 'MachineSet' },
    ];
  }
}
