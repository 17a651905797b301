/**
 * The real Cluster API core manager on the test bed: its webhooks default and validate what we write, and
 * its controllers act on the objects.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import * as k8s from '#k8s';
import { startCluster, installCapiCrds, startCapiManager, type Cluster, type CapiManager } from './index.js';

const NS = 'default';

function machineDeployment(name: string, templateLabels: Record<string, string>): k8s.KubernetesObject {
  return {
    apiVersion: 'cluster.x-k8s.io/v1beta2',
    kind: 'MachineDeployment',
    metadata: { name, namespace: NS },
    spec: {
      clusterName: 'guest',
      selector: { matchLabels: { pool: name } },
      template: {
        metadata: { labels: templateLabels },
        spec: {
          clusterName: 'guest',
          bootstrap: { dataSecretName: 'user-data' },
          infrastructureRef: { apiGroup: 'infrastructure.kindling.dev', kind: 'LocalMachineTemplate', name: 'small' },
        },
      },
    },
  } as k8s.KubernetesObject;
}

describe('Cluster API core manager', () => {
  let mgmt: Cluster;
  let capi: CapiManager;
  let objects: k8s.KubernetesObjectApi;

  before(async () => {
    mgmt = await startCluster({ name: 'capi', controllerManager: false });
    await installCapiCrds(mgmt);
    capi = await startCapiManager(mgmt);
    objects = k8s.KubernetesObjectApi.makeApiClient(mgmt.kubeConfig);
  });
  after(async () => {
    await capi?.stop();
    await mgmt?.stop();
  });

  it('when a MachineDeployment omits defaults, it should get them from the defaulting webhook', async () => {
    const created = (await objects.create(
      machineDeployment('defaulted', { pool: 'defaulted' }),
    )) as k8s.KubernetesObject & {
      spec: { replicas?: number; rollout?: { strategy?: { type?: string } } };
    };
    assert.equal(created.metadata?.labels?.['cluster.x-k8s.io/cluster-name'], 'guest');
    assert.equal(created.spec.rollout?.strategy?.type, 'RollingUpdate');
  });

  it('when a MachineDeployment selector does not match its template, it should be refused by the validating webhook', async () => {
    await assert.rejects(
      objects.create(machineDeployment('mismatched', { pool: 'other' })),
      (err: { code?: number; body?: string }) => {
        return (
          err.code === 422 &&
          /admission webhook "validation.machinedeployment.cluster.x-k8s.io" denied the request.*must match spec.selector/.test(
            (JSON.parse(String(err.body)) as { message: string }).message,
          )
        );
      },
    );
  });
});
