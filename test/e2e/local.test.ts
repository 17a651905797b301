/**
 * End to end on the local environment (`npm start`): real Cluster API, hosts booted by the real Ignition
 * client from the ignition server, the in-place agent running on hosts, the drainer and the upgrader, each
 * Kindling component a process of its own. One environment, the scenarios in order, as an operator would
 * try them.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { generateKeyPair, SignJWT, decodeJwt, decodeProtectedHeader } from 'jose';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as k8s from '#k8s';
import { ANNOTATIONS, LABELS } from '../../api/src/keys.js';
import { AvailabilityWatcher } from '../../inplace-upgrader/testing/index.js';
import { eventually, SIMULATION } from '../bed/src/index.js';
import { LocalEnvironment, NS, TokenRecorder, WORKLOAD, WorkloadWatcher, type Machine } from './environment.js';
import { describeFindings, scanLogs } from './logs.js';

const MINUTES = 60_000;
const osRelease = (version: string): string => `Kindling Linux ${version}\n`;
const byName = <T extends { metadata?: { name?: string } }>(items: T[]): string[] =>
  items.map((i) => i.metadata?.name ?? '').sort();

/** The user-data stub a pool's Machine boots from (what CAPI hands the host). */
async function userDataOf(env: LocalEnvironment, pool: string): Promise<string> {
  const [machine] = await env.machines(pool);
  const name =
    (machine as { spec?: { bootstrap?: { dataSecretName?: string } } } | undefined)?.spec?.bootstrap?.dataSecretName ??
    '';
  const secret = await env.mgmt.makeApiClient(k8s.CoreV1Api).readNamespacedSecret({ name, namespace: NS });
  return Buffer.from(secret.data?.value ?? '', 'base64').toString();
}

const bearerOf = (stub: string): string => /Bearer ([\w.-]+)/.exec(stub)?.[1] ?? '';

/** The same claims and header, signed with a key the ignition server never saw. */
async function forge(token: string): Promise<string> {
  const { privateKey } = await generateKeyPair('ES256');
  const header = decodeProtectedHeader(token);
  return new SignJWT(decodeJwt(token)).setProtectedHeader({ ...header, alg: 'ES256' }).sign(privateKey);
}

/** The client CSR a Machine claims (the approver's annotation), as the guest has it. */
function claimedCsr(machine: Machine, csrs: k8s.V1CertificateSigningRequest[]): k8s.V1CertificateSigningRequest {
  const claim = machine.metadata.annotations?.[ANNOTATIONS.approvedClientCsr] ?? '';
  const csr = csrs.find((c) => `${c.metadata?.name ?? ''}/${c.metadata?.uid ?? ''}` === claim);
  return csr ?? assert.fail(`${machine.metadata.name}: the approved client CSR ${claim} is not in the guest`);
}

/** The Machine joined with a CSR of its pool's bootstrap token that Kindling approved, and its Node reports the payload's kubelet. */
function assertJoinedOwnWay(
  pool: string,
  machine: Machine,
  csrs: k8s.V1CertificateSigningRequest[],
  nodes: k8s.V1Node[],
): void {
  const csr = claimedCsr(machine, csrs);
  assert.match(
    csr.spec.username ?? '',
    /^system:bootstrap:[a-z0-9]{6}$/,
    'requested with a bootstrap token, not an admin',
  );
  assert.ok(
    (csr.spec.groups ?? []).includes(`system:bootstrappers:kindling:${NS}:${pool}`),
    `with ${pool}'s bootstrap group`,
  );
  const reasons = (csr.status?.conditions ?? []).filter((c) => c.type === 'Approved').map((c) => c.reason);
  assert.equal(reasons.length, 1, 'approved once');
  assert.notEqual(reasons[0], 'AutoApproved', 'approved by Kindling, not the built-in approver');
  assert.ok(csr.status?.certificate, 'the guest signed it');
  const node =
    nodes.find((n) => n.metadata?.name === machine.status?.nodeRef?.name) ??
    assert.fail(`${machine.metadata.name} has no Node`);
  assert.equal(node.status?.nodeInfo?.kubeletVersion, 'v1.36.2', "the Node reports the payload's kubelet version");
}

