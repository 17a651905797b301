/**
 * skip-remediation under the real Cluster API manager (v1.14.2) and a real MachineHealthCheck: a Machine whose
 * Node Kindling's extension is updating in place (UpdateMachine over HTTPS, the test making the Machine
 * controller's calls) is left alone while its Node is NotReady past the health check's timeout, while a
 * Machine beside it, NotReady for the same spell and not being updated, is remediated; once the update is
 * done, the same Machine is remediated again when its Node goes NotReady.
 *
 * The MachineHealthCheck judges a Node only when the Cluster's ControlPlaneInitialized and InfrastructureReady
 * conditions are True (core/reconcilers/machinehealthcheck/machinehealthcheck_targets.go, needsRemediation),
 * and reads Nodes through the cluster cache, which connects once the Cluster's infrastructure is provisioned:
 * the test plays the infrastructure and control-plane providers (LocalCluster and LocalControlPlane status)
 * and the infrastructure provider of each Machine (LocalMachine providerID and provisioned), so Cluster API's
 * own controllers set those conditions and each Machine's nodeRef. KWOK keeps the Nodes; a Node annotated
 * host-down stops heartbeating and turns Ready=Unknown.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as k8s from '#k8s';
import { Registry } from 'prom-client';
import { CAPI_API_VERSION, CAPI_GROUP } from '../../../api/src/capi.js';
import { ANNOTATIONS, LABELS, SKIP_REMEDIATION_INPLACE } from '../../../api/src/keys.js';
import { createApplier } from '../../../support/src/apply.js';
import { createLogger } from '../../../support/src/logger.js';
import { Drainer } from '../../../drainer/src/drainer.js';
import { createTestMachine, eventually } from '../../../drainer/testing/index.js';
import { LOCAL_CRD_DIR } from '../../../local/src/crds.js';
import {
  SIMULATION,
  installCapiCrds,
  installCrds,
  installKindlingCrds,
  startCapiManager,
  startCluster,
  type CapiManager,
  type Cluster,
} from '../../../test/bed/src/index.js';
import {
  AgentFleet,
  beginInPlaceUpdate,
  callHook,
  clusterApiNodePool,
  machineConfig,
  runExtension,
  tokenSecret,
  updateMachineRequest,
  type ExtensionFixture,
  type HookAnswer,
} from '../../testing/index.js';
import { runIgnitionServer, type IgnitionServer } from '../../../ignition-server/testing/index.js';
import { handlerPath, HOOKS_API_VERSION } from './hooks.js';

const NS = 'default';
const CLUSTER = 'tenant';
const POOL = 'pool';
/** The Machine Kindling updates, and the one beside it nobody updates (the control). */
const [UPDATED, CONTROL] = ['updated', 'control'];
const UNHEALTHY_AFTER_S = 10;
/** The MachineHealthCheck controller reconciles at most once per 15 s (its rate limit): a spell lasts several. */
const SPELL_MS = 45_000;
const merge = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch);
const log = createLogger({ name: 'update-machine-mhc-test', level: 'warn' });

interface Condition {
  type: string;
  status: string;
  reason?: string;
}
interface MachineObject {
  metadata: k8s.V1ObjectMeta & { name: string };
  status?: { phase?: string; nodeRef?: { name: string }; conditions?: Condition[] };
}

const providerId = (name: string): string => `kindling-local://${NS}/${name}`;

function payload(version: string): object {
  return {
    ignition: { version: '3.4.0' },
    storage: {
      files: [
        { path: '/etc/kindling/version', overwrite: true, mode: 0o644, contents: { source: `data:,${version}` } },
      ],
    },
  };
}

/** The pool's health check: Ready False or Unknown for UNHEALTHY_AFTER_S; no startup timeout (the test makes the Nodes). */
const healthCheck = {
  apiVersion: CAPI_API_VERSION,
  kind: 'MachineHealthCheck',
  metadata: { name: POOL, namespace: NS },
  spec: {
    clusterName: CLUSTER,
    selector: { matchLabels: { [LABELS.nodePool]: POOL } },
    checks: {
      nodeStartupTimeoutSeconds: 0,
      unhealthyNodeConditions: [
        { type: 'Ready', status: 'False', timeoutSeconds: UNHEALTHY_AFTER_S },
        { type: 'Ready', status: 'Unknown', timeoutSeconds: UNHEALTHY_AFTER_S },
      ],
    },
  },
};

