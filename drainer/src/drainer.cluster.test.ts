/**
 * The drainer on the real test bed: a management cluster with the Cluster API CRDs, a guest cluster with
 * kube-controller-manager (the disruption controller computes PDB status, the ReplicaSet controller recreates
 * evicted pods, nodelifecycle lifts a new Node's not-ready taint), the real kube-scheduler (evicted pods land
 * again elsewhere) and KWOK (nodes and pods come alive, deleted pods go). Pods land where a test needs them
 * by what a scheduler honours: cordons, taints with their tolerations, node selectors. Only the pods that are
 * pinned in production too name their node: a kubelet's mirror pod and the upgrader's agent pod.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import * as k8s from '#k8s';
import { Registry } from 'prom-client';
import { startCluster, installCapiCrds, type Cluster } from '../../test/bed/src/index.js';
import { ANNOTATIONS, LABELS } from '../../api/src/keys.js';
import { createLogger } from '../../support/src/logger.js';
import { Drainer } from './drainer.js';
import { createTestMachine, createTestNode, eventually, testMachineSet, testPodFor } from '../testing/index.js';

const NS = 'default';
const podAvailable = (pod: k8s.V1Pod): boolean =>
  !pod.metadata?.deletionTimestamp &&
  pod.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') === true;
const merge = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch);
/** The taint that keeps every other pod off a node a test keeps for one pod of its own. */
const dedicated = (app: string): k8s.V1Taint => ({ key: 'dedicated', value: app, effect: 'NoSchedule' });
/** A bare pod the scheduler can place only on `node`, which a taint keeps for it. */
const podFor = (app: string, node: string): k8s.V1Pod =>
  testPodFor(app, node, [{ ...dedicated(app), operator: 'Equal' }]);