describe('the local environment, end to end', { timeout: 40 * MINUTES }, () => {
  let env: LocalEnvironment;
  let stateDir: string;
  let tokens: TokenRecorder | undefined;

  before(async () => {
    stateDir = await mkdtemp(join(tmpdir(), 'kindling-e2e-'));
    env = new LocalEnvironment(stateDir);
    await env.start();
    tokens = new TokenRecorder(env);
    await tokens.start();
  });

  after(async () => {
    // The last look at the token Secrets needs both clusters up; the environment is stopped whatever it gives.
    const lastLook = await (tokens?.stop() ?? Promise.resolve()).then(
      () => undefined,
      (err: unknown) => err,
    );
    const code = await env.stop();
    assert.equal(code, 0, env.output.slice(-3000));
    assert.equal(lastLook, undefined, `the last look at the token Secrets failed: ${String(lastLook)}`);
    assert.match(env.output, /Stopped; nothing left running\./);
    // Every log of the run, each component's and each agent's, complete now that all have exited.
    const scan = await scanLogs(join(stateDir, 'logs'), tokens?.values ?? []);
    assert.ok((tokens?.values.size ?? 0) > 0, 'the run handed out tokens: the check has something to look for');
    for (const log of [
      'ignition-server.log',
      'nodepool-controller.log',
      'inplace-upgrader.log',
      'drainer.log',
      'local-providers.log',
    ])
      assert.ok(scan.files.includes(log), `${log} was scanned`);
    assert.ok(
      scan.files.some((f) => f.startsWith('agents/')),
      `the agents' logs were scanned: ${scan.files.join(', ')}`,
    );
    assert.deepEqual(
      scan.findings,
      [],
      `secrets in the logs (kept in ${stateDir}):\n${describeFindings(scan.findings)}`,
    );
    await rm(stateDir, { recursive: true, force: true });
  });

  it('when started from an empty state folder, both pools should be Ready with Machines Running and hosts booted from their payload', async () => {
    assert.match(env.output, /inplace: 3\/3 Ready/);
    assert.match(env.output, /replace: 2\/2 Ready/);
    assert.ok(await env.agrees('inplace', 3), 'inplace: Machines, Nodes and hosts agree on 3');
    assert.ok(await env.agrees('replace', 2), 'replace: Machines, Nodes and hosts agree on 2');
    for (const host of await env.hosts('inplace')) {
      assert.equal(await env.hostFile(host, 'etc/motd'), 'Welcome to a Kindling node\n');
      assert.equal(await env.hostFile(host, 'etc/kindling/os-release'), osRelease('1.36.2'));
    }
  });

  it("when the inplace nodes joined, the sample workload should be placed on them by the guest's kube-scheduler, spread, and Ready behind its PodDisruptionBudget", async () => {
    const whole = await eventually('shop/web whole on the inplace nodes', () => env.workloadWhole(), 2 * MINUTES, 1000);
    assert.ok(whole.nodes.length >= 2, `spread over the inplace nodes, but all on ${whole.nodes.join(', ')}`);
    const events = (
      await env.guest
        .makeApiClient(k8s.CoreV1Api)
        .listNamespacedEvent({ namespace: WORKLOAD.namespace, fieldSelector: 'reason=Scheduled' })
    ).items;
    assert.ok(
      events.some((e) => [e.source?.component, e.reportingComponent].includes('default-scheduler')),
      'bound by the default scheduler',
    );
  });

  it("when the sample hosts booted, each should have joined through its own CSR: a bootstrap token of its pool, approved by Kindling for its Machine, its Node at the release's kubelet version", async () => {
    const csrs = (await env.guest.makeApiClient(k8s.CertificatesV1Api).listCertificateSigningRequest()).items;
    for (const pool of ['inplace', 'replace']) {
      const nodes = await env.nodes(pool);
      for (const machine of await env.machines(pool)) assertJoinedOwnWay(pool, machine, csrs, nodes);
    }
    // The sample's taint went through Cluster API (MachineTaintPropagation) onto every Node of the pool.
    for (const node of await env.nodes('replace')) {
      assert.ok(
        node.spec?.taints?.some(
          (t) => t.key === 'kindling.dev/sample' && t.value === 'replace' && t.effect === 'PreferNoSchedule',
        ),
        `${node.metadata?.name ?? ''} carries the sample taint`,
      );
    }
  });

  it('when a host boots with a forged token, it should not boot and its LocalMachine should show the 401', async () => {
    const stub = await userDataOf(env, 'inplace');
    const token = bearerOf(stub);
    assert.notEqual(token, '');
    await env.bootExtraHost('forged', stub.replace(token, await forge(token)));
    const booted = await eventually(
      'the forged host to fail its boot',
      async () => {
        const c = await env.booted('forged');
        return c?.status === 'False' ? c : undefined;
      },
      3 * MINUTES,
      1000,
    );
    assert.match(booted.message, /401|Unauthorized/i);
    assert.equal(await env.hostFile('forged', 'etc/kindling/os-release'), undefined);
    await env.deleteMachine('forged');
  });

  it('when a host boots with the token from before a rotation, it should still boot', async () => {
    const stub = await userDataOf(env, 'inplace');
    const core = env.mgmt.makeApiClient(k8s.CoreV1Api);
    const [tokenSecret] = (
      await core.listNamespacedSecret({
        namespace: NS,
        labelSelector: `${LABELS.tokenSecret},${LABELS.nodePool}=inplace`,
      })
    ).items;
    assert.ok(tokenSecret?.metadata?.name);
    // A token issued long ago is due for rotation: the ignition server rotates it at once.
    await core.patchNamespacedSecret(
      {
        name: tokenSecret.metadata.name,
        namespace: NS,
        body: { metadata: { annotations: { [ANNOTATIONS.tokenIssuedAt]: '2020-01-01T00:00:00Z' } } },
      },
      k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
    );
    await eventually(
      'the token to rotate',
      async () => bearerOf(await userDataOf(env, 'inplace')) !== bearerOf(stub),
      2 * MINUTES,
      1000,
    );
    await env.bootExtraHost('rotated', stub);
    await eventually(
      'the host with the rotated token to boot',
      async () => (await env.booted('rotated'))?.status === 'True',
      3 * MINUTES,
      1000,
    );
    assert.equal(await env.hostFile('rotated', 'etc/kindling/os-release'), osRelease('1.36.2'));
    await env.deleteMachine('rotated');
  });

  it('when the InPlace pool scales 3 → 5 → 2, hosts should boot and go away, with Machines, Nodes and hosts agreeing', async () => {
    await env.patchPool('inplace', { spec: { replicas: 5 } });
    await eventually('5 inplace members', () => env.agrees('inplace', 5), 5 * MINUTES, 2000);
    for (const host of await env.hosts('inplace'))
      assert.equal(await env.hostFile(host, 'etc/motd'), 'Welcome to a Kindling node\n');
    await env.patchPool('inplace', { spec: { replicas: 2 } });
    await eventually('2 inplace members', () => env.agrees('inplace', 2), 5 * MINUTES, 2000);
  });

  it('when the InPlace pool moves to the next release, every host should change in place, never more than maxUnavailable at once, no Machine replaced', async () => {
    // Machines of the scale-down may still be going (their hosts' finalizers): only the pool's live ones count.
    const live = async (): Promise<Machine[]> =>
      (await env.machines('inplace')).filter((m) => !m.metadata.deletionTimestamp);
    const machines = byName(await live());
    const uids = (await live()).map((m) => m.metadata.uid).sort();
    const watcher = new AvailabilityWatcher(env.guest, byName(await env.nodes('inplace')));
    await watcher.start();
    // The sample workload, whole again after the scale-down, is what the drains evict through its budget.
    await eventually('shop/web whole on the inplace nodes', () => env.workloadWhole(), 3 * MINUTES, 1000);
    const workload = new WorkloadWatcher(env.guest);
    await workload.start();
    const status = env.watchStatus('inplace');
    let shown: string;
    try {
      const next = (await env.pool('inplace')).spec.release.image.replace(/:1\.36\.2$/, ':1.36.3');
      assert.match(next, /:1\.36\.3$/);
      await env.patchPool('inplace', { spec: { release: { image: next } } });
      await eventually(
        'every inplace host at 1.36.3',
        async () => {
          const hosts = await env.hosts('inplace');
          const files = await Promise.all(hosts.map((h) => env.hostFile(h, 'etc/kindling/os-release')));
          return hosts.length === 2 && files.every((f) => f === osRelease('1.36.3'));
        },
        10 * MINUTES,
        2000,
      );
      await eventually(
        'the inplace pool Ready again',
        async () =>
          (await env.pool('inplace')).status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True'),
        5 * MINUTES,
        2000,
      );
      await eventually('shop/web whole again', () => env.workloadWhole(), 2 * MINUTES, 1000);
    } finally {
      watcher.stop();
      workload.stop();
      shown = await status.stop();
    }
    assert.ok(watcher.events > 0, 'the watcher saw Node events');
    // The drains evicted the workload's pods through the Eviction API, and its budget always held.
    assert.ok(
      workload.min !== Infinity,
      `the workload watcher never saw all ${WORKLOAD.replicas} pods available (${workload.events} events): the budget was not measured`,
    );
    const floor = WORKLOAD.replicas - WORKLOAD.maxUnavailable;
    assert.ok(workload.min >= floor, `shop/web dropped to ${workload.min} available pods, below the budget's ${floor}`);
    assert.ok(
      workload.evicted.size >= 1,
      `no pod of shop/web was evicted during the rollout (${workload.events} events)`,
    );
    // When the budget refused an eviction (the drainer's DrainBlocked Event says so), the operator's status
    // showed the drain held up by it. A refusal is usual (a drained node holds two or more of the pods) but not
    // certain: one run of 4 saw the evictions go one at a time with no refusal at all (probably the apiserver's
    // own retry of a conflicting budget update, half a second later, finding a replacement Ready by then).
    const blocked = (
      await env.guest
        .makeApiClient(k8s.CoreV1Api)
        .listNamespacedEvent({ namespace: 'default', fieldSelector: 'reason=DrainBlocked' })
    ).items;
    if (blocked.some((e) => /refused by PodDisruptionBudget shop\/web /.test(e.message ?? ''))) {
      assert.match(
        shown,
        /draining: blocked by PodDisruptionBudget shop\/web/,
        `the budget refused an eviction, but kindling status --watch never showed it:\n${shown.slice(-3000)}`,
      );
    }
    // Each node is cordoned while it updates: a watcher that never saw one unavailable measured nothing.
    assert.ok(
      watcher.max >= 1,
      `the watcher never saw a node unavailable (${watcher.events} events): the bound below was not measured`,
    );
    assert.ok(watcher.max <= 1, `at most 1 unavailable (maxUnavailable), saw ${watcher.max}`);
    assert.deepEqual(byName(await live()), machines);
    assert.deepEqual((await live()).map((m) => m.metadata.uid).sort(), uids);
  });

  it('when the Replace pool moves to the next release, Cluster API should roll it: new hosts boot the new payload, old ones go', async () => {
    const old = await env.hosts('replace');
    const next = (await env.pool('inplace')).spec.release.image;
    await env.patchPool('replace', { spec: { release: { image: next } } });
    await eventually(
      'the replace pool rolled',
      async () => {
        const hosts = await env.hosts('replace');
        return hosts.every((h) => !old.includes(h)) && (await env.agrees('replace', 2));
      },
      10 * MINUTES,
      2000,
    );
    for (const host of await env.hosts('replace'))
      assert.equal(await env.hostFile(host, 'etc/kindling/os-release'), osRelease('1.36.3'));
  });

  it("when a host dies and its Node stays NotReady, the pool's MachineHealthCheck should replace it with a new host", async () => {
    await env.patchPool('replace', {
      metadata: { annotations: { [ANNOTATIONS.machineHealthCheckTimeout]: '15s' } },
      spec: { management: { autoRepair: true } },
    });
    const [victim] = await env.hosts('replace');
    assert.ok(victim);
    // As in the field, the health check watches the pool before a host dies (its first pass sees both healthy).
    await eventually(
      'the MachineHealthCheck to see both machines healthy',
      async () => {
        const list = (await env.custom.listNamespacedCustomObject({
          group: 'cluster.x-k8s.io',
          version: 'v1beta2',
          namespace: NS,
          plural: 'machinehealthchecks',
        })) as {
          items: { status?: { currentHealthy?: number } }[];
        };
        return list.items[0]?.status?.currentHealthy === 2;
      },
      2 * MINUTES,
      1000,
    );
    await env.guest
      .makeApiClient(k8s.CoreV1Api)
      .patchNode(
        { name: victim, body: { metadata: { annotations: { [SIMULATION.hostDown]: 'true' } } } },
        k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
      );
    await eventually(
      'the dead host to be replaced',
      async () => !(await env.hosts('replace')).includes(victim) && (await env.agrees('replace', 2)),
      10 * MINUTES,
      2000,
    );
  });
});