describe('a MachineHealthCheck while a node is updated in place', { timeout: 20 * 60_000 }, () => {
  let mgmt: Cluster;
  let guest: Cluster;
  let capi: CapiManager;
  let ignition: IgnitionServer;
  let ext: ExtensionFixture;
  let fleet: AgentFleet;
  let drainer: Drainer;
  let custom: k8s.CustomObjectsApi;
  let dir: string;

  const apply = (o: object): Promise<unknown> => createApplier(mgmt.kubeConfig, 'kindling-test').apply(o);
  const applyStatus = (o: object): Promise<unknown> => createApplier(mgmt.kubeConfig, 'kindling-test').applyStatus(o);
  const guestCore = (): k8s.CoreV1Api => guest.kubeConfig.makeApiClient(k8s.CoreV1Api);
  const machine = async (name: string): Promise<MachineObject> =>
    (await custom.getNamespacedCustomObject({
      group: CAPI_GROUP,
      version: 'v1beta2',
      namespace: NS,
      plural: 'machines',
      name,
    })) as MachineObject;
  const conditionOf = (m: MachineObject, type: string): Condition | undefined =>
    m.status?.conditions?.find((c) => c.type === type);
  /** Marked by the MachineHealthCheck: its check failed, and it asks the Machine's owner to remediate. */
  const remediated = (m: MachineObject): boolean =>
    conditionOf(m, 'HealthCheckSucceeded')?.status === 'False' || conditionOf(m, 'OwnerRemediated')?.status === 'False';
  const describeMachine = (m: MachineObject): string =>
    JSON.stringify({
      name: m.metadata.name,
      annotations: m.metadata.annotations,
      conditions: m.status?.conditions?.map((c) => `${c.type}=${c.status}/${c.reason ?? ''}`),
    });
  const setHostDown = (node: string, down: boolean): Promise<unknown> =>
    guestCore().patchNode(
      { name: node, body: { metadata: { annotations: { [SIMULATION.hostDown]: down ? 'true' : null } } } },
      merge,
    );
  const nodeReady = async (node: string): Promise<string | undefined> =>
    (await guestCore().readNode({ name: node })).status?.conditions?.find((c) => c.type === 'Ready')?.status;
  const updateMachine = async (name: string, hash: string): Promise<HookAnswer> =>
    (
      await callHook(
        ext,
        handlerPath('UpdateMachine'),
        updateMachineRequest({ namespace: NS, pool: POOL, cluster: CLUSTER, machine: name, hash }),
      )
    ).answer;
  const mhcTargets = async (): Promise<string[] | undefined> =>
    (
      (await custom.getNamespacedCustomObject({
        group: CAPI_GROUP,
        version: 'v1beta2',
        namespace: NS,
        plural: 'machinehealthchecks',
        name: POOL,
      })) as { status?: { targets?: string[] } }
    ).status?.targets;

  /** The Machine controller's loop for one Machine (retryAfterSeconds shortened) until `until` holds. */
  async function driveMachine(
    name: string,
    hash: string,
    until: (a: HookAnswer) => boolean,
    timeoutMs = 180_000,
  ): Promise<HookAnswer[]> {
    const answers: HookAnswer[] = [];
    for (const deadline = Date.now() + timeoutMs; Date.now() < deadline;) {
      const a = await updateMachine(name, hash);
      answers.push(a);
      if (until(a)) return answers;
      await new Promise((r) => setTimeout(r, 500));
    }
    throw new Error(`${name} did not get there for ${hash}: last answers ${JSON.stringify(answers.slice(-3))}`);
  }

  /** Takes a Node down until it reports Ready=Unknown (KWOK stops its heartbeat). */
  async function takeDown(node: string): Promise<void> {
    await setHostDown(node, true);
    await eventually(`${node} NotReady`, async () => (await nodeReady(node)) === 'Unknown', 60_000, 250);
  }

  /** The test as the infrastructure and control-plane providers: both report ready, as the local providers do. */
  async function provideCluster(): Promise<void> {
    // Right after start the new CRDs can still answer 429 (storage initialising): apply until accepted.
    await eventually(
      "the providers' objects to be accepted",
      async () => {
        await apply({
          apiVersion: 'infrastructure.kindling.dev/v1alpha1',
          kind: 'LocalCluster',
          metadata: { name: CLUSTER, namespace: NS },
          spec: {},
        });
        await apply({
          apiVersion: 'controlplane.kindling.dev/v1alpha1',
          kind: 'LocalControlPlane',
          metadata: { name: CLUSTER, namespace: NS },
          spec: { adminKubeconfigSecretRef: { name: `${CLUSTER}-kubeconfig` } },
        });
        return true;
      },
      // A loaded machine (CI runs two cluster suites at once on 2 cores) has taken longer than 30 s.
      120_000,
      250,
    );
    await applyStatus({
      apiVersion: 'infrastructure.kindling.dev/v1alpha1',
      kind: 'LocalCluster',
      metadata: { name: CLUSTER, namespace: NS },
      status: { initialization: { provisioned: true } },
    });
    await applyStatus({
      apiVersion: 'controlplane.kindling.dev/v1alpha1',
      kind: 'LocalControlPlane',
      metadata: { name: CLUSTER, namespace: NS },
      status: { initialization: { controlPlaneInitialized: true }, externalManagedControlPlane: true },
    });
    await apply({
      apiVersion: CAPI_API_VERSION,
      kind: 'Cluster',
      metadata: { name: CLUSTER, namespace: NS },
      spec: {
        infrastructureRef: { apiGroup: 'infrastructure.kindling.dev', kind: 'LocalCluster', name: CLUSTER },
        controlPlaneRef: { apiGroup: 'controlplane.kindling.dev', kind: 'LocalControlPlane', name: CLUSTER },
      },
    });
  }

  /** A Machine with its LocalMachine (providerID, provisioned) and its Node: Cluster API sets the nodeRef. */
  async function provideMachine(name: string): Promise<void> {
    await guestCore().createNode({
      body: { metadata: { name, labels: { 'kubernetes.io/hostname': name } }, spec: { providerID: providerId(name) } },
    });
    await apply({
      apiVersion: 'infrastructure.kindling.dev/v1alpha1',
      kind: 'LocalMachine',
      metadata: { name, namespace: NS },
      spec: { providerID: providerId(name) },
    });
    await applyStatus({
      apiVersion: 'infrastructure.kindling.dev/v1alpha1',
      kind: 'LocalMachine',
      metadata: { name, namespace: NS },
      status: { initialization: { provisioned: true } },
    });
    await guestCore().patchNode(
      { name, body: { metadata: { annotations: { [ANNOTATIONS.currentConfig]: 'h0', [ANNOTATIONS.state]: 'Done' } } } },
      merge,
    );
    await createTestMachine(mgmt.kubeConfig, { name, namespace: NS, cluster: CLUSTER, machineSet: POOL });
  }

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'kindling-mhc-'));
    mgmt = await startCluster({ name: 'mgmt', controllerManager: false });
    [guest] = await Promise.all([
      startCluster({ name: CLUSTER, kwok: true, management: { cluster: mgmt, namespace: NS } }),
      installCapiCrds(mgmt),
      installCrds(mgmt, LOCAL_CRD_DIR),
      installKindlingCrds(mgmt),
    ]);
    capi = await startCapiManager(mgmt);
    custom = mgmt.kubeConfig.makeApiClient(k8s.CustomObjectsApi);
    await provideCluster();
    await apply(clusterApiNodePool({ namespace: NS, pool: POOL, cluster: CLUSTER }));
    for (const name of [UPDATED, CONTROL]) await provideMachine(name);
    await eventually(
      'both Machines Running with their Nodes',
      async () => {
        const ms = await Promise.all([UPDATED, CONTROL].map(machine));
        return ms.every((m) => m.status?.phase === 'Running' && m.status.nodeRef?.name === m.metadata.name);
      },
      3 * 60_000,
      1000,
    );
    await apply(healthCheck);
    await eventually(
      'the MachineHealthCheck to find both Machines healthy',
      async () => {
        const ms = await Promise.all([UPDATED, CONTROL].map(machine));
        return ms.every((m) => conditionOf(m, 'HealthCheckSucceeded')?.status === 'True');
      },
      2 * 60_000,
      1000,
    ).catch(async (err: unknown) => {
      const mhc = (await custom.getNamespacedCustomObject({
        group: CAPI_GROUP,
        version: 'v1beta2',
        namespace: NS,
        plural: 'machinehealthchecks',
        name: POOL,
      })) as object;
      const cluster = (await custom.getNamespacedCustomObject({
        group: CAPI_GROUP,
        version: 'v1beta2',
        namespace: NS,
        plural: 'clusters',
        name: CLUSTER,
      })) as object;
      throw new Error(
        `${String(err)}: ${JSON.stringify(mhc)} ${JSON.stringify(cluster)} ${describeMachine(await machine(UPDATED))}\n${capi.process.tail(60)}`,
        { cause: err },
      );
    });
    ignition = await runIgnitionServer({
      kubeconfigPath: mgmt.kubeconfigPath,
      dir: join(dir, 'ignition-server'),
      namespace: NS,
    });
    // The pool's release is the one its token Secrets name, known once the ignition server has built it.
    await apply(clusterApiNodePool({ namespace: NS, pool: POOL, cluster: CLUSTER, release: ignition.release }));
    fleet = new AgentFleet({ guest: guest.kubeConfig, rootsDir: join(dir, 'roots') });
    await fleet.start();
    drainer = new Drainer({
      kubeConfig: mgmt.kubeConfig,
      namespaces: [NS],
      log,
      registry: new Registry(),
      defaultDrainTimeoutMs: 0,
    });
    ext = await runExtension({
      kubeconfigPath: mgmt.kubeconfigPath,
      namespaces: NS,
      dir: join(dir, 'extension'),
      ignition,
    });
  });

  after(async () => {
    await Promise.all([ext?.stop(), drainer?.stop(), fleet?.stop(), ignition?.stop()]);
    await capi?.stop();
    await Promise.all([guest?.stop(), mgmt?.stop()]);
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('when two Nodes stay NotReady past the timeout and one is being updated in place, it should remediate only the other; once the update is done, it should remediate that one too', async () => {
    const { hash: h1, secret } = await tokenSecret(mgmt.kubeConfig, {
      namespace: NS,
      pool: POOL,
      cluster: CLUSTER,
      release: ignition.release,
      config: [machineConfig('50-test', payload('v1'))],
    });
    await mgmt.kubeConfig.makeApiClient(k8s.CoreV1Api).createNamespacedSecret({ namespace: NS, body: secret });
    await beginInPlaceUpdate(mgmt.kubeConfig, { namespace: NS, machine: UPDATED, pool: POOL, hash: h1 });
    // Handed out, the update waits for its drain: the drainer starts only once the spell is over, so the update
    // is under way for the whole spell however fast the agent would be.
    await eventually(
      `${UPDATED} handed ${h1}`,
      async () => {
        const a = await updateMachine(UPDATED, h1);
        assert.ok(
          a.status === 'Success' && a.retryAfterSeconds > 0,
          `the update did not stay in progress: ${JSON.stringify(a)}`,
        );
        return (
          (await guestCore().readNode({ name: UPDATED })).metadata?.annotations?.[ANNOTATIONS.desiredConfig] === h1
        );
      },
      60_000,
      500,
    );
    assert.equal(
      (await machine(UPDATED)).metadata.annotations?.[ANNOTATIONS.capiSkipRemediation],
      SKIP_REMEDIATION_INPLACE,
      'the Machine was handed out without skip-remediation',
    );

    // The same NotReady spell on both: the host being updated (its reboot, say, taking long) and the other.
    await Promise.all([UPDATED, CONTROL].map(takeDown));
    const spellStart = Date.now();
    // The control: the health check remediates a Machine whose Node is NotReady past its timeout.
    await eventually(`${CONTROL} remediated`, async () => remediated(await machine(CONTROL)), 3 * 60_000, 1000).catch(
      async (err: unknown) => assert.fail(`${String(err)}: ${describeMachine(await machine(CONTROL))}`),
    );
    assert.deepEqual(
      await mhcTargets(),
      [CONTROL],
      'the health check should leave the Machine being updated out of its targets',
    );
    // The Machine under update stays untouched for the whole spell, while Cluster API keeps asking UpdateMachine.
    while (Date.now() - spellStart < SPELL_MS) {
      const now = await machine(UPDATED);
      assert.ok(
        !now.metadata.deletionTimestamp && !remediated(now),
        `${UPDATED} was remediated while updated in place: ${describeMachine(now)}`,
      );
      assert.equal(await nodeReady(UPDATED), 'Unknown', 'the NotReady spell did not last');
      const answer = await updateMachine(UPDATED, h1);
      assert.ok(
        answer.status === 'Success' && answer.retryAfterSeconds > 0,
        `the update ended during the spell: ${JSON.stringify(answer)}`,
      );
      await new Promise((r) => setTimeout(r, 2000));
    }

    // The host comes back, the update finishes and the Machine is given back to the health check ...
    await setHostDown(UPDATED, false);
    await drainer.start();
    const done = await driveMachine(UPDATED, h1, (a) => a.status === 'Failure' || a.retryAfterSeconds === 0);
    assert.deepEqual(done.at(-1), {
      apiVersion: HOOKS_API_VERSION,
      kind: 'UpdateMachineResponse',
      status: 'Success',
      retryAfterSeconds: 0,
      message: `Node ${UPDATED} is at ${h1}`,
    });
    assert.equal(
      (await machine(UPDATED)).metadata.annotations?.[ANNOTATIONS.capiSkipRemediation],
      undefined,
      'the Machine is still spared once its update is done',
    );
    await eventually(
      `${UPDATED} healthy again`,
      async () => conditionOf(await machine(UPDATED), 'HealthCheckSucceeded')?.status === 'True',
      2 * 60_000,
      1000,
    );
    // ... which remediates it when its Node goes NotReady again.
    await takeDown(UPDATED);
    await eventually(
      `${UPDATED} remediated once its update is done`,
      async () => remediated(await machine(UPDATED)),
      3 * 60_000,
      1000,
    ).catch(async (err: unknown) => assert.fail(`${String(err)}: ${describeMachine(await machine(UPDATED))}`));
  });
});