describe('drainer', () => {
  let mgmt: Cluster;
  let guest: Cluster;
  let drainer: Drainer;
  let core: k8s.CoreV1Api;
  const registry = new Registry();

  const annotate = (node: string, annotations: Record<string, string | null>): Promise<k8s.V1Node> =>
    core.patchNode({ name: node, body: { metadata: { annotations } } }, merge);
  const nodeNamed = (name: string): Promise<k8s.V1Node> => core.readNode({ name });
  const podsOn = async (node: string): Promise<k8s.V1Pod[]> =>
    (await core.listPodForAllNamespaces({ fieldSelector: `spec.nodeName=${node}` })).items;
  const applied = (name: string, value: string) => async (): Promise<k8s.V1Node | undefined> => {
    const n = await nodeNamed(name);
    return n.metadata?.annotations?.[ANNOTATIONS.lastAppliedDrain] === value ? n : undefined;
  };
  const metric = async (name: string, labels: Record<string, string> = {}): Promise<number> => {
    const all = (await registry.getMetricsAsJSON()).flatMap((m) =>
      (m.values as { value: number; labels: Record<string, string>; metricName?: string }[]).map((v) => ({
        ...v,
        metricName: v.metricName ?? m.name,
      })),
    );
    return all
      .filter((v) => v.metricName === name && Object.entries(labels).every(([k, l]) => v.labels[k] === l))
      .reduce((s, v) => s + v.value, 0);
  };

  /** A Deployment of 4 behind a PDB of minAvailable 3, all on n1, with a DaemonSet, a mirror and an agent pod. */
  const startWebOnN1 = async (): Promise<void> => {
    const apps = guest.kubeConfig.makeApiClient(k8s.AppsV1Api);
    const policy = guest.kubeConfig.makeApiClient(k8s.PolicyV1Api);
    // Everything starts on n1: the others are cordoned until the Deployment is up.
    for (const n of ['n2', 'n3']) await core.patchNode({ name: n, body: { spec: { unschedulable: true } } }, merge);
    const labels = { app: 'web' };
    await apps.createNamespacedDeployment({
      namespace: NS,
      body: {
        metadata: { name: 'web' },
        spec: {
          replicas: 4,
          selector: { matchLabels: labels },
          template: { metadata: { labels }, spec: { containers: [{ name: 'c', image: 'nginx' }] } },
        },
      },
    });
    await policy.createNamespacedPodDisruptionBudget({
      namespace: NS,
      body: { metadata: { name: 'web' }, spec: { minAvailable: 3, selector: { matchLabels: labels } } },
    });
    const ds = await apps.createNamespacedDaemonSet({
      namespace: NS,
      body: {
        metadata: { name: 'logs' },
        spec: {
          selector: { matchLabels: { app: 'logs' } },
          template: { metadata: { labels: { app: 'logs' } }, spec: { containers: [{ name: 'c', image: 'x' }] } },
        },
      },
    });
    // The DaemonSet's pod for n1 as its controller writes it (the test bed runs no DaemonSet controller): held
    // to n1 by node affinity on the node's name, and the scheduler binds it.
    const onN1: k8s.V1Affinity = {
      nodeAffinity: {
        requiredDuringSchedulingIgnoredDuringExecution: {
          nodeSelectorTerms: [{ matchFields: [{ key: 'metadata.name', operator: 'In', values: ['n1'] }] }],
        },
      },
    };
    const specials: k8s.V1Pod[] = [
      {
        metadata: {
          name: 'logs-n1',
          labels: { app: 'logs' },
          ownerReferences: [
            { apiVersion: 'apps/v1', kind: 'DaemonSet', name: 'logs', uid: ds.metadata?.uid ?? '', controller: true },
          ],
        },
        spec: { affinity: onN1, containers: [{ name: 'c', image: 'x' }] },
      },
      {
        metadata: { name: 'static-n1', annotations: { 'kubernetes.io/config.mirror': 'deadbeef' } },
        spec: { nodeName: 'n1', containers: [{ name: 'c', image: 'x' }] },
      },
      {
        metadata: { name: 'agent-n1', labels: { [LABELS.agentPod]: 'true' } },
        spec: { nodeName: 'n1', containers: [{ name: 'c', image: 'x' }] },
      },
    ];
    for (const body of specials) await core.createNamespacedPod({ namespace: NS, body });
    await eventually(
      'the PDB to count 4 healthy pods on n1, and logs-n1 to run there',
      async () => {
        const pdb = await policy.readNamespacedPodDisruptionBudget({ name: 'web', namespace: NS });
        const pods = await podsOn('n1');
        const web = pods.filter((p) => p.metadata?.labels?.app === 'web').length;
        return (
          pdb.status?.currentHealthy === 4 &&
          pdb.status.disruptionsAllowed === 1 &&
          web === 4 &&
          pods.some((p) => p.metadata?.name === 'logs-n1' && podAvailable(p))
        );
      },
      60_000,
    );
  };

  before(async () => {
    mgmt = await startCluster({ name: 'mgmt', controllerManager: false });
    [guest] = await Promise.all([
      startCluster({ name: 'tenant', kwok: true, scheduler: true, management: { cluster: mgmt, namespace: NS } }),
      installCapiCrds(mgmt),
    ]);
    core = guest.kubeConfig.makeApiClient(k8s.CoreV1Api);
    for (const n of ['n1', 'n2', 'n3']) await createTestNode(guest.kubeConfig, n);
    drainer = new Drainer({
      kubeConfig: mgmt.kubeConfig,
      namespaces: [NS],
      log: createLogger({ name: 'drainer', level: 'warn' }),
      registry,
      defaultDrainTimeoutMs: 0,
    });
    await drainer.start();
  });
  after(async () => {
    await drainer?.stop();
    await Promise.all([guest?.stop(), mgmt?.stop()]);
  });

  it('when a drain is asked, it should evict through PDBs without ever breaking minAvailable, skip DaemonSet, mirror and agent pods, and uncordon on request', async () => {
    await startWebOnN1();
    for (const n of ['n2', 'n3']) await core.patchNode({ name: n, body: { spec: { unschedulable: false } } }, merge);

    // The independent watcher: every event of a web pod, available = Ready and not terminating.
    const available = new Map<string, boolean>();
    let minAvailable = Infinity;
    const watch = await new k8s.Watch(guest.kubeConfig).watch(
      `/api/v1/namespaces/${NS}/pods`,
      { labelSelector: 'app=web' },
      (type: string, pod: k8s.V1Pod) => {
        available.set(pod.metadata?.name ?? '', type !== 'DELETED' && podAvailable(pod));
        if (available.size >= 4) minAvailable = Math.min(minAvailable, [...available.values()].filter(Boolean).length);
      },
      () => undefined,
    );
    try {
      const refusedBefore = await metric('kindling_drainer_evictions_total', { result: 'refused_pdb' });
      await annotate('n1', { [ANNOTATIONS.desiredDrain]: 'drain-h1' });
      const drained = await eventually('n1 to be drained', applied('n1', 'drain-h1'), 60_000);
      assert.equal(drained.spec?.unschedulable, true);
      assert.equal(drained.metadata?.annotations?.[ANNOTATIONS.cordonedBeforeDrain], 'false');
      const left = (await podsOn('n1')).map((p) => p.metadata?.name).sort();
      assert.deepEqual(left, ['agent-n1', 'logs-n1', 'static-n1']);
      assert.ok(minAvailable >= 3, `web dropped to ${minAvailable} available pods, below minAvailable 3`);
      assert.ok(minAvailable !== Infinity, 'the watcher saw no pod');
      const refused = await metric('kindling_drainer_evictions_total', { result: 'refused_pdb' });
      assert.ok(
        refused > refusedBefore,
        `no eviction was refused by the PDB: the test did not exercise it (${JSON.stringify((await registry.getMetricsAsJSON()).find((m) => m.name === 'kindling_drainer_evictions_total')?.values)})`,
      );
      assert.ok((await metric('kindling_drainer_drain_duration_seconds_count', { result: 'success' })) >= 1);
    } finally {
      watch.abort();
    }

    await annotate('n1', { [ANNOTATIONS.desiredDrain]: 'uncordon-h1' });
    const back = await eventually('n1 to be uncordoned', applied('n1', 'uncordon-h1'));
    assert.notEqual(back.spec?.unschedulable, true);
    assert.equal(back.metadata?.annotations?.[ANNOTATIONS.cordonedBeforeDrain], undefined);
  });

  it('when an operator had cordoned the node before the drain, uncordon should leave it cordoned', async () => {
    await core.patchNode({ name: 'n3', body: { spec: { unschedulable: true } } }, merge);
    await annotate('n3', { [ANNOTATIONS.desiredDrain]: 'drain-h2' });
    const drained = await eventually('n3 to be drained', applied('n3', 'drain-h2'), 60_000);
    assert.equal(drained.metadata?.annotations?.[ANNOTATIONS.cordonedBeforeDrain], 'true');
    await annotate('n3', { [ANNOTATIONS.desiredDrain]: 'uncordon-h2' });
    const after = await eventually('n3 uncordon to be applied', applied('n3', 'uncordon-h2'));
    assert.equal(after.spec?.unschedulable, true);
    await core.patchNode({ name: 'n3', body: { spec: { unschedulable: false } } }, merge);
  });

  it('when a PodDisruptionBudget refuses a drain with no nodeDrainTimeout, it should name the pod and the budget on the node and in one DrainBlocked Event, and clear that when the drain is cancelled and when the budget allows the eviction', async () => {
    // A node of its own, tainted for its one pod (nothing else lands on it), in no MachineSet: the default timeout, none.
    await createTestNode(guest.kubeConfig, 'n5', {}, [dedicated('guarded')]);
    const policy = guest.kubeConfig.makeApiClient(k8s.PolicyV1Api);
    await core.createNamespacedPod({ namespace: NS, body: podFor('guarded', 'n5') });
    await policy.createNamespacedPodDisruptionBudget({
      namespace: NS,
      body: { metadata: { name: 'guarded' }, spec: { minAvailable: 1, selector: { matchLabels: { app: 'guarded' } } } },
    });
    await eventually(
      'guarded to run on n5 and its PDB to allow no disruption',
      async () => {
        const status = (await policy.readNamespacedPodDisruptionBudget({ name: 'guarded', namespace: NS })).status;
        const onN5 = (await podsOn('n5')).map((p) => p.metadata?.name);
        return status?.currentHealthy === 1 && status.disruptionsAllowed === 0 && onN5.includes('guarded');
      },
      60_000,
    );
    const blockedOn = async (): Promise<string | undefined> =>
      (await nodeNamed('n5')).metadata?.annotations?.[ANNOTATIONS.drainBlocked];
    const blockedEvents = async (): Promise<k8s.CoreV1Event[]> =>
      (
        await core.listNamespacedEvent({
          namespace: 'default',
          fieldSelector: 'involvedObject.name=n5,reason=DrainBlocked',
        })
      ).items;

    const askedAt = Date.now();
    await annotate('n5', { [ANNOTATIONS.desiredDrain]: 'drain-h5' });
    const shown = await eventually('the block on n5', blockedOn);
    const m = /^default\/guarded blocked by PodDisruptionBudget default\/guarded since (\S+)$/.exec(shown);
    assert.ok(m, `drain-blocked is ${shown}`);
    const since = Date.parse(m[1] ?? '');
    assert.ok(since >= askedAt - 1000 && since <= Date.now(), `since ${m[1]} is not when the drain was refused`);
    const [event] = await eventually('the DrainBlocked Event', async () =>
      (await blockedEvents()).length > 0 ? blockedEvents() : undefined,
    );
    assert.equal(event?.type, 'Warning');
    assert.equal(
      event?.message,
      'Eviction of default/guarded refused by PodDisruptionBudget default/guarded (disruptionsAllowed 0: the budget needs 1 healthy pods and has 1 currently); no nodeDrainTimeout: retrying until the budget allows it',
    );

    // Refused again and again: still one Event (rate-limited), and the annotation is not rewritten.
    const refusals = await metric('kindling_drainer_evictions_total', { result: 'refused_pdb' });
    await eventually(
      'two more refusals',
      async () => (await metric('kindling_drainer_evictions_total', { result: 'refused_pdb' })) >= refusals + 2,
      15_000,
    );
    assert.equal((await blockedEvents()).length, 1, 'the refusals were not rate-limited to one Event');
    assert.equal(await blockedOn(), shown);

    // Cancelled (the agent asks for the uncordon): the block goes with the drain.
    await annotate('n5', { [ANNOTATIONS.desiredDrain]: 'uncordon-h5' });
    const cancelled = await eventually('the cancel to be applied', applied('n5', 'uncordon-h5'));
    assert.equal(cancelled.metadata?.annotations?.[ANNOTATIONS.drainBlocked], undefined);

    // Asked again, then the budget allows one disruption: the pod is evicted, the block goes, the drain completes.
    await annotate('n5', { [ANNOTATIONS.desiredDrain]: 'drain-h6' });
    await eventually('the block on n5 again', blockedOn);
    await policy.patchNamespacedPodDisruptionBudget(
      { name: 'guarded', namespace: NS, body: { spec: { minAvailable: 0 } } },
      merge,
    );
    const drained = await eventually('n5 to be drained', applied('n5', 'drain-h6'), 60_000);
    assert.equal(drained.metadata?.annotations?.[ANNOTATIONS.drainBlocked], undefined);
    assert.deepEqual(
      (await podsOn('n5')).map((p) => p.metadata?.name),
      [],
    );
  });

  it("when the MachineSet's nodeDrainTimeout passes with a pod that cannot be evicted, it should give up, say so on the node and in an Event, and not mark the drain applied", async () => {
    // A node of its own, tainted for its one pod, so pods the other tests moved around cannot land on it.
    await createTestNode(guest.kubeConfig, 'n4', {}, [dedicated('precious')]);
    const objects = k8s.KubernetesObjectApi.makeApiClient(mgmt.kubeConfig);
    await objects.create(
      testMachineSet({ name: 'pool', namespace: NS, cluster: 'tenant', replicas: 1, drainTimeoutSeconds: 2 }),
    );
    await createTestMachine(mgmt.kubeConfig, {
      name: 'pool-m2',
      namespace: NS,
      cluster: 'tenant',
      machineSet: 'pool',
      node: 'n4',
    });
    const policy = guest.kubeConfig.makeApiClient(k8s.PolicyV1Api);
    await core.createNamespacedPod({ namespace: NS, body: podFor('precious', 'n4') });
    await policy.createNamespacedPodDisruptionBudget({
      namespace: NS,
      body: {
        metadata: { name: 'precious' },
        spec: { maxUnavailable: 0, selector: { matchLabels: { app: 'precious' } } },
      },
    });
    await eventually(
      'precious to run on n4 and its PDB to observe it',
      async () => {
        const onN4 = (await podsOn('n4')).map((p) => p.metadata?.name);
        return (
          onN4.includes('precious') &&
          (await policy.readNamespacedPodDisruptionBudget({ name: 'precious', namespace: NS })).status
            ?.currentHealthy === 1
        );
      },
      60_000,
    );

    const started = Date.now();
    await annotate('n4', { [ANNOTATIONS.desiredDrain]: 'drain-h3' });
    const failed = await eventually(
      'the drain of n4 to fail',
      async () => {
        const n = await nodeNamed('n4');
        return n.metadata?.annotations?.[ANNOTATIONS.drainFailure] ? n : undefined;
      },
      30_000,
    );
    const elapsed = Date.now() - started;
    const failure = failed.metadata?.annotations?.[ANNOTATIONS.drainFailure] ?? '';
    assert.match(failure, /^drain-h3: nodeDrainTimeout 2s reached with 1 pod\(s\) not evicted: default\/precious/);
    assert.match(failure, /disruption budget/i);
    assert.ok(elapsed >= 2000, `gave up after ${elapsed} ms, before the 2 s timeout`);
    assert.equal(failed.metadata?.annotations?.[ANNOTATIONS.lastAppliedDrain], undefined);
    assert.equal(failed.spec?.unschedulable, true);
    // The Event follows the annotation (its write never delays the verdict): wait for it, then count.
    const events = await eventually('the DrainFailed Event', async () => {
      const list = await core.listNamespacedEvent({
        namespace: 'default',
        fieldSelector: 'involvedObject.name=n4,reason=DrainFailed',
      });
      return list.items.length > 0 ? list.items : undefined;
    });
    assert.equal(events.length, 1);
    // Given up means given up: the same request is not retried.
    await new Promise((r) => setTimeout(r, 1500));
    assert.equal((await nodeNamed('n4')).metadata?.annotations?.[ANNOTATIONS.lastAppliedDrain], undefined);
    assert.equal(
      (await core.readNamespacedPod({ name: 'precious', namespace: NS })).metadata?.deletionTimestamp,
      undefined,
    );
  });
});
