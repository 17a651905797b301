/**
 * The NodePool controller on the real test bed: a management cluster with the Kindling and real Cluster API
 * CRDs, and a guest cluster (its `guest-kubeconfig` Secret in the management cluster) whose /version the skew
 * policy reads. The controller runs in-process; the real `kindling ignition-server` runs as its own process,
 * minting the tokens (and the guest's bootstrap tokens) and generating the payloads of the pools' releases,
 * real release images in OCI layouts; a host boots from a pool's user-data with the real Ignition client.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import * as k8s from '#k8s';
import { startCluster, installCapiCrds, installKindlingCrds, type Cluster } from '../../test/bed/src/index.js';
import { createLogger } from '../../support/src/logger.js';
import {
  ANNOTATIONS,
  LABELS,
  NODEPOOL_FINALIZER,
  SECRET_KEYS,
  tokenSecretName,
  userDataSecretName,
} from '../../api/src/keys.js';
import { CONDITION_TYPES, type Condition } from '../../api/src/conditions.js';
import type { NodePool } from '../../api/src/nodepool.js';
import type { Machine, MachineDeployment, MachineHealthCheck, MachineSet } from '../../api/src/capi.js';
import { createNodePoolController, type NodePoolController } from './controller.js';
import { ignitionValidate } from '../testing/ignition-validate.js';
import { KUBELET_CONFIG } from '../../api/testing/nodepool.js';
import { eventually } from '../../test/bed/src/eventually.js';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, open, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { configHash, normaliseConfig } from './hash.js';
import { nodePoolFixture } from '../../api/testing/nodepool.js';
import { runIgnitionServer, type IgnitionServer } from '../../ignition-server/testing/index.js';
import { bootstrapSecretName, bootstrapTokenId } from '../../ignition-server/src/join.js';
import { bootHost } from '../../local/src/providers/boot.js';
import type { ControllerConfig } from './phases.js';

const NS = 'default';
/**
 * The releases the pools run, built as images the ignition server reads. The registry references below name
 * releases the skew policy refuses (or no version at all): no token Secret ever names them, so nothing reads them.
 */
const RELEASES = ['1.36.3', '1.34.2', '1.35.0'];
const MERGE = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch);
const CAPI = 'cluster.x-k8s.io/v1beta2';

const cond = (p: NodePool, type: string): Condition | undefined => p.status?.conditions?.find((c) => c.type === type);

