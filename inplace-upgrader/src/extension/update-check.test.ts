import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { KindlingConfig } from '../../../api/src/bootstrap.js';
import type { Machine } from '../../../api/src/capi.js';
import { ANNOTATIONS, LABELS } from '../../../api/src/keys.js';
import type { NodePool, NodePoolSpec } from '../../../api/src/nodepool.js';
import { checkUpdateMachine, type ExtensionCache, type RefusalReason, type UpdateRequest } from './update-check.js';

const NS = 'tenants';

function machine(
  name: string,
  pool: string | undefined,
  opts: { updating?: boolean; config?: string | null; configKind?: string; cluster?: string } = {},
): Machine {
  const config = opts.config === undefined ? name : opts.config;
  return {
    apiVersion: 'cluster.x-k8s.io/v1beta2',
    kind: 'Machine',
    metadata: {
      name,
      namespace: NS,
      labels: pool ? { [LABELS.nodePool]: pool } : {},
      annotations: opts.updating === false ? {} : { [ANNOTATIONS.capiUpdateInProgress]: '' },
    },
    spec: {
      clusterName: opts.cluster ?? 'guest',
      bootstrap:
        config === null
          ? { dataSecretName: `user-data-${pool}-h1` }
          : {
              configRef: {
                apiGroup: 'bootstrap.kindling.dev',
                kind: opts.configKind ?? 'KindlingConfig',
                name: config,
              },
            },
      infrastructureRef: { apiGroup: 'infrastructure.kindling.dev', kind: 'LocalMachine', name },
    },
  };
}

const kindlingConfig = (name: string, nodePool: string, configHash: string): KindlingConfig => ({
  apiVersion: 'bootstrap.kindling.dev/v1beta1',
  kind: 'KindlingConfig',
  metadata: { name, namespace: NS },
  spec: { nodePool, configHash },
});

const nodePool = (name: string, management: NodePoolSpec['management'], clusterName = 'guest'): NodePool =>
  ({ metadata: { name, namespace: NS }, spec: { clusterName, management } }) as NodePool;

const MACHINES = [
  machine('capi-1', 'capi'),
  machine('capi-idle', 'capi', { updating: false }),
  machine('unlabelled', undefined),
  machine('secret-only', 'capi', { config: null }),
  machine('other-provider', 'capi', { configKind: 'KubeadmConfig' }),
  machine('config-gone', 'capi', { config: 'nowhere' }),
  machine('crossed', 'capi'),
  machine('replace-1', 'replace'),
  machine('ms-1', 'ms'),
  machine('ghost-1', 'ghost'),
  machine('elsewhere-1', 'capi', { cluster: 'other' }),
];
const CONFIGS = [
  kindlingConfig('capi-1', 'capi', 'h1'),
  kindlingConfig('capi-idle', 'capi', 'h1'),
  kindlingConfig('other-provider', 'capi', 'h1'),
  kindlingConfig('crossed', 'replace', 'h1'),
  kindlingConfig('replace-1', 'replace', 'h1'),
  kindlingConfig('ms-1', 'ms', 'h1'),
  kindlingConfig('ghost-1', 'ghost', 'h1'),
  kindlingConfig('elsewhere-1', 'capi', 'h1'),
];
const POOLS = [
  nodePool('capi', { upgradeType: 'InPlace', inPlace: { engine: 'ClusterAPI' } }),
  nodePool('replace', { upgradeType: 'Replace' }),
  nodePool('ms', { upgradeType: 'InPlace', inPlace: { engine: 'MachineSet' } }),
];

const byName =
  <T extends { metadata: { name: string; namespace?: string } }>(list: readonly T[]) =>
  (namespace: string, name: string): T | undefined =>
    list.find((o) => o.metadata.namespace === namespace && o.metadata.name === name);

const CACHE: ExtensionCache = {
  machine: byName(MACHINES),
  kindlingConfig: byName(CONFIGS),
  nodePool: byName(POOLS),
};

const request = (machineName: string, pool = 'capi', hash = 'h1', namespace = NS): UpdateRequest => ({
  namespace,
  machine: machineName,
  pool,
  hash,
});

describe('checkUpdateMachine', () => {
  it('when Cluster API updates a Machine of a ClusterAPI-engine pool towards its KindlingConfig’s hash, it should act on the cached identifiers', () => {
    assert.deepEqual(checkUpdateMachine(request('capi-1'), CACHE), {
      allowed: true,
      target: { namespace: NS, machine: 'capi-1', cluster: 'guest', pool: 'capi', hash: 'h1' },
    });
  });

  const refusals: [string, UpdateRequest, RefusalReason, RegExp][] = [
    ['the Machine does not exist', request('nobody'), 'UnknownMachine', /Machine tenants\/nobody does not exist/],
    [
      'the Machine is of another namespace than the request names',
      request('capi-1', 'capi', 'h1', 'other-tenant'),
      'UnknownMachine',
      /Machine other-tenant\/capi-1 does not exist/,
    ],
    [
      'Cluster API is not updating the Machine in place',
      request('capi-idle'),
      'NotUpdatingInPlace',
      /is not being updated in place by Cluster API \(no in-place-updates\.internal\.cluster\.x-k8s\.io\/update-in-progress annotation\)/,
    ],
    ['the Machine has no pool label', request('unlabelled'), 'NoPoolLabel', /has no kindling\.dev\/nodepool label/],
    [
      'the request names another pool than the Machine’s',
      request('replace-1', 'capi'),
      'PoolMismatch',
      /Machine tenants\/replace-1 is of pool replace, not of pool capi the request names/,
    ],
    [
      'the Machine boots from a data Secret only',
      request('secret-only'),
      'NoKindlingConfig',
      /does not boot from a KindlingConfig/,
    ],
    [
      'the Machine boots from another bootstrap provider',
      request('other-provider'),
      'NoKindlingConfig',
      /does not boot from a KindlingConfig/,
    ],
    [
      'the Machine’s KindlingConfig does not exist',
      request('config-gone'),
      'UnknownKindlingConfig',
      /its KindlingConfig nowhere does not exist/,
    ],
    [
      'the Machine’s KindlingConfig names another pool',
      request('crossed'),
      'KindlingConfigPoolMismatch',
      /is of pool capi but its KindlingConfig names pool replace/,
    ],
    [
      'the request names another hash than the KindlingConfig',
      request('capi-1', 'capi', 'h0'),
      'HashMismatch',
      /its KindlingConfig names config hash h1, not h0 the request names/,
    ],
    [
      'the pool does not exist',
      request('ghost-1', 'ghost'),
      'UnknownNodePool',
      /NodePool tenants\/ghost does not exist/,
    ],
    [
      'the pool is a Replace pool',
      request('replace-1', 'replace'),
      'NotClusterApiEngine',
      /NodePool tenants\/replace is Replace, not InPlace on the ClusterAPI engine/,
    ],
    [
      'the pool is on the MachineSet engine',
      request('ms-1', 'ms'),
      'NotClusterApiEngine',
      /NodePool tenants\/ms is InPlace on the MachineSet engine, not InPlace on the ClusterAPI engine/,
    ],
    [
      'the Machine is of another cluster than its pool',
      request('elsewhere-1'),
      'ClusterMismatch',
      /is in cluster other but NodePool capi is of cluster guest/,
    ],
  ];
  for (const [what, req, reason, message] of refusals) {
    it(`when ${what}, it should refuse with ${reason}`, () => {
      const check = checkUpdateMachine(req, CACHE);
      assert.equal(check.allowed, false);
      if (check.allowed) return;
      assert.equal(check.reason, reason);
      assert.match(check.message, message);
    });
  }
});
