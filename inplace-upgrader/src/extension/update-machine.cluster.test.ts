/**
 * UpdateMachine on the real test bed, with the extension as its own process (`kindling inplace-upgrader
 * --extension-address`) called over HTTPS as the Cluster API manager calls it: a management cluster with
 * the Cluster API CRDs (Machines with nodeRef; no Cluster API controller here: the test plays the
 * Machine controller's calls, marking each Machine for its update first as Cluster API does), a guest cluster
 * with KWOK and kube-scheduler, the real ignition server rendering each payload, the drainer, and a real
 * `kindling agent` process per node against its own scratch root. An attacker on the extension's port forges
 * requests for Machines Cluster API is not updating, or of another pool.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as k8s from '#k8s';
import { Registry } from 'prom-client';
import { CAPI_API_VERSION } from '../../../api/src/capi.js';
import {
  ANNOTATIONS,
  LABELS,
  SKIP_REMEDIATION_INPLACE,
  bootstrapTemplateName,
  userDataSecretName,
} from '../../../api/src/keys.js';
import { BOOTSTRAP_GROUP_NAME } from '../../../api/src/bootstrap.js';
import { createLogger } from '../../../support/src/logger.js';
import { Drainer } from '../../../drainer/src/drainer.js';
import { createTestMachine, createTestNode, eventually, testPodFor } from '../../../drainer/testing/index.js';
import { startCluster, installCapiCrds, installKindlingCrds, type Cluster } from '../../../test/bed/src/index.js';
import { agentPodName, GUEST_NAMESPACE } from '../../../api/src/node-agent.js';
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
  type HookAnswer as Answer,
} from '../../testing/index.js';
import { runIgnitionServer, type IgnitionServer } from '../../../ignition-server/testing/index.js';
import { MAX_BODY_BYTES } from './app.js';
import { HANDLERS, HOOKS_API_VERSION, hookPath } from './hooks.js';

const NS = 'default';
const POOL = 'pool';
const NODES = ['n1', 'n2', 'n3'];
/** A Replace pool's Machine and node, next to the ClusterAPI-engine pool's. */
const REPLACE = { pool: 'replace', machine: 'replace-r1', node: 'r1' };
const UPDATE_PATH = hookPath('UpdateMachine', HANDLERS[2]?.name);
const merge = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch);
/** The health gate's timeout the pool's MachineDeployment carries (as the nodepool-controller writes it). */
const GATE_TIMEOUT = '2m';
const log = createLogger({ name: 'update-machine-test', level: 'warn' });

function payload(version: string, extraFiles: object[] = []): object {
  return {
    ignition: { version: '3.4.0' },
    storage: {
      files: [
        { path: '/etc/kindling/version', overwrite: true, mode: 0o644, contents: { source: `data:,${version}` } },
        ...extraFiles,
      ],
    },
    systemd: {
      units: [
        {
          name: 'kindling-demo.service',
          enabled: true,
          contents: `[Service]\nExecStart=/bin/echo ${version}\n[Install]\nWantedBy=multi-user.target\n`,
        },
      ],
    },
  };
}

/** The pool's MachineDeployment, as far as UpdateMachine reads it: its annotations. */
function machineDeployment(): k8s.KubernetesObject {
  return {
    apiVersion: CAPI_API_VERSION,
    kind: 'MachineDeployment',
    metadata: { name: POOL, namespace: NS, annotations: { [ANNOTATIONS.healthCheckTimeout]: GATE_TIMEOUT } },
    spec: {
      clusterName: 'tenant',
      selector: { matchLabels: { [LABELS.nodePool]: POOL } },
      template: {
        metadata: { labels: { [LABELS.nodePool]: POOL } },
        spec: {
          clusterName: 'tenant',
          bootstrap: { dataSecretName: userDataSecretName(POOL, 'h0') },
          infrastructureRef: { apiGroup: 'infrastructure.kindling.dev', kind: 'LocalMachineTemplate', name: 'small' },
        },
      },
    },
  } as k8s.KubernetesObject;
}

