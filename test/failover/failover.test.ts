/**
 * Leader failover of every elected component, on the real test bed: two replicas each of `kindling
 * inplace-upgrader`, `drainer`, `nodepool-controller` and `ignition-server` as processes, each replica under its
 * own client certificate, against an audited management cluster and a KWOK guest cluster (its kube-scheduler
 * places a workload pod on each node) whose 4 nodes run a real `kindling agent` each (AgentFleet). A leader
 * is paused with SIGSTOP right after a renewal, as a stalled machine would be; its follower must take over
 * and carry on; then the old leader is resumed with SIGCONT.
 * Never two acting: by both replicas' logs (the old one acted until its renew deadline, before the follower
 * started), by the apiserver's audit log (the old one sent nothing it received after the takeover), and for
 * the rollout by maxUnavailable, watched independently on every Node event.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as k8s from '#k8s';
import { ANNOTATIONS, LABELS, SECRET_KEYS } from '../../api/src/keys.js';
import { CAPI_GROUP } from '../../api/src/capi.js';
import { nodePoolFixture } from '../../api/testing/nodepool.js';
import {
  createTestMachine,
  createTestNode,
  eventually,
  testMachineSet,
  testPodFor,
} from '../../drainer/testing/index.js';
import { isReady } from '../../inplace-upgrader/src/preview.js';
import {
  AgentFleet,
  AvailabilityWatcher,
  KINDLING_BIN,
  machineConfig,
  tokenSecret,
} from '../../inplace-upgrader/testing/index.js';
import {
  ignitionServerArgs,
  writeIgnitionServerFiles,
  type IgnitionServerFiles,
} from '../../ignition-server/testing/index.js';
import {
  freePort,
  installCapiCrds,
  installKindlingCrds,
  startCluster,
  waitForPort,
  type Cluster,
} from '../bed/src/index.js';
import { auditedRequests, ElectedComponent, LEASE_NAMESPACE, type AuditEvent, type Replica } from './replicas.js';

const NS = 'default';
const POOL = 'pool';
/**
 * The pool's MachineSet, named apart from the pool: the test plays the nodepool-controller's part for it, and the
 * real nodepool-controller running here, which pauses the children named as its (paused) NodePool, leaves it be.
 */
const MACHINE_SET = 'pool-set';
const NODES = ['n1', 'n2', 'n3', 'n4'];
const MAX_UNAVAILABLE = 1;
/**
 * The release of the pool, tagged with the guest's Kubernetes version: the nodepool-controller running here
 * validates the (paused) pool's release, and the ignition server serves no token Secret of a refused one.
 */
const RELEASE_TAG = '1.36.3';
const merge = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch);
/** Components with nothing in flight when paused (no work until the test gives some while they are paused). */
const IDLE_WHEN_PAUSED = new Set(['nodepool-controller', 'ignition-server']);

const iso = (ms: number | undefined): string =>
  ms === undefined || !Number.isFinite(ms) ? String(ms) : new Date(ms).toISOString();
const describeRequest = (e: AuditEvent): string =>
  `${e.requestReceivedTimestamp} ${e.verb} ${e.requestURI} → ${e.responseStatus?.code ?? '?'}`;