describe('nodepool-controller on the real test bed', () => {
  let mgmt: Cluster;
  let guest: Cluster;
  let objects: k8s.KubernetesObjectApi;
  let core: k8s.CoreV1Api;
  let controller: NodePoolController;
  let ignition: IgnitionServer;
  let config: ControllerConfig;
  let dir: string;
  const log = createLogger({ name: 'nodepool-controller-test', level: process.env['TEST_LOG_LEVEL'] ?? 'warn' });

  const startController = async (): Promise<NodePoolController> => {
    const c = createNodePoolController({ kubeConfig: mgmt.kubeConfig, namespaces: [NS], log, config, workers: 4 });
    await c.start();
    return c;
  };

  /** A pool of the real 1.36.3 release. */
  const pool = (name: string, patch?: (p: NodePool) => void): NodePool =>
    nodePoolFixture(name, NS, (p) => {
      p.spec.release.image = ignition.releases['1.36.3'] ?? '';
      patch?.(p);
    });

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'nodepool-controller-'));
    mgmt = await startCluster({ name: 'mgmt' });
    [guest] = await Promise.all([
      startCluster({
        name: 'guest',
        controllerManager: false,
        kwok: true,
        management: { cluster: mgmt, namespace: NS },
      }),
      installKindlingCrds(mgmt),
      installCapiCrds(mgmt),
    ]);
    objects = k8s.KubernetesObjectApi.makeApiClient(mgmt.kubeConfig);
    core = mgmt.kubeConfig.makeApiClient(k8s.CoreV1Api);
    await core.createNamespacedConfigMap({
      namespace: NS,
      body: { metadata: { name: 'kubelet-config' }, data: { config: KUBELET_CONFIG } },
    });
    ignition = await runIgnitionServer({
      kubeconfigPath: mgmt.kubeconfigPath,
      dir: join(dir, 'ignition-server'),
      namespace: NS,
      releases: RELEASES,
    });
    config = {
      ignition: { endpoint: ignition.endpoint, caPem: ignition.caPem },
      tokenGraceMs: 2 * 3600_000,
      maxSkewMinors: 3,
    };
    controller = await startController();
  });
  after(async () => {
    await controller?.stop();
    await ignition?.stop();
    await Promise.all([guest?.stop(), mgmt?.stop()]);
    if (dir && process.env['KEEP_TEST_DIR'] === undefined) await rm(dir, { recursive: true, force: true });
  });

  const readPool = (name: string): Promise<NodePool> =>
    objects.read<NodePool>({ apiVersion: 'kindling.dev/v1beta1', kind: 'NodePool', metadata: { name, namespace: NS } });
  const read = <T extends k8s.KubernetesObject>(kind: string, name: string, apiVersion = CAPI): Promise<T> =>
    objects.read<T>({ apiVersion, kind, metadata: { name, namespace: NS } });
  const tryRead = <T extends k8s.KubernetesObject>(
    kind: string,
    name: string,
    apiVersion = CAPI,
  ): Promise<T | undefined> =>
    read<T>(kind, name, apiVersion).catch((err: { code?: number }) =>
      err.code === 404 ? undefined : Promise.reject(err as Error),
    );
  const patchPool = (name: string, body: object): Promise<unknown> =>
    mgmt.kubeConfig
      .makeApiClient(k8s.CustomObjectsApi)
      .patchNamespacedCustomObject(
        { group: 'kindling.dev', version: 'v1beta1', namespace: NS, plural: 'nodepools', name, body },
        MERGE,
      );
  const patchCapi = (plural: string, name: string, body: object): Promise<unknown> =>
    mgmt.kubeConfig
      .makeApiClient(k8s.CustomObjectsApi)
      .patchNamespacedCustomObject(
        { group: 'cluster.x-k8s.io', version: 'v1beta2', namespace: NS, plural, name, body },
        MERGE,
      );
  const poolSecrets = async (name: string): Promise<k8s.V1Secret[]> =>
    (await core.listNamespacedSecret({ namespace: NS, labelSelector: `${LABELS.nodePool}=${name}` })).items;

  /** Waits until the pool's status caught up with its generation and the queue has nothing left to do. */
  const converged = async (name: string, extra: (p: NodePool) => boolean = () => true): Promise<NodePool> => {
    const p = await eventually(`pool ${name} to converge`, async () => {
      const p = await readPool(name);
      return p.status?.observedGeneration === p.metadata.generation && cond(p, 'Ready') !== undefined && extra(p)
        ? p
        : undefined;
    });
    await controller.queue.drained();
    return p;
  };

  const tokenOf = (s: k8s.V1Secret, key: string = SECRET_KEYS.token): string =>
    Buffer.from(s.data?.[key] ?? '', 'base64').toString();
  /** The ignition server's verdict on the pool's payload has reached its status. */
  const payloadGenerated = (p: NodePool): boolean => cond(p, 'ValidGeneratedPayload')?.status === 'True';

  const userDataStub = async (name: string): Promise<{ secret: k8s.V1Secret; stub: string }> => {
    const secret = await read<k8s.V1Secret>('Secret', name, 'v1');
    return { secret, stub: Buffer.from(secret.data?.[SECRET_KEYS.value] ?? '', 'base64').toString() };
  };

  it("when the apiserver refuses a child object, it should say so in ChildObjectsAccepted and Ready with the apiserver's message, and recover once it accepts", async () => {
    const admission = { apiVersion: 'admissionregistration.k8s.io/v1' };
    const policy = {
      ...admission,
      kind: 'ValidatingAdmissionPolicy',
      metadata: { name: 'refuse-refused-a' },
      spec: {
        failurePolicy: 'Fail',
        matchConstraints: {
          resourceRules: [
            {
              apiGroups: ['cluster.x-k8s.io'],
              apiVersions: ['*'],
              operations: ['CREATE', 'UPDATE'],
              resources: ['machinedeployments'],
            },
          ],
        },
        validations: [
          {
            expression: "object.metadata.name != 'refused-a'",
            message: 'no MachineDeployment may be called refused-a here',
          },
        ],
      },
    };
    const binding = {
      ...admission,
      kind: 'ValidatingAdmissionPolicyBinding',
      metadata: { name: 'refuse-refused-a' },
      spec: { policyName: 'refuse-refused-a', validationActions: ['Deny'] },
    };
    await objects.create(policy);
    await objects.create(binding);
    // The policy takes effect once the apiserver's policy informer saw it: probe with a dry-run create of a valid
    // MachineDeployment. Only the policy's own refusal counts (schema errors come before admission policies).
    await eventually('the policy in force', () =>
      objects
        .create(
          {
            apiVersion: CAPI,
            kind: 'MachineDeployment',
            metadata: { name: 'refused-a', namespace: NS },
            spec: {
              clusterName: 'guest',
              selector: { matchLabels: { probe: 'refused-a' } },
              template: {
                spec: {
                  clusterName: 'guest',
                  bootstrap: { dataSecretName: 'x' },
                  infrastructureRef: { apiGroup: 'x.io', kind: 'X', name: 'x' },
                },
              },
            },
          } as k8s.KubernetesObject,
          undefined,
          'All',
        )
        .then(
          () => undefined,
          (err: Error) =>
            err.message.includes('no MachineDeployment may be called refused-a here') ? true : undefined,
        ),
    );
    await objects.create(pool('refused-a'));
    const refused = await eventually(
      'the refusal on the pool',
      async () => {
        const p = await readPool('refused-a');
        return cond(p, 'ChildObjectsAccepted')?.status === 'False' ? p : undefined;
      },
      90_000,
      500,
    );
    assert.equal(cond(refused, 'ChildObjectsAccepted')?.reason, 'Refused');
    assert.match(
      cond(refused, 'ChildObjectsAccepted')?.message ?? '',
      /refused MachineDeployment default\/refused-a \((422|403)\): .*no MachineDeployment may be called refused-a here/,
    );
    assert.match(
      cond(refused, 'Ready')?.message ?? '',
      /^ChildObjectsAccepted: .*no MachineDeployment may be called refused-a here/,
    );
    await objects.delete(binding);
    const accepted = await eventually(
      'the pool recovered',
      async () => {
        const p = await readPool('refused-a');
        return cond(p, 'ChildObjectsAccepted')?.status === 'True' ? p : undefined;
      },
      120_000,
      500,
    ); // nothing changes on the pool: the retry with backoff (at most 60 s) picks it up
    assert.equal(cond(accepted, 'ChildObjectsAccepted')?.reason, 'AsExpected');
    assert.ok(await tryRead('MachineDeployment', 'refused-a'));
    await objects.delete(policy);
  });

  // eslint-disable-next-line complexity -- optional chaining in assertions counts as branches
  it('when a Replace pool is created, it should get a token Secret, a valid user-data stub and a MachineDeployment the CAPI CRDs accept', async () => {
    await objects.create(pool('replace-a', (p) => (p.spec.config = [{ name: 'kubelet-config' }])));
    const p = await converged('replace-a', (x) => x.status?.configHash !== undefined);
    const hash = p.status?.configHash ?? '';
    assert.deepEqual(p.metadata.finalizers, [NODEPOOL_FINALIZER]);
    const md = await read<MachineDeployment>('MachineDeployment', 'replace-a');
    assert.equal(md.spec.template.spec.bootstrap.dataSecretName, userDataSecretName('replace-a', hash));
    assert.equal(md.spec.replicas, 2);
    assert.equal(md.spec.template.spec.version, 'v1.36.3');
    assert.equal(md.metadata.ownerReferences?.[0]?.kind, 'NodePool');
    const token = await read<k8s.V1Secret>('Secret', tokenSecretName('replace-a', hash), 'v1');
    assert.equal(tokenOf(token, SECRET_KEYS.pool), `${NS}/replace-a`);
    const { secret, stub } = await userDataStub(userDataSecretName('replace-a', hash));
    assert.equal(tokenOf(secret, SECRET_KEYS.format), 'ignition');
    // The stub carries the token the ignition server minted and signed for this pool and hash.
    const minted = tokenOf(token);
    assert.ok(stub.includes(`"value":"Bearer ${minted}"`), 'the stub carries the minted token');
    const claims = await ignition.verify(minted);
    assert.deepEqual([claims?.pool, claims?.hash], [`${NS}/replace-a`, hash]);
    // The Secret names the pool's cluster: the server minted the paired bootstrap token into that guest.
    const bootstrap = await guest.kubeConfig.makeApiClient(k8s.CoreV1Api).readNamespacedSecret({
      name: bootstrapSecretName(bootstrapTokenId(tokenOf(token, SECRET_KEYS.bootstrapToken))),
      namespace: 'kube-system',
    });
    assert.equal(bootstrap.type, 'bootstrap.kubernetes.io/token');
    const validated = await ignitionValidate(stub);
    assert.ok(validated.ok, validated.output);
    assert.deepEqual(
      p.status?.conditions?.map((c) => c.type),
      CONDITION_TYPES,
    );
    for (const type of ['ValidReleaseImage', 'ValidMachineConfig', 'SupportedVersionSkew', 'ReconciliationActive'])
      assert.equal(cond(p, type)?.status, 'True', type);
    assert.equal(p.status?.version, 'v1.36.3');
    // The server generates the payload from the release image and the config: its verdict reaches the pool.
    const generated = await converged('replace-a', payloadGenerated);
    assert.equal(cond(generated, 'ValidGeneratedPayload')?.reason, 'AsExpected');
    assert.match(cond(generated, 'ValidGeneratedPayload')?.message ?? '', /generated from oci:/);
  });

  it('when a NodePool is created in a namespace outside --namespaces, it should never be seen: no finalizer, status, Secret or child', async () => {
    const outside = 'not-a-tenant';
    await core.createNamespace({ body: { metadata: { name: outside } } });
    const intruder = nodePoolFixture(
      'intruder',
      outside,
      (p) => (p.spec.release.image = ignition.releases['1.36.3'] ?? ''),
    );
    await objects.create(intruder);
    // A pool of the served namespace, created after it, converging: the intruder's events would have come first.
    await objects.create(pool('after-intruder'));
    await converged('after-intruder', (x) => x.status?.configHash !== undefined);
    const seen = await objects.read<NodePool>({
      apiVersion: 'kindling.dev/v1beta1',
      kind: 'NodePool',
      metadata: { name: 'intruder', namespace: outside },
    });
    assert.deepEqual([seen.metadata.finalizers, seen.status], [undefined, undefined]);
    assert.equal(controller.caches.nodePools.get({ namespace: outside, name: 'intruder' }), undefined);
    const secrets = await core.listNamespacedSecret({ namespace: outside, labelSelector: LABELS.nodePool });
    assert.deepEqual(secrets.items, []);
    const sets = await objects.list(CAPI, 'MachineSet', outside);
    const deployments = await objects.list(CAPI, 'MachineDeployment', outside);
    assert.deepEqual([...sets.items, ...deployments.items], []);
  });

  it('when an InPlace pool is created with autoRepair, it should get a MachineSet with the Flow 3 annotations and a health check only once a host reached the ignition endpoint', async () => {
    await objects.create(
      pool('inplace-a', (p) => {
        p.spec.replicas = 5;
        p.spec.management = { upgradeType: 'InPlace', inPlace: { maxUnavailable: '40%' }, autoRepair: true };
      }),
    );
    const p = await converged('inplace-a', (x) => x.status?.configHash !== undefined);
    const hash = p.status?.configHash ?? '';
    const ms = await read<MachineSet>('MachineSet', 'inplace-a');
    assert.equal(ms.metadata.annotations?.[ANNOTATIONS.targetConfigHash], hash);
    assert.equal(ms.metadata.annotations?.[ANNOTATIONS.maxUnavailable], '2');
    assert.equal(await tryRead('MachineHealthCheck', 'inplace-a'), undefined);
    assert.equal(cond(p, 'AutorepairEnabled')?.reason, 'WaitingForIgnition');
    // A host boots from the pool's user-data with the real Ignition client; the server marks the token Secret at its first fetch.
    const root = join(dir, 'hosts', 'inplace-a-0');
    await bootHost({ root, userData: (await userDataStub(userDataSecretName('inplace-a', hash))).stub });
    assert.equal(
      (JSON.parse(await readFile(join(root, 'etc/kindling/release.json'), 'utf8')) as { kubeletVersion: string })
        .kubeletVersion,
      'v1.36.3',
    );
    const mhc = await eventually('the MachineHealthCheck', () =>
      tryRead<MachineHealthCheck>('MachineHealthCheck', 'inplace-a'),
    );
    assert.deepEqual(mhc.spec.selector.matchLabels, {
      [LABELS.nodePool]: 'inplace-a',
      [LABELS.capiClusterName]: 'guest',
    });
    const after = await converged('inplace-a', (x) => cond(x, 'AutorepairEnabled')?.status === 'True');
    assert.equal(cond(after, 'ReachedIgnitionEndpoint')?.status, 'True');
    assert.equal(cond(after, 'ValidGeneratedPayload')?.status, 'True');
    await patchPool('inplace-a', { spec: { management: { autoRepair: false } } });
    await eventually(
      'the MachineHealthCheck to be removed',
      async () => (await tryRead('MachineHealthCheck', 'inplace-a')) === undefined,
    );
  });

  it('when everything is in place and every pool is resynced, it should write nothing (resourceVersions stay put)', async () => {
    await converged('replace-a', payloadGenerated);
    await converged('inplace-a', payloadGenerated);
    const snapshot = async (): Promise<string[]> => {
      const names = ['replace-a', 'inplace-a'];
      const secrets = (await Promise.all(names.map(poolSecrets))).flat();
      const children = await Promise.all([
        read('MachineDeployment', 'replace-a'),
        read('MachineSet', 'inplace-a'),
        readPool('replace-a'),
        readPool('inplace-a'),
      ]);
      return [...secrets, ...children]
        .map((o) => `${o.kind ?? 'Secret'}/${o.metadata?.name ?? ''}@${o.metadata?.resourceVersion ?? ''}`)
        .sort();
    };
    const before = await snapshot();
    const writes = controller.writer.count;
    controller.resyncAll();
    await new Promise((r) => setTimeout(r, 300));
    await controller.queue.drained();
    assert.equal(controller.writer.count - writes, 0);
    assert.deepEqual(await snapshot(), before);
  });

  it('when a pool is scaled, it should change the replicas and nothing that rolls', async () => {
    const before = await read<MachineDeployment>('MachineDeployment', 'replace-a');
    await patchPool('replace-a', { spec: { replicas: 4 } });
    const md = await eventually('replicas 4', async () => {
      const md = await read<MachineDeployment>('MachineDeployment', 'replace-a');
      return md.spec.replicas === 4 ? md : undefined;
    });
    assert.deepEqual(md.spec.template, before.spec.template);
  });

  it('when autoscaling is turned on, it should set the min/max annotations, clamp the replicas and then leave the count to the autoscaler; when off, drop them', async () => {
    await patchPool('replace-a', { spec: { replicas: null, autoScaling: { min: 1, max: 3 } } });
    await eventually('autoscaler annotations and clamped replicas', async () => {
      const md = await read<MachineDeployment>('MachineDeployment', 'replace-a');
      return (
        md.metadata.annotations?.[ANNOTATIONS.autoscalerMaxSize] === '3' &&
        md.metadata.annotations[ANNOTATIONS.autoscalerMinSize] === '1' &&
        md.spec.replicas === 3
      );
    });
    let p = await converged('replace-a');
    assert.equal(cond(p, 'AutoscalingEnabled')?.status, 'True');
    await patchCapi('machinedeployments', 'replace-a', { spec: { replicas: 2 } }); // the cluster autoscaler scales down
    await new Promise((r) => setTimeout(r, 500));
    await controller.queue.drained();
    assert.equal((await read<MachineDeployment>('MachineDeployment', 'replace-a')).spec.replicas, 2);
    await patchPool('replace-a', { spec: { replicas: 2, autoScaling: null } });
    await eventually('annotations to go', async () => {
      const md = await read<MachineDeployment>('MachineDeployment', 'replace-a');
      return md.metadata.annotations?.[ANNOTATIONS.autoscalerMaxSize] === undefined && md.spec.replicas === 2;
    });
    p = await converged('replace-a', (x) => cond(x, 'AutoscalingEnabled')?.status === 'False');
    assert.equal(cond(p, 'AutoscalingEnabled')?.reason, 'Disabled');
  });

  // eslint-disable-next-line complexity -- optional chaining in assertions counts as branches
  it('when the config changes, it should make a new token and user-data, expire the old token after the grace, and delete the old user-data once no Machine uses it', async () => {
    await core.createNamespacedConfigMap({
      namespace: NS,
      body: { metadata: { name: 'cfg-b' }, data: { config: KUBELET_CONFIG } },
    });
    await objects.create(
      pool('inplace-b', (p) => {
        p.spec.config = [{ name: 'cfg-b' }];
        p.spec.management = { upgradeType: 'InPlace' };
      }),
    );
    const oldHash = (await converged('inplace-b', (x) => x.status?.configHash !== undefined)).status?.configHash ?? '';
    const machine = await objects.create({
      apiVersion: CAPI,
      kind: 'Machine',
      metadata: {
        name: 'inplace-b-m1',
        namespace: NS,
        labels: { [LABELS.nodePool]: 'inplace-b', [LABELS.capiClusterName]: 'guest' },
      },
      spec: {
        clusterName: 'guest',
        bootstrap: { dataSecretName: userDataSecretName('inplace-b', oldHash) },
        infrastructureRef: { apiGroup: 'infrastructure.kindling.dev', kind: 'LocalMachine', name: 'm1' },
      },
    });
    const changedAt = Date.now();
    await core.patchNamespacedConfigMap(
      {
        name: 'cfg-b',
        namespace: NS,
        body: { data: { config: KUBELET_CONFIG.replace('maxPods: 250', 'maxPods: 300') } },
      },
      MERGE,
    );
    const p = await converged('inplace-b', (x) => x.status?.configHash !== oldHash);
    const newHash = p.status?.configHash ?? '';
    const ms = await read<MachineSet>('MachineSet', 'inplace-b');
    assert.equal(ms.metadata.annotations?.[ANNOTATIONS.targetConfigHash], newHash);
    assert.equal(ms.spec.template.spec.bootstrap.dataSecretName, userDataSecretName('inplace-b', newHash));
    assert.ok((await ignitionValidate((await userDataStub(userDataSecretName('inplace-b', newHash))).stub)).ok);
    const oldToken = await read<k8s.V1Secret>('Secret', tokenSecretName('inplace-b', oldHash), 'v1');
    const expires = Date.parse(oldToken.metadata?.annotations?.[ANNOTATIONS.tokenExpiresAt] ?? '');
    assert.ok(
      Math.abs(expires - (changedAt + 2 * 3600_000)) < 60_000,
      `expiry ${oldToken.metadata?.annotations?.[ANNOTATIONS.tokenExpiresAt]}`,
    );
    assert.equal(
      (await read<k8s.V1Secret>('Secret', tokenSecretName('inplace-b', newHash), 'v1')).metadata?.annotations?.[
        ANNOTATIONS.tokenExpiresAt
      ],
      undefined,
    );
    // The Machine still boots from the old user-data: it stays.
    assert.ok(await tryRead('Secret', userDataSecretName('inplace-b', oldHash), 'v1'));
    // The test plays the upgrader, which reports its progress: the status says the config, not the version, is moving.
    await patchCapi('machinesets', 'inplace-b', {
      metadata: {
        annotations: { [ANNOTATIONS.currentConfigHash]: oldHash, [ANNOTATIONS.inPlaceProgress]: '0 of 1 updated' },
      },
    });
    const updating = await converged('inplace-b', (x) => cond(x, 'UpdatingConfig')?.status === 'True');
    assert.match(cond(updating, 'UpdatingConfig')?.message ?? '', /0 of 1 updated/);
    assert.equal(cond(updating, 'UpdatingVersion')?.status, 'False');
    // Why, in status: the document that changed, where it is, and that it is applied in place.
    const record = updating.status?.rollout;
    assert.deepEqual(record && { from: record.from, to: record.to, changes: record.changes }, {
      from: oldHash,
      to: newHash,
      changes: [{ input: 'config', detail: 'KubeletConfig max-pods changed in ConfigMap cfg-b', strategy: 'InPlace' }],
    });
    // The old token Secret goes (as at its expiry): the record stays as it was, not derived from it again.
    await core.deleteNamespacedSecret({ name: tokenSecretName('inplace-b', oldHash), namespace: NS });
    await patchCapi('machinesets', 'inplace-b', {
      metadata: { annotations: { [ANNOTATIONS.inPlaceProgress]: '0 of 1 updated; n1 draining' } },
    });
    const later = await converged('inplace-b', (x) => /n1 draining/.test(cond(x, 'UpdatingConfig')?.message ?? ''));
    assert.deepEqual(later.status?.rollout, record);
    await objects.delete(machine);
    await eventually(
      'the old user-data to go',
      async () => (await tryRead('Secret', userDataSecretName('inplace-b', oldHash), 'v1')) === undefined,
    );
  });

  it('when the ignition server rotates a token, it should rewrite the user-data with the new token', async () => {
    const hash = (await converged('inplace-b')).status?.configHash ?? '';
    const name = tokenSecretName('inplace-b', hash);
    const old = tokenOf(await read<k8s.V1Secret>('Secret', name, 'v1'));
    // The server rotates at half the token's TTL (hours away): backdate the issue time it reads, so rotation is due now.
    const issuedAt = new Date(Date.now() - 12 * 3600_000).toISOString();
    await core.patchNamespacedSecret(
      { name, namespace: NS, body: { metadata: { annotations: { [ANNOTATIONS.tokenIssuedAt]: issuedAt } } } },
      MERGE,
    );
    const rotated = await eventually('a rotated token', async () => {
      const s = await read<k8s.V1Secret>('Secret', name, 'v1');
      return tokenOf(s) !== old ? s : undefined;
    });
    const fresh = tokenOf(rotated);
    assert.equal(tokenOf(rotated, SECRET_KEYS.rotatedToken), old, 'the previous token stays valid in the rotated slot');
    assert.equal((await ignition.verify(fresh))?.hash, hash);
    await eventually('the user-data to carry the new token', async () =>
      (await userDataStub(userDataSecretName('inplace-b', hash))).stub.includes(`Bearer ${fresh}`),
    );
  });

  it("when node labels and taints are added and removed, they should reach the template and existing Machines without a rollout, leaving others' labels alone", async () => {
    const before = await read<MachineDeployment>('MachineDeployment', 'replace-a');
    await objects.create({
      apiVersion: CAPI,
      kind: 'Machine',
      metadata: {
        name: 'replace-a-m1',
        namespace: NS,
        labels: { [LABELS.nodePool]: 'replace-a', [LABELS.capiClusterName]: 'guest', 'other.example/keep': 'yes' },
      },
      spec: {
        clusterName: 'guest',
        bootstrap: { dataSecretName: before.spec.template.spec.bootstrap.dataSecretName },
        infrastructureRef: { apiGroup: 'infrastructure.kindling.dev', kind: 'LocalMachine', name: 'm1' },
      },
    });
    await patchPool('replace-a', {
      spec: {
        nodeLabels: { 'example.com/role': 'db' },
        taints: [{ key: 'example.com/dedicated', value: 'db', effect: 'NoSchedule' }],
        nodeDrainTimeout: '5m',
      },
    });
    const m = await eventually('labels and taints on the Machine', async () => {
      const m = await read<Machine>('Machine', 'replace-a-m1');
      return m.metadata.labels?.['example.com/role'] === 'db' &&
        m.spec.taints?.length === 1 &&
        m.spec.deletion?.nodeDrainTimeoutSeconds === 300
        ? m
        : undefined;
    });
    assert.equal(m.metadata.labels?.['other.example/keep'], 'yes');
    const md = await read<MachineDeployment>('MachineDeployment', 'replace-a');
    assert.equal(md.spec.template.metadata?.labels?.['example.com/role'], 'db');
    assert.deepEqual(md.spec.template.spec.taints, [
      { key: 'example.com/dedicated', value: 'db', effect: 'NoSchedule', propagation: 'Always' },
    ]);
    assert.equal(md.spec.template.spec.bootstrap.dataSecretName, before.spec.template.spec.bootstrap.dataSecretName);
    assert.equal(md.spec.template.spec.version, before.spec.template.spec.version);
    assert.equal(
      (await readPool('replace-a')).status?.configHash,
      before.spec.template.spec.bootstrap.dataSecretName?.split('-').pop(),
    );

    await patchPool('replace-a', { spec: { nodeLabels: null, taints: null } });
    const cleared = await eventually('labels and taints removed from the Machine', async () => {
      const m = await read<Machine>('Machine', 'replace-a-m1');
      return m.metadata.labels?.['example.com/role'] === undefined && (m.spec.taints ?? []).length === 0
        ? m
        : undefined;
    });
    assert.equal(cleared.metadata.labels?.['other.example/keep'], 'yes');
    assert.equal(cleared.metadata.labels?.[LABELS.nodePool], 'replace-a');
    const md2 = await read<MachineDeployment>('MachineDeployment', 'replace-a');
    assert.equal(md2.spec.template.metadata?.labels?.['example.com/role'], undefined);
    assert.equal(md2.spec.template.spec.taints, undefined);
    await objects.delete({ apiVersion: CAPI, kind: 'Machine', metadata: { name: 'replace-a-m1', namespace: NS } });
  });

  // eslint-disable-next-line complexity -- optional chaining in assertions counts as branches
  it("when node labels and taints are added and removed, they should reach the pool's guest Nodes by server-side apply, leaving others' labels and taints alone", async () => {
    const guestCore = guest.kubeConfig.makeApiClient(k8s.CoreV1Api);
    const taintsOf = (n: k8s.V1Node): string[] =>
      (n.spec?.taints ?? []).map((t) => `${t.key}=${t.value ?? ''}:${t.effect}`).sort();
    // The apiserver's TaintNodesByCondition admission adds node.kubernetes.io/not-ready at creation, and no node
    // lifecycle controller runs in the guest to lift it: one more taint that is not the pool's and must stay.
    const NOT_READY = 'node.kubernetes.io/not-ready=:NoSchedule';
    await guestCore.createNode({
      body: {
        metadata: {
          name: 'nodes-a-n1',
          labels: { 'other.example/keep': 'yes' },
          annotations: { 'kwok.x-k8s.io/node': 'fake' },
        },
        spec: { taints: [{ key: 'other.example/maintenance', value: 'soon', effect: 'PreferNoSchedule' }] },
      },
    });
    await objects.create(
      pool('nodes-a', (p) => {
        p.spec.nodeLabels = { 'example.com/role': 'web' };
        p.spec.taints = [{ key: 'example.com/dedicated', value: 'web', effect: 'NoSchedule' }];
      }),
    );
    const before = await converged('nodes-a', (x) => x.status?.configHash !== undefined);
    await objects.create({
      apiVersion: CAPI,
      kind: 'Machine',
      metadata: {
        name: 'nodes-a-m1',
        namespace: NS,
        labels: { [LABELS.nodePool]: 'nodes-a', [LABELS.capiClusterName]: 'guest' },
      },
      spec: {
        clusterName: 'guest',
        bootstrap: { dataSecretName: userDataSecretName('nodes-a', before.status?.configHash ?? '') },
        infrastructureRef: { apiGroup: 'infrastructure.kindling.dev', kind: 'LocalMachine', name: 'n1' },
      },
    });
    // No CAPI controllers run here: the test plays CAPI's part of linking the Machine to its Node.
    await mgmt.kubeConfig.makeApiClient(k8s.CustomObjectsApi).patchNamespacedCustomObjectStatus(
      {
        group: 'cluster.x-k8s.io',
        version: 'v1beta2',
        namespace: NS,
        plural: 'machines',
        name: 'nodes-a-m1',
        body: { status: { nodeRef: { name: 'nodes-a-n1' } } },
      },
      MERGE,
    );
    const labelled = await eventually("the pool's label and taint on the Node", async () => {
      const n = await guestCore.readNode({ name: 'nodes-a-n1' });
      return n.metadata?.labels?.['example.com/role'] === 'web' &&
        taintsOf(n).includes('example.com/dedicated=web:NoSchedule')
        ? n
        : undefined;
    });
    assert.equal(labelled.metadata?.labels?.['other.example/keep'], 'yes');
    assert.deepEqual(taintsOf(labelled), [
      'example.com/dedicated=web:NoSchedule',
      NOT_READY,
      'other.example/maintenance=soon:PreferNoSchedule',
    ]);
    assert.ok(
      labelled.metadata?.managedFields?.some(
        (m) => m.manager === 'kindling-nodepool-controller' && m.operation === 'Apply',
      ),
    );

    // Someone else adds a label and a taint of their own; then the pool swaps its label and drops its taint.
    await guestCore.patchNode(
      {
        name: 'nodes-a-n1',
        body: {
          metadata: { labels: { 'other.example/late': 'x' } },
          spec: { taints: [...(labelled.spec?.taints ?? []), { key: 'other.example/late', effect: 'NoExecute' }] },
        },
      },
      MERGE,
    );
    // A merge patch merges maps: the role label goes by setting it to null.
    await patchPool('nodes-a', {
      spec: { nodeLabels: { 'example.com/role': null, 'example.com/tier': 'gold' }, taints: null },
    });
    const swapped = await eventually('the old label and the taint to go, the new label to come', async () => {
      const n = await guestCore.readNode({ name: 'nodes-a-n1' });
      return n.metadata?.labels?.['example.com/tier'] === 'gold' &&
        n.metadata.labels['example.com/role'] === undefined &&
        !taintsOf(n).some((t) => t.startsWith('example.com/'))
        ? n
        : undefined;
    });
    assert.equal(swapped.metadata?.labels?.['other.example/keep'], 'yes');
    assert.equal(swapped.metadata?.labels?.['other.example/late'], 'x');
    assert.deepEqual(taintsOf(swapped), [
      NOT_READY,
      'other.example/late=:NoExecute',
      'other.example/maintenance=soon:PreferNoSchedule',
    ]);
    // Labels and taints are no rollout: the pool still boots the same user-data.
    const md = await read<MachineDeployment>('MachineDeployment', 'nodes-a');
    assert.equal(
      md.spec.template.spec.bootstrap.dataSecretName,
      userDataSecretName('nodes-a', before.status?.configHash ?? ''),
    );

    // Once in place, a resync writes nothing to the Node.
    await converged('nodes-a');
    const nodeWrites = controller.nodes.count;
    // KWOK heartbeats move the Node's resourceVersion; our manager's entry is what a write of ours would move.
    const ours = async (): Promise<string> =>
      JSON.stringify(
        (await guestCore.readNode({ name: 'nodes-a-n1' })).metadata?.managedFields?.find(
          (m) => m.manager === 'kindling-nodepool-controller',
        ),
      );
    const entry = await ours();
    controller.resyncAll();
    await new Promise((r) => setTimeout(r, 300));
    await controller.queue.drained();
    assert.equal(controller.nodes.count - nodeWrites, 0);
    assert.equal(await ours(), entry);
  });

  const refusals: [string, string, boolean, string][] = [
    ['the release is newer than the control plane', '1.37.0', false, 'NodeNewerThanControlPlane'],
    ['the release is 4 minors behind the control plane', '1.32.5', false, 'TooFarBehindControlPlane'],
    ['the release is a pre-release without opt-in', '1.36.4-rc.1', false, 'PrereleaseNotAllowed'],
  ];
  for (const [condition, tag, allowPrerelease, reason] of refusals) {
    it(`when ${condition}, it should create nothing and set SupportedVersionSkew=False/${reason}`, async () => {
      const name = `skew-${reason.toLowerCase().slice(0, 20)}`;
      await objects.create(
        pool(name, (p) => (p.spec.release = { image: `registry.local:5000/kindling/release:${tag}`, allowPrerelease })),
      );
      const p = await converged(name);
      assert.equal(cond(p, 'SupportedVersionSkew')?.status, 'False');
      assert.equal(cond(p, 'SupportedVersionSkew')?.reason, reason);
      assert.equal(cond(p, 'Ready')?.status, 'False');
      assert.deepEqual(await poolSecrets(name), []);
      assert.equal(await tryRead('MachineDeployment', name), undefined);
    });
  }

  it('when an upgrade would skip a minor, it should block it (nothing rolls) and say so; a one-minor upgrade then goes through', async () => {
    await objects.create(pool('skew-upgrade', (p) => (p.spec.release.image = ignition.releases['1.34.2'] ?? '')));
    const before = await converged('skew-upgrade', (x) => x.status?.configHash !== undefined);
    await patchPool('skew-upgrade', { spec: { release: { image: 'registry.local:5000/kindling/release:v1.36.3' } } });
    const p = await converged('skew-upgrade', (x) => cond(x, 'SupportedVersionSkew')?.status === 'False');
    assert.equal(cond(p, 'SupportedVersionSkew')?.reason, 'UpgradeSkipsMinor');
    assert.match(cond(p, 'SupportedVersionSkew')?.message ?? '', /upgrade to a 1.35 release first/);
    assert.equal(p.status?.configHash, before.status?.configHash);
    const md = await read<MachineDeployment>('MachineDeployment', 'skew-upgrade');
    assert.equal(md.spec.template.spec.version, 'v1.34.2');
    assert.equal((await poolSecrets('skew-upgrade')).length, 2);
    await patchPool('skew-upgrade', { spec: { release: { image: ignition.releases['1.35.0'] } } });
    const upgraded = await converged(
      'skew-upgrade',
      (x) => cond(x, 'SupportedVersionSkew')?.status === 'True' && x.status?.configHash !== before.status?.configHash,
    );
    assert.equal(
      (await read<MachineDeployment>('MachineDeployment', 'skew-upgrade')).spec.template.spec.version,
      'v1.35.0',
    );
    assert.equal(upgraded.status?.version, 'v1.35.0');
  });

  it('when pausedUntil is a near date, it should pause the children and hold changes until then, then resume', async () => {
    const until = new Date(Date.now() + 4_000).toISOString().replace(/\.\d+Z$/, 'Z');
    await patchPool('replace-a', { spec: { pausedUntil: until } });
    await eventually(
      'the paused annotation',
      async () =>
        (await read<MachineDeployment>('MachineDeployment', 'replace-a')).metadata.annotations?.[
          ANNOTATIONS.capiPaused
        ] === 'true',
    );
    const p = await converged('replace-a', (x) => cond(x, 'ReconciliationActive')?.status === 'False');
    assert.equal(cond(p, 'ReconciliationActive')?.reason, 'Paused');
    await patchPool('replace-a', { spec: { replicas: 3 } });
    await new Promise((r) => setTimeout(r, 500));
    assert.equal((await read<MachineDeployment>('MachineDeployment', 'replace-a')).spec.replicas, 2);
    const md = await eventually(
      'the pause to end',
      async () => {
        const md = await read<MachineDeployment>('MachineDeployment', 'replace-a');
        return md.metadata.annotations?.[ANNOTATIONS.capiPaused] === undefined && md.spec.replicas === 3
          ? md
          : undefined;
      },
      15_000,
    );
    assert.equal(md.spec.replicas, 3);
    assert.equal(
      cond(
        await converged('replace-a', (x) => cond(x, 'ReconciliationActive')?.status === 'True'),
        'ReconciliationActive',
      )?.reason,
      'AsExpected',
    );
  });

  it('when one pool has a missing ConfigMap and another a bad release, they should get False conditions while a healthy pool next to them converges', async () => {
    await Promise.all([
      objects.create(pool('broken-cm', (p) => (p.spec.config = [{ name: 'does-not-exist' }]))),
      objects.create(
        pool('broken-release', (p) => (p.spec.release.image = 'registry.local:5000/kindling/release:latest')),
      ),
      objects.create(pool('healthy')),
    ]);
    const healthy = await converged('healthy', (x) => x.status?.configHash !== undefined);
    assert.ok(await tryRead('MachineDeployment', 'healthy'));
    const cm = await converged('broken-cm');
    assert.deepEqual(
      [cond(cm, 'ValidMachineConfig')?.status, cond(cm, 'ValidMachineConfig')?.reason],
      ['False', 'ConfigMapMissing'],
    );
    const rel = await converged('broken-release');
    assert.deepEqual(
      [cond(rel, 'ValidReleaseImage')?.status, cond(rel, 'ValidReleaseImage')?.reason],
      ['False', 'InvalidImage'],
    );
    assert.equal(await tryRead('MachineDeployment', 'broken-cm'), undefined);
    assert.ok(healthy.status?.configHash);
    await core.createNamespacedConfigMap({
      namespace: NS,
      body: { metadata: { name: 'does-not-exist' }, data: { config: KUBELET_CONFIG } },
    });
    await converged(
      'broken-cm',
      (x) => cond(x, 'ValidMachineConfig')?.status === 'True' && x.status?.configHash !== undefined,
    );
    assert.ok(await tryRead('MachineDeployment', 'broken-cm'));
  });

  it('when a ConfigMap is named by no pool, it should not hold it, and should hold one a pool names', async () => {
    const big = { data: { blob: 'x'.repeat(512 * 1024) } };
    await core.createNamespacedConfigMap({ namespace: NS, body: { metadata: { name: 'unreferenced-cm' }, ...big } });
    await core.createNamespacedConfigMap({ namespace: NS, body: { metadata: { name: 'referenced-cm' }, ...big } });
    await objects.create(pool('holds-cm', (p) => (p.spec.config = [{ name: 'referenced-cm' }])));
    const held = (): string[] => controller.caches.configMaps.list(NS, () => true).map((c) => c.metadata?.name ?? '');
    await eventually('the referenced ConfigMap held', () => Promise.resolve(held().includes('referenced-cm')));
    assert.equal(held().includes('unreferenced-cm'), false);
  });

  it("when a pool's ConfigMap is missing and then created, it should record a Warning Event naming ConfigMapMissing and then a Normal one", async () => {
    await objects.create(pool('events-a', (p) => (p.spec.config = [{ name: 'events-cm' }])));
    const poolEvents = async (): Promise<k8s.CoreV1Event[]> =>
      (
        await core.listNamespacedEvent({
          namespace: NS,
          fieldSelector: 'involvedObject.kind=NodePool,involvedObject.name=events-a',
        })
      ).items;
    const warning = await eventually('a Warning Event', async () =>
      (await poolEvents()).find((e) => e.type === 'Warning' && e.reason === 'ConfigMapMissing'),
    );
    assert.match(warning.message ?? '', /ValidMachineConfig is False: ConfigMap events-cm does not exist/);
    assert.equal(warning.source?.component, 'kindling-nodepool-controller');
    assert.equal(warning.reportingComponent, 'kindling-nodepool-controller');
    assert.equal(warning.involvedObject.uid, (await readPool('events-a')).metadata.uid);
    assert.equal((await poolEvents()).filter((e) => e.type === 'Normal').length, 0);
    await core.createNamespacedConfigMap({
      namespace: NS,
      body: { metadata: { name: 'events-cm' }, data: { config: KUBELET_CONFIG } },
    });
    const normal = await eventually('a Normal Event', async () =>
      (await poolEvents()).find((e) => e.type === 'Normal' && e.message?.startsWith('ValidMachineConfig')),
    );
    assert.equal(normal.reason, 'AsExpected');
    assert.match(normal.message ?? '', /ValidMachineConfig is True \(was False\)/);
    await converged('events-a', (x) => x.status?.configHash !== undefined && payloadGenerated(x));
    // A converged pool makes no more Events: a resync is no transition.
    const count = (await poolEvents()).length;
    controller.resyncAll();
    await new Promise((r) => setTimeout(r, 300));
    await controller.queue.drained();
    assert.equal((await poolEvents()).length, count);
  });

  it('when a pool is deleted, it should delete its children and Secrets, then let the pool go', async () => {
    await converged('inplace-a');
    await objects.delete({
      apiVersion: 'kindling.dev/v1beta1',
      kind: 'NodePool',
      metadata: { name: 'inplace-a', namespace: NS },
    });
    await eventually(
      'the pool to be gone',
      async () => (await tryRead('NodePool', 'inplace-a', 'kindling.dev/v1beta1')) === undefined,
    );
    assert.equal(await tryRead('MachineSet', 'inplace-a'), undefined);
    assert.deepEqual(await poolSecrets('inplace-a'), []);
  });

  it('when the controller stops mid-reconcile and a new one starts, it should converge to the same objects with no duplicates', async () => {
    await ignition.stop(); // the first controller stops while it waits for the token
    await objects.create(pool('restart', (p) => (p.spec.config = [{ name: 'kubelet-config' }])));
    const [waiting] = await eventually('the token Secret', async () => {
      const secrets = await poolSecrets('restart');
      return secrets.length === 1 ? secrets : undefined;
    });
    assert.equal(waiting?.data?.[SECRET_KEYS.token], undefined, 'no token while the ignition server is down');
    await controller.stop();
    await ignition.start();
    controller = await startController();
    const p = await converged('restart', (x) => x.status?.configHash !== undefined && payloadGenerated(x));
    const secrets = (await poolSecrets('restart')).map((s) => s.metadata?.name).sort();
    const hash = p.status?.configHash ?? '';
    assert.deepEqual(secrets, [tokenSecretName('restart', hash), userDataSecretName('restart', hash)]);
    // Same inputs as replace-a's first config: the same hash, whichever process computed it.
    const md = await read<MachineDeployment>('MachineDeployment', 'restart');
    assert.equal(md.spec.template.spec.bootstrap.dataSecretName, userDataSecretName('restart', hash));
    const writes = controller.writer.count;
    controller.resyncAll();
    await new Promise((r) => setTimeout(r, 300));
    await controller.queue.drained();
    assert.equal(controller.writer.count - writes, 0);
  });
  it('when the controller process is SIGKILLed at random moments while pools are created and changed, a restart should converge to the same objects and a resync then writes nothing', async () => {
    await controller.stop();
    const logFile = await open(join(dir, 'controller.log'), 'a');
    const bin = fileURLToPath(new URL('../../../bin/kindling.js', import.meta.url));
    const startChild = (): ChildProcess =>
      spawn(
        process.execPath,
        [
          bin,
          'nodepool-controller',
          '--kubeconfig',
          mgmt.kubeconfigPath,
          `--namespaces=${NS}`,
          '--ignition-endpoint',
          ignition.endpoint,
          '--ignition-ca-file',
          ignition.caFile,
          '--leader-elect=false',
          '--log-level',
          'warn',
        ],
        { stdio: ['ignore', logFile.fd, logFile.fd] },
      );
    /** Returns how the process ended: SIGKILL when it was still running (it must be, or the test proves nothing). */
    const kill = async (child: ChildProcess): Promise<string> => {
      if (child.exitCode !== null || child.signalCode !== null)
        return `exit ${child.exitCode ?? child.signalCode ?? ''}`;
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGKILL');
      await exited;
      return child.signalCode ?? `exit ${child.exitCode ?? ''}`;
    };
    const names = [0, 1, 2, 3, 4, 5].map((i) => `kill-${i}`);
    const inPlace = (i: number): boolean => i % 2 === 1;
    await core.createNamespacedConfigMap({
      namespace: NS,
      body: { metadata: { name: 'kill-cfg' }, data: { config: KUBELET_CONFIG } },
    });
    const rounds: (() => Promise<unknown>)[] = [
      () =>
        Promise.all(
          names.map((n, i) =>
            objects.create(
              pool(n, (p) => {
                if (i < 2) p.spec.config = [{ name: 'kill-cfg' }];
                if (inPlace(i)) p.spec.management = { upgradeType: 'InPlace' };
                p.spec.nodeLabels = { 'example.com/pool': n };
              }),
            ),
          ),
        ),
      () =>
        Promise.all([
          ...names.map((n) => patchPool(n, { spec: { replicas: 3 } })),
          core.patchNamespacedConfigMap(
            {
              name: 'kill-cfg',
              namespace: NS,
              body: { data: { config: KUBELET_CONFIG.replace('maxPods: 250', 'maxPods: 120') } },
            },
            MERGE,
          ),
        ]),
      () =>
        Promise.all(
          names.slice(2).map((n) =>
            patchPool(n, {
              spec: {
                nodeLabels: { 'example.com/pool': null, 'example.com/tier': 'gold' },
                replicas: n === 'kill-4' ? 1 : 3,
              },
            }),
          ),
        ),
      () => Promise.resolve(),
    ];
    const delays: number[] = [];
    const ends: string[] = [];
    try {
      for (const round of rounds) {
        const child = startChild();
        const delay = 200 + Math.floor(Math.random() * 2300);
        delays.push(delay);
        await Promise.all([round(), new Promise((r) => setTimeout(r, delay))]);
        ends.push(await kill(child));
      }
      assert.deepEqual(
        ends,
        rounds.map(() => 'SIGKILL'),
        `every controller was running when killed (delays ${delays.join(', ')} ms)`,
      );
      const survivor = startChild();
      try {
        const config = normaliseConfig([
          {
            name: 'kill-cfg',
            data: (await core.readNamespacedConfigMap({ name: 'kill-cfg', namespace: NS })).data ?? {},
          },
        ]);
        const release = pool('x').spec.release.image;
        const expected = (i: number): string => configHash({ release, config: i < 2 ? config : normaliseConfig([]) });
        await Promise.all(
          names.map((n, i) =>
            eventually(
              `${n} to converge after SIGKILLs at ${delays.join(', ')} ms`,
              async () => {
                const p = await readPool(n);
                return (
                  p.status?.observedGeneration === p.metadata.generation &&
                  p.status?.configHash === expected(i) &&
                  payloadGenerated(p)
                );
              },
              60_000,
            ),
          ),
        );
        // Every token Secret, old ones too, has the server's payload verdict: nothing of the server's is still to come.
        await Promise.all(
          names.map((n) =>
            eventually(`${n}'s payload verdicts`, async () =>
              (await poolSecrets(n))
                .filter((s) => s.metadata?.labels?.[LABELS.tokenSecret] === 'true')
                .every((s) => s.metadata?.annotations?.[ANNOTATIONS.payloadReason] !== undefined),
            ),
          ),
        );
        for (const [i, n] of names.entries()) await assertPoolConverged(n, expected(i), inPlace(i));
      } finally {
        const exited = new Promise((r) => survivor.once('exit', r));
        survivor.kill('SIGTERM');
        await exited;
      }
      // A fresh controller's first pass over every pool is a full resync: it must find everything in place.
      const snapshot = async (): Promise<string[]> => {
        const all = (
          await Promise.all(
            names.map(async (n) => [await readPool(n), ...(await poolSecrets(n)), await read(inPlaceKind(n), n)]),
          )
        ).flat();
        return all
          .map((o) => `${o.kind ?? 'Secret'}/${o.metadata?.name ?? ''}@${o.metadata?.resourceVersion ?? ''}`)
          .sort();
      };
      const before = await snapshot();
      controller = await startController();
      await new Promise((r) => setTimeout(r, 500));
      await controller.queue.drained();
      assert.equal(controller.writer.count, 0, 'writes by a fresh controller over converged pools');
      assert.deepEqual(await snapshot(), before);
    } finally {
      await logFile.close();
    }
  });

  const inPlaceKind = (name: string): string =>
    Number(name.split('-').pop()) % 2 === 1 ? 'MachineSet' : 'MachineDeployment';

  // eslint-disable-next-line complexity -- optional chaining in assertions counts as branches
  async function assertPoolConverged(name: string, hash: string, inPlace: boolean): Promise<void> {
    const p = await readPool(name);
    const secrets = await poolSecrets(name);
    const current = secrets
      .filter((x) => x.metadata?.labels?.[LABELS.configHash] === hash)
      .map((x) => x.metadata?.name)
      .sort();
    assert.deepEqual(
      current,
      [tokenSecretName(name, hash), userDataSecretName(name, hash)],
      `${name}: one token and one user-data Secret at the current hash`,
    );
    for (const old of secrets.filter((x) => x.metadata?.labels?.[LABELS.configHash] !== hash)) {
      // Only old tokens may remain (until their expiry); old user-data nothing references is gone.
      assert.equal(old.metadata?.labels?.[LABELS.tokenSecret], 'true', `${name}: leftover ${old.metadata?.name ?? ''}`);
      assert.ok(
        old.metadata?.annotations?.[ANNOTATIONS.tokenExpiresAt],
        `${name}: old token ${old.metadata?.name ?? ''} has an expiry`,
      );
    }
    const token = Buffer.from(
      secrets.find((x) => x.metadata?.name === tokenSecretName(name, hash))?.data?.[SECRET_KEYS.token] ?? '',
      'base64',
    ).toString();
    assert.ok(
      (await userDataStub(userDataSecretName(name, hash))).stub.includes(`Bearer ${token}`),
      `${name}: the user-data carries the current token`,
    );
    const child = await read<MachineSet | MachineDeployment>(inPlace ? 'MachineSet' : 'MachineDeployment', name);
    assert.equal(await tryRead(inPlace ? 'MachineDeployment' : 'MachineSet', name), undefined);
    assert.equal(child.spec.template.spec.bootstrap.dataSecretName, userDataSecretName(name, hash));
    assert.equal(child.spec.replicas, p.spec.replicas);
    assert.deepEqual(
      Object.keys(child.spec.template.metadata?.labels ?? {}).filter((k) => k.startsWith('example.com/')),
      Object.keys(p.spec.nodeLabels ?? {}),
    );
    if (inPlace) assert.equal(child.metadata.annotations?.[ANNOTATIONS.targetConfigHash], hash);
    assert.equal(cond(p, 'ValidMachineConfig')?.status, 'True');
    assert.deepEqual(p.metadata.finalizers, [NODEPOOL_FINALIZER]);
  }
});