describe('UpdateMachine through the Runtime Extension', () => {
  let mgmt: Cluster;
  let guest: Cluster;
  let ignition: IgnitionServer;
  let ext: ExtensionFixture;
  let fleet: AgentFleet;
  let drainer: Drainer;
  let core: k8s.CoreV1Api;
  let custom: k8s.CustomObjectsApi;
  let dir: string;
  /** Every answer's time, across the suite. */
  const times: number[] = [];

  const annotationsOf = async (node: string): Promise<Record<string, string>> =>
    (await core.readNode({ name: node })).metadata?.annotations ?? {};
  const machineAnnotations = async (node: string, name = `${POOL}-${node}`): Promise<Record<string, string>> =>
    (
      (await custom.getNamespacedCustomObject({
        group: 'cluster.x-k8s.io',
        version: 'v1beta2',
        namespace: NS,
        plural: 'machines',
        name,
      })) as k8s.KubernetesObject
    ).metadata?.annotations ?? {};
  const setPaused = (paused: boolean): Promise<unknown> =>
    custom.patchNamespacedCustomObject(
      {
        group: 'cluster.x-k8s.io',
        version: 'v1beta2',
        namespace: NS,
        plural: 'machinedeployments',
        name: POOL,
        body: { metadata: { annotations: { [ANNOTATIONS.capiPaused]: paused ? 'true' : null } } },
      },
      merge,
    );
  /** The MachineDeployment's template on the pool's KindlingConfigTemplate at `hash`, as the nodepool-controller
   * writes a ClusterAPI-engine pool's; undefined: back to the data Secret the suite starts with. */
  const setTemplateHash = (hash: string | undefined): Promise<unknown> =>
    custom.patchNamespacedCustomObject(
      {
        group: 'cluster.x-k8s.io',
        version: 'v1beta2',
        namespace: NS,
        plural: 'machinedeployments',
        name: POOL,
        body: {
          spec: {
            template: {
              spec: {
                bootstrap:
                  hash === undefined
                    ? { configRef: null, dataSecretName: userDataSecretName(POOL, 'h0') }
                    : {
                        dataSecretName: null,
                        configRef: {
                          apiGroup: BOOTSTRAP_GROUP_NAME,
                          kind: 'KindlingConfigTemplate',
                          name: bootstrapTemplateName(POOL, hash),
                        },
                      },
              },
            },
          },
        },
      },
      merge,
    );
  const fileOn = (node: string, path: string): Promise<string> => readFile(join(fleet.rootOf(node), path), 'utf8');
  const updateMachine = async (node: string, hash: string, machine = `${POOL}-${node}`): Promise<Answer> => {
    const { answer, ms } = await callHook(
      ext,
      UPDATE_PATH,
      updateMachineRequest({ namespace: NS, pool: POOL, cluster: 'tenant', machine, hash, version: 'v1.36.3' }),
    );
    times.push(ms);
    return answer;
  };
  /** What the guest holds of an agent's work for a node: its annotations, agent Pods and payload Secrets. */
  const guestTraces = async (node: string): Promise<object> => ({
    annotations: await annotationsOf(node),
    pods: (await core.listNamespacedPod({ namespace: GUEST_NAMESPACE })).items.map((p) => p.metadata?.name),
    secrets: (
      await core.listNamespacedSecret({ namespace: GUEST_NAMESPACE, labelSelector: LABELS.payloadSecret })
    ).items.map((x) => x.metadata?.name),
  });

  /** The config hash of each published target, by the name the test gives it (h0, the nodes' first, is never published). */
  const hashes = new Map<string, string>();
  const h = (name: string): string => hashes.get(name) ?? name;
  /** What the nodepool-controller does for a new config: the token Secret, from which the server renders the payload. */
  const publish = async (name: string, config: object): Promise<void> => {
    const { hash, secret } = await tokenSecret(mgmt.kubeConfig, {
      namespace: NS,
      pool: POOL,
      cluster: 'tenant',
      release: ignition.release,
      config: [machineConfig('50-test', config)],
    });
    hashes.set(name, hash);
    await mgmt.kubeConfig.makeApiClient(k8s.CoreV1Api).createNamespacedSecret({ namespace: NS, body: secret });
  };

  /**
   * The Machine controller's loop for one Machine: call, wait retryAfterSeconds (shortened), call again,
   * until Success with 0 or Failure. Returns every answer.
   */
  async function driveMachine(
    node: string,
    hash: string,
    until: (a: Answer) => boolean = (a) => a.status === 'Failure' || a.retryAfterSeconds === 0,
    timeoutMs = 120_000,
  ): Promise<Answer[]> {
    const answers: Answer[] = [];
    await beginInPlaceUpdate(mgmt.kubeConfig, { namespace: NS, machine: `${POOL}-${node}`, pool: POOL, hash });
    // Cluster API's marks reach the extension's caches through a watch: until then it refuses, and the caller retries.
    const seenBy = Date.now() + 10_000;
    for (const deadline = Date.now() + timeoutMs; Date.now() < deadline;) {
      const a = await updateMachine(node, hash);
      const stale = /^refused \((NotUpdatingInPlace|UnknownKindlingConfig|HashMismatch)\)/.test(a.message);
      if (stale && Date.now() < seenBy) {
        await new Promise((r) => setTimeout(r, 100));
        continue;
      }
      answers.push(a);
      if (until(a)) return answers;
      await new Promise((r) => setTimeout(r, Math.min(a.retryAfterSeconds * 1000, 300)));
    }
    throw new Error(`${node} did not reach ${hash}: last answers ${JSON.stringify(answers.slice(-3))}`);
  }

  before(async () => {
    mgmt = await startCluster({ name: 'mgmt', controllerManager: false });
    // The guest's kube-scheduler places each node's workload pod (its controller-manager lifts new Nodes' not-ready taint).
    [guest] = await Promise.all([
      startCluster({ name: 'tenant', kwok: true, scheduler: true, management: { cluster: mgmt, namespace: NS } }),
      installCapiCrds(mgmt),
      installKindlingCrds(mgmt),
    ]);
    core = guest.kubeConfig.makeApiClient(k8s.CoreV1Api);
    custom = mgmt.kubeConfig.makeApiClient(k8s.CustomObjectsApi);
    const objects = k8s.KubernetesObjectApi.makeApiClient(mgmt.kubeConfig);
    await objects.create(machineDeployment());
    const replacePool = clusterApiNodePool({ namespace: NS, pool: REPLACE.pool, cluster: 'tenant' });
    replacePool.spec.management = { upgradeType: 'Replace' };
    await objects.create(replacePool);
    await createTestNode(guest.kubeConfig, REPLACE.node);
    await createTestMachine(mgmt.kubeConfig, {
      name: REPLACE.machine,
      namespace: NS,
      cluster: 'tenant',
      machineSet: REPLACE.pool,
      node: REPLACE.node,
    });
    dir = await mkdtemp(join(tmpdir(), 'kindling-extension-'));
    ignition = await runIgnitionServer({
      kubeconfigPath: mgmt.kubeconfigPath,
      dir: join(dir, 'ignition-server'),
      namespace: NS,
    });
    await objects.create(
      clusterApiNodePool({ namespace: NS, pool: POOL, cluster: 'tenant', release: ignition.release }),
    );
    await Promise.all(
      NODES.map(async (name, i) => {
        await createTestNode(guest.kubeConfig, name, { [LABELS.zone]: `zone-${i}` });
        await core.patchNode(
          {
            name,
            body: { metadata: { annotations: { [ANNOTATIONS.currentConfig]: 'h0', [ANNOTATIONS.state]: 'Done' } } },
          },
          merge,
        );
        await core.createNamespacedPod({ namespace: NS, body: testPodFor(`work-${name}`, name) });
        await createTestMachine(mgmt.kubeConfig, {
          name: `${POOL}-${name}`,
          namespace: NS,
          cluster: 'tenant',
          machineSet: POOL,
          node: name,
        });
        // A Machine of the pool's MachineDeployment, as Cluster API labels it.
        const body = { metadata: { labels: { [LABELS.capiDeploymentName]: POOL } } };
        await custom.patchNamespacedCustomObject(
          {
            group: 'cluster.x-k8s.io',
            version: 'v1beta2',
            namespace: NS,
            plural: 'machines',
            name: `${POOL}-${name}`,
            body,
          },
          merge,
        );
      }),
    );
    await eventually(
      'a workload pod running on each node',
      async () => {
        const pods = (await core.listNamespacedPod({ namespace: NS })).items;
        return NODES.every((n) =>
          pods.some((p) => p.metadata?.name === `work-${n}` && p.spec?.nodeName === n && p.status?.phase === 'Running'),
        );
      },
      60_000,
    );
    fleet = new AgentFleet({ guest: guest.kubeConfig, rootsDir: join(dir, 'roots') });
    await fleet.start();
    drainer = new Drainer({
      kubeConfig: mgmt.kubeConfig,
      namespaces: [NS],
      log,
      registry: new Registry(),
      defaultDrainTimeoutMs: 0,
    });
    await drainer.start();
    ext = await runExtension({
      kubeconfigPath: mgmt.kubeconfigPath,
      namespaces: NS,
      dir: join(dir, 'extension'),
      ignition,
    });
    // The first target: the forged requests below aim it at nodes it is not for.
    await publish('h1', payload('v1'));
  });

  after(async () => {
    await Promise.all([ext?.stop(), drainer?.stop(), fleet?.stop(), ignition?.stop()]);
    await Promise.all([guest?.stop(), mgmt?.stop()]);
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('when an UpdateMachine names a Machine of another pool (even one Cluster API is updating), it should answer Failure and write nothing in the guest', async () => {
    // Cluster API updating the Replace pool's Machine: what the attacker aims the ClusterAPI pool's payload at.
    await beginInPlaceUpdate(mgmt.kubeConfig, {
      namespace: NS,
      machine: REPLACE.machine,
      pool: REPLACE.pool,
      hash: h('h1'),
    });
    const before = await guestTraces(REPLACE.node);
    await eventually('the extension to see the Machine marked', async () =>
      /^refused \(PoolMismatch\)/.test((await updateMachine(REPLACE.node, h('h1'), REPLACE.machine)).message),
    );
    const answer = await updateMachine(REPLACE.node, h('h1'), REPLACE.machine);
    assert.deepEqual(answer, {
      apiVersion: HOOKS_API_VERSION,
      kind: 'UpdateMachineResponse',
      status: 'Failure',
      retryAfterSeconds: 0,
      message: `refused (PoolMismatch): Machine ${NS}/${REPLACE.machine} is of pool ${REPLACE.pool}, not of pool ${POOL} the request names`,
    });
    await new Promise((r) => setTimeout(r, 1000));
    assert.deepEqual(await guestTraces(REPLACE.node), before);
    assert.equal((await machineAnnotations(REPLACE.node, REPLACE.machine))[ANNOTATIONS.capiSkipRemediation], undefined);
  });

  it('when an UpdateMachine names a Machine Cluster API is not updating, it should answer Failure and write nothing in the guest', async () => {
    const before = await guestTraces('n3');
    const answer = await updateMachine('n3', h('h1'));
    assert.equal(answer.status, 'Failure');
    assert.match(
      answer.message,
      /^refused \(NotUpdatingInPlace\): Machine default\/pool-n3 is not being updated in place by Cluster API/,
    );
    await new Promise((r) => setTimeout(r, 1000));
    assert.deepEqual(await guestTraces('n3'), before);
    assert.equal((await annotationsOf('n3'))[ANNOTATIONS.desiredConfig], undefined);
  });

  it('when a request body is over the limit, it should be refused with 413 before it is read', async () => {
    const huge = {
      ...updateMachineRequest({
        namespace: NS,
        pool: POOL,
        cluster: 'tenant',
        machine: 'pool-n1',
        hash: h('h1'),
      }),
      pad: 'x'.repeat(MAX_BODY_BYTES),
    };
    await assert.rejects(callHook(ext, UPDATE_PATH, huge), /^Error: HTTP 413: .*request body over 2097152 bytes/);
    assert.match(await readFile(ext.logFile, 'utf8'), /"httpStatus":413.*Hook request refused before reading it/);
    assert.equal(ext.process().exitCode, null);
  });

  it('when Cluster API calls UpdateMachine for each Machine, it should update its Node through the agent and the drainer, answering in progress, then done, each answer made within 1 s', async () => {
    const answers = await Promise.all(NODES.map((n) => driveMachine(n, h('h1'))));
    for (const [i, list] of answers.entries()) {
      const node = NODES[i] ?? '';
      const last = list.at(-1);
      assert.deepEqual(last, {
        apiVersion: HOOKS_API_VERSION,
        kind: 'UpdateMachineResponse',
        status: 'Success',
        retryAfterSeconds: 0,
        message: `Node ${node} is at ${h('h1')}`,
      });
      assert.ok(
        list.some((a) => a.status === 'Success' && a.retryAfterSeconds === 1),
        `${node}: never answered in progress`,
      );
      assert.ok(
        list.every((a) => a.status === 'Success'),
        `${node}: ${JSON.stringify(list.filter((a) => a.status !== 'Success'))}`,
      );
      const ann = await annotationsOf(node);
      assert.equal(ann[ANNOTATIONS.currentConfig], h('h1'));
      assert.equal(
        ann[ANNOTATIONS.lastAppliedDrain],
        `uncordon-${h('h1')}`,
        `${node} was not drained and uncordoned by the drainer`,
      );
      assert.equal(await fileOn(node, '/etc/kindling/version'), 'v1');
      assert.ok((fleet.starts.get(node) ?? 0) >= 2, `${node}'s agent never rebooted`);
      assert.equal(
        ann[ANNOTATIONS.healthCheckTimeout],
        GATE_TIMEOUT,
        `${node} was not handed the MachineDeployment's health gate timeout`,
      );
      assert.equal(
        (await machineAnnotations(node))[ANNOTATIONS.capiSkipRemediation],
        undefined,
        `${node}'s Machine is still spared from remediation once done`,
      );
    }
    assert.equal(
      (await core.listNamespacedPod({ namespace: NS })).items.length,
      0,
      'the drains should have evicted the workload pods',
    );
    await eventually('agent Pods and payload Secrets to be removed', async () => {
      const pods = await core.listNamespacedPod({ namespace: GUEST_NAMESPACE });
      const secrets = await core.listNamespacedSecret({
        namespace: GUEST_NAMESPACE,
        labelSelector: LABELS.payloadSecret,
      });
      return pods.items.length === 0 && secrets.items.length === 0;
    });
    // In the extension: from the request read to the answer written (its own log); round trip: what the caller saw.
    const handling = (await readFile(ext.logFile, 'utf8'))
      .split('\n')
      .filter((l) => l.includes('"hook":"UpdateMachine"') && l.includes('"durationMs"'))
      .map((l) => (JSON.parse(l) as { durationMs: number }).durationMs);
    const [slowestHandling, slowestRoundTrip] = [Math.max(...handling), Math.round(Math.max(...times))];
    log.warn({ answers: times.length, slowestHandling, slowestRoundTrip }, 'UpdateMachine answer times (ms)');
    assert.ok(handling.length >= times.length, 'the extension logged fewer answers than were received');
    assert.ok(slowestHandling < 1000, `the extension took ${slowestHandling} ms to answer`);
    assert.ok(slowestRoundTrip < 5000, `an answer took ${slowestRoundTrip} ms: over the handler's timeout`);
  });

  it('when UpdateMachine is called again for a Machine that is done, it should answer done and touch nothing', async () => {
    const before = await annotationsOf('n1');
    const starts = fleet.starts.get('n1');
    assert.deepEqual(await updateMachine('n1', h('h1')), {
      apiVersion: HOOKS_API_VERSION,
      kind: 'UpdateMachineResponse',
      status: 'Success',
      retryAfterSeconds: 0,
      message: `Node n1 is at ${h('h1')}`,
    });
    assert.deepEqual(await annotationsOf('n1'), before);
    assert.equal((await core.listNamespacedPod({ namespace: GUEST_NAMESPACE })).items.length, 0);
    assert.equal(fleet.starts.get('n1'), starts);
  });

  it('when the extension is SIGKILLed mid-update, a new process should carry on from the Node and finish', async () => {
    await publish('h2', payload('v2'));
    await driveMachine('n1', h('h2'), (a) => new RegExp(`handed payload ${h('h2')}`).test(a.message));
    assert.equal(
      (await machineAnnotations('n1'))[ANNOTATIONS.capiSkipRemediation],
      SKIP_REMEDIATION_INPLACE,
      'the Machine was handed out without skip-remediation',
    );
    await ext.restart();
    const answers = await driveMachine('n1', h('h2'));
    assert.equal(answers.at(-1)?.message, `Node n1 is at ${h('h2')}`);
    assert.equal(await fileOn('n1', '/etc/kindling/version'), 'v2');
    assert.equal((await annotationsOf('n1'))[ANNOTATIONS.currentConfig], h('h2'));
  });

  it('when the agent cannot apply the payload, it should answer Success with the Degraded reason and a retryAfterSeconds that grows on each call (Cluster API backs off), and the Machine should say where the update halted', async () => {
    await writeFile(join(fleet.rootOf('n2'), 'etc', 'blocker'), 'a file where the payload wants a folder');
    await publish('h3', payload('v3', [{ path: '/etc/blocker/x.conf', contents: { source: 'data:,x' } }]));
    const answers = await driveMachine('n2', h('h3'), (a) => a.status === 'Failure' || /update halted/.test(a.message));
    const halted = answers.at(-1) as Answer;
    assert.equal(halted.status, 'Success');
    const reason =
      /^Node (n2: failed to write \/etc\/blocker\/x\.conf: .*\(all changes rolled back\)) \(update halted/.exec(
        halted.message,
      )?.[1];
    assert.ok(reason, halted.message);
    assert.equal(await fileOn('n2', '/etc/kindling/version'), 'v1', 'the files were not restored');
    const again = await updateMachine('n2', h('h3'));
    assert.equal(again.message, halted.message);
    assert.ok(halted.retryAfterSeconds >= 1, `retryAfterSeconds ${halted.retryAfterSeconds}`);
    assert.equal(again.retryAfterSeconds, 2 * halted.retryAfterSeconds, 'retryAfterSeconds should double');
    const machine = await machineAnnotations('n2');
    assert.equal(machine[ANNOTATIONS.inPlaceFailure], reason);
    assert.equal(
      machine[ANNOTATIONS.capiSkipRemediation],
      SKIP_REMEDIATION_INPLACE,
      'a Degraded node’s Machine should stay spared from remediation',
    );
  });

  it('when the MachineDeployment moves to another hash while the node is Degraded, it should end the superseded update without touching the node, and the update Cluster API asks for next should bring the same Machine there', async () => {
    await publish('h6', payload('v6'));
    const before = await annotationsOf('n2');
    assert.equal(before[ANNOTATIONS.state], 'Degraded', 'n2 should still be Degraded from the test before');
    await setTemplateHash(h('h6'));
    try {
      const ended = await eventually('the superseded update ended', async () => {
        const a = await updateMachine('n2', h('h3'));
        return a.retryAfterSeconds === 0 ? a : undefined;
      });
      assert.equal(ended.status, 'Success');
      assert.match(ended.message, new RegExp(`^Node n2: ${h('h3')} is superseded by ${h('h6')}`));
      assert.equal((await machineAnnotations('n2'))[ANNOTATIONS.inPlaceFailure], undefined);
      assert.equal((await annotationsOf('n2'))[ANNOTATIONS.desiredConfig], before[ANNOTATIONS.desiredConfig]);
      assert.equal((await driveMachine('n2', h('h6'))).at(-1)?.message, `Node n2 is at ${h('h6')}`);
      assert.equal(await fileOn('n2', '/etc/kindling/version'), 'v6');
    } finally {
      await setTemplateHash(undefined);
    }
  });

  it('when the MachineDeployment is paused, it should hand no further node the target, let a node handed it before finish, and carry on once it clears', async () => {
    await publish('h4', payload('v4'));
    await driveMachine('n1', h('h4'), (a) => new RegExp(`handed payload ${h('h4')}`).test(a.message));
    await setPaused(true);
    const paused = await driveMachine('n3', h('h4'), (a) => /paused by spec\.pausedUntil/.test(a.message));
    assert.deepEqual(paused.at(-1), {
      apiVersion: HOOKS_API_VERSION,
      kind: 'UpdateMachineResponse',
      status: 'Success',
      retryAfterSeconds: 1,
      message: `Node n3 not handed ${h('h4')}: MachineDeployment ${POOL} is paused by spec.pausedUntil, no node is handed out until it clears`,
    });
    assert.equal(
      (await driveMachine('n1', h('h4'))).at(-1)?.message,
      `Node n1 is at ${h('h4')}`,
      'the node handed out before the pause should finish',
    );
    assert.equal(await fileOn('n1', '/etc/kindling/version'), 'v4');
    const n3 = await annotationsOf('n3');
    assert.equal((await updateMachine('n3', h('h4'))).retryAfterSeconds, 1);
    assert.notEqual(n3[ANNOTATIONS.desiredConfig], h('h4'), 'n3 was handed the target while paused');
    assert.equal(await fileOn('n3', '/etc/kindling/version'), 'v1');
    assert.equal(
      (await machineAnnotations('n3'))[ANNOTATIONS.capiSkipRemediation],
      undefined,
      'a node not handed out needs no sparing',
    );
    await setPaused(false);
    assert.equal((await driveMachine('n3', h('h4'))).at(-1)?.message, `Node n3 is at ${h('h4')}`);
    assert.equal(await fileOn('n3', '/etc/kindling/version'), 'v4');
  });

  it('when the agent Pod of a node handed the target is deleted mid-update, it should give the node a new one and the update should finish', async () => {
    await publish('h5', payload('v5'));
    await driveMachine('n1', h('h5'), (a) => new RegExp(`handed payload ${h('h5')}`).test(a.message));
    await core.deleteNamespacedPod({ name: agentPodName('n1'), namespace: GUEST_NAMESPACE, gracePeriodSeconds: 0 });
    assert.notEqual(
      (await annotationsOf('n1'))[ANNOTATIONS.currentConfig],
      h('h5'),
      'n1 was done before its agent Pod went: nothing was tested',
    );
    assert.equal((await driveMachine('n1', h('h5'))).at(-1)?.message, `Node n1 is at ${h('h5')}`);
    assert.equal(await fileOn('n1', '/etc/kindling/version'), 'v5');
  });
});