describe('leader failover: two replicas of each elected component, the leader paused (SIGSTOP) and resumed (SIGCONT)', () => {
  let dir = '';
  let mgmt: Cluster;
  let guest: Cluster;
  let files: IgnitionServerFiles;
  let fleet: AgentFleet | undefined;
  let watcher: AvailabilityWatcher | undefined;
  let core: k8s.CoreV1Api;
  const components = new Map<string, ElectedComponent>();
  /** Per component, the leader that was paused. */
  const paused = new Map<string, Replica>();

  const component = (command: string): ElectedComponent => {
    const c = components.get(command);
    assert.ok(c, `${command} was not started`);
    return c;
  };

  const machineSetAnnotations = async (): Promise<Record<string, string>> => {
    const ms = (await mgmt.kubeConfig.makeApiClient(k8s.CustomObjectsApi).getNamespacedCustomObject({
      group: CAPI_GROUP,
      version: 'v1beta2',
      namespace: NS,
      plural: 'machinesets',
      name: MACHINE_SET,
    })) as k8s.KubernetesObject;
    return ms.metadata?.annotations ?? {};
  };

  /**
   * Pauses the leaders of `commands` right after a renewal, waits until each follower leads, runs `whilePaused`,
   * resumes the old leaders and waits for them to exit.
   */
  async function failOver(commands: string[], whilePaused: () => Promise<void> = async () => {}): Promise<void> {
    const olds = await Promise.all(
      commands.map(async (command) => [command, await component(command).pauseLeaderAfterRenewal()] as const),
    );
    for (const [command, old] of olds) paused.set(command, old);
    for (const [command, old] of olds) {
      const follower = component(command).other(old);
      await eventually(
        `${follower.name} to take over from the paused ${old.name}`,
        async () => component(command).leadership(follower).startedAt !== undefined,
        60_000,
        200,
      );
    }
    await whilePaused();
    for (const [, old] of olds) old.process.signalCommand('SIGCONT');
    for (const [, old] of olds) {
      const code = await Promise.race([
        old.process.exited,
        new Promise((r) => setTimeout(() => r('still running'), 30_000)),
      ]);
      assert.equal(code, 1, `${old.name} should exit 1 once resumed: ${old.process.tail(5)}`);
    }
  }

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'kindling-failover-'));
    mgmt = await startCluster({ name: 'mgmt', controllerManager: false, audit: true });
    [guest] = await Promise.all([
      // kube-scheduler places each node's workload pod (the controller-manager lifts new Nodes' not-ready taint).
      startCluster({ name: 'tenant', kwok: true, scheduler: true, management: { cluster: mgmt, namespace: NS } }),
      installCapiCrds(mgmt),
      installKindlingCrds(mgmt),
    ]);
    await mgmt.kubeConfig
      .makeApiClient(k8s.CoreV1Api)
      .createNamespace({ body: { metadata: { name: LEASE_NAMESPACE } } });
    core = guest.kubeConfig.makeApiClient(k8s.CoreV1Api);
    const hashes = {
      [ANNOTATIONS.targetConfigHash]: 'h0',
      [ANNOTATIONS.currentConfigHash]: 'h0',
      [ANNOTATIONS.maxUnavailable]: String(MAX_UNAVAILABLE),
    };
    await k8s.KubernetesObjectApi.makeApiClient(mgmt.kubeConfig).create(
      testMachineSet({
        name: MACHINE_SET,
        pool: POOL,
        namespace: NS,
        cluster: 'tenant',
        replicas: NODES.length,
        annotations: hashes,
      }),
    );
    for (const [i, name] of NODES.entries()) {
      await createTestNode(guest.kubeConfig, name, { [LABELS.zone]: `zone-${i % 3}` });
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
        machineSet: MACHINE_SET,
        pool: POOL,
        node: name,
      });
    }
    fleet = new AgentFleet({ guest: guest.kubeConfig, rootsDir: join(dir, 'roots') });
    await fleet.start();
    watcher = new AvailabilityWatcher(guest.kubeConfig, NODES);
    await watcher.start();
    await eventually(
      'every node to be Ready and run its workload pod',
      async () => {
        const nodes = (await core.listNode()).items;
        const pods = (await core.listNamespacedPod({ namespace: NS })).items;
        const running = NODES.every((n) =>
          pods.some((p) => p.metadata?.name === `work-${n}` && p.spec?.nodeName === n && p.status?.phase === 'Running'),
        );
        return nodes.length === NODES.length && nodes.every(isReady) && running;
      },
      60_000,
    );

    files = await writeIgnitionServerFiles(join(dir, 'ignition'), [RELEASE_TAG]);
    const ports = { a: await freePort(), b: await freePort() };
    const opsPorts = { a: await freePort(), b: await freePort() };
    const ignition = `127.0.0.1:${ports.a}`;
    const start = (command: string, args: (id: 'a' | 'b', kubeconfig: string) => string[]): Promise<ElectedComponent> =>
      ElectedComponent.start({ mgmt, dir, command, args });
    const started = await Promise.all([
      start('ignition-server', (id, kubeconfig) =>
        ignitionServerArgs(files, {
          kubeconfigPath: kubeconfig,
          namespace: NS,
          port: ports[id],
          opsPort: opsPorts[id],
          cacheDir: join(dir, `cache-${id}`),
        }),
      ),
      start('inplace-upgrader', (_id, kubeconfig) => [
        KINDLING_BIN,
        'inplace-upgrader',
        `--kubeconfig=${kubeconfig}`,
        `--namespaces=${NS}`,
        `--ignition-url=https://${ignition}`,
        `--ignition-ca-file=${files.caFile}`,
        '--agent-image=kindling:test',
        '--resync=2s',
      ]),
      start('drainer', (_id, kubeconfig) => [
        KINDLING_BIN,
        'drainer',
        `--kubeconfig=${kubeconfig}`,
        `--namespaces=${NS}`,
      ]),
      start('nodepool-controller', (_id, kubeconfig) => [
        KINDLING_BIN,
        'nodepool-controller',
        `--kubeconfig=${kubeconfig}`,
        `--namespaces=${NS}`,
        `--ignition-endpoint=${ignition}`,
        `--ignition-ca-file=${files.caFile}`,
      ]),
    ]);
    for (const c of started) components.set(c.command, c);
    await waitForPort(
      ports.a,
      component('ignition-server').replicas[0]?.process ?? { alive: false, name: 'ignition-server-a', tail: () => '' },
      60_000,
    );
    for (const c of started) await c.waitForLeader(120_000);
  });

  after(async () => {
    watcher?.stop();
    await fleet?.stop();
    for (const c of components.values()) await c.stop();
    await guest?.stop();
    await mgmt?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("when the upgrader's and the drainer's leaders are paused mid-rollout, their followers should take over and finish it, never more than maxUnavailable nodes unavailable", async () => {
    const { hash: h1, secret } = await tokenSecret(mgmt.kubeConfig, {
      namespace: NS,
      pool: POOL,
      cluster: 'tenant',
      release: files.releases[RELEASE_TAG] ?? '',
      config: [
        machineConfig('50-failover', {
          ignition: { version: '3.4.0' },
          storage: { files: [{ path: '/etc/failover', contents: { source: 'data:,v1' } }] },
        }),
      ],
    });
    await mgmt.kubeConfig.makeApiClient(k8s.CoreV1Api).createNamespacedSecret({ namespace: NS, body: secret });
    await mgmt.kubeConfig.makeApiClient(k8s.CustomObjectsApi).patchNamespacedCustomObject(
      {
        group: CAPI_GROUP,
        version: 'v1beta2',
        namespace: NS,
        plural: 'machinesets',
        name: MACHINE_SET,
        body: { metadata: { annotations: { [ANNOTATIONS.targetConfigHash]: h1 } } },
      },
      merge,
    );
    await eventually(
      'the rollout to be under way',
      async () =>
        (await core.listNode()).items.some((n) => n.metadata?.annotations?.[ANNOTATIONS.desiredConfig] === h1),
      120_000,
      200,
    );

    await failOver(['inplace-upgrader', 'drainer']);

    await eventually(
      'the rollout to complete',
      async () => (await machineSetAnnotations())[ANNOTATIONS.currentConfigHash] === h1,
      300_000,
      500,
    );
    const nodes = (await core.listNode()).items;
    assert.deepEqual(
      nodes.filter((n) => n.metadata?.annotations?.[ANNOTATIONS.currentConfig] !== h1).map((n) => n.metadata?.name),
      [],
      `nodes not at ${h1}`,
    );
    assert.deepEqual(
      nodes.filter((n) => n.spec?.unschedulable === true).map((n) => n.metadata?.name),
      [],
      'nodes left cordoned',
    );
    assert.ok((watcher?.max ?? 0) >= 1, 'the watcher never saw a node unavailable: nothing was measured');
    assert.ok((watcher?.max ?? 0) <= MAX_UNAVAILABLE, `${watcher?.max} nodes were unavailable at once`);
  });

  it("when the NodePool controller's and the ignition server's leaders are paused, their followers should take over: a new pool gets its token Secret, minted", async () => {
    await failOver(['nodepool-controller', 'ignition-server'], async () => {
      await k8s.KubernetesObjectApi.makeApiClient(mgmt.kubeConfig).create(
        nodePoolFixture('failover', NS, (p) => {
          p.spec.clusterName = 'tenant';
          p.spec.replicas = 1;
        }),
      );
      await eventually(
        "the pool's token Secret, its token minted",
        async () => {
          const secrets = await mgmt.kubeConfig.makeApiClient(k8s.CoreV1Api).listNamespacedSecret({
            namespace: NS,
            labelSelector: `${LABELS.tokenSecret},${LABELS.nodePool}=failover`,
          });
          return secrets.items.some((s) => s.data?.[SECRET_KEYS.token] !== undefined);
        },
        120_000,
        500,
      );
    });
  });

  it('when the paused leaders were resumed, each should have stopped acting before its follower started (both logs), sent nothing the apiserver received after the takeover (audit log), and exited loudly', (t) => {
    assert.deepEqual([...paused.keys()].sort(), [
      'drainer',
      'ignition-server',
      'inplace-upgrader',
      'nodepool-controller',
    ]);
    const requests = auditedRequests(mgmt);
    for (const [command, old] of paused) {
      const c = component(command);
      const follower = c.other(old);
      const [was, now] = [c.leadership(old), c.leadership(follower)];
      assert.ok(
        was.startedAt !== undefined && now.startedAt !== undefined,
        `${command}: both replicas should have led`,
      );
      const actedUntil = was.actingUntil ?? was.stoppedLoggedAt ?? Infinity;
      assert.ok(
        actedUntil < now.startedAt,
        `${command}: ${old.name} acted until ${iso(actedUntil)}, after ${follower.name} started at ${iso(now.startedAt)}`,
      );
      assert.equal(was.crashed, true, `${command}: ${old.name} exited without a fatal log line`);

      // The apiserver's view: the takeover is the follower's first successful write of the Lease.
      const takeover = Math.min(
        ...requests
          .filter(
            (r) =>
              r.user.username === follower.user &&
              r.objectRef?.resource === 'leases' &&
              ['update', 'create'].includes(r.verb) &&
              (r.responseStatus?.code ?? 0) < 300,
          )
          .map((r) => Date.parse(r.requestReceivedTimestamp)),
      );
      assert.ok(Number.isFinite(takeover), `${command}: no Lease write by ${follower.name} in the audit log`);
      const late = requests.filter(
        (r) => r.user.username === old.user && Date.parse(r.requestReceivedTimestamp) > takeover,
      );
      assert.deepEqual(
        late.filter((r) => r.objectRef?.resource === 'leases').map(describeRequest),
        [],
        `${command}: ${old.name} still campaigned after ${follower.name} took over at ${iso(takeover)}`,
      );
      t.diagnostic(
        `${command}: ${old.name} acted until ${iso(actedUntil)}, ${follower.name} led from ${iso(now.startedAt)} (${now.startedAt - actedUntil} ms later); ${late.length} request(s) of ${old.name} received after the takeover`,
      );
      // A busy leader may have had requests on their way when it was paused; an idle one had none.
      if (IDLE_WHEN_PAUSED.has(command))
        assert.deepEqual(
          late.map(describeRequest),
          [],
          `${command}: ${old.name} sent requests after ${follower.name} took over at ${iso(takeover)}`,
        );
    }
  });
});
