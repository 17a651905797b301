/**
 * Chaos on the local environment (`npm start -- --replicas 2`): during an in-place rollout of 6 nodes with
 * maxUnavailable 2, each replica of the upgrader, the drainer and the ignition server is SIGKILLed once, in a
 * random order at random moments, and the current leader of one of them is paused (SIGSTOP) until its peer
 * takes the Lease, then resumed (SIGCONT). The environment's supervisors bring every process back. The rollout
 * must still complete, and independent watchers on the guest must never see more than 2 Nodes unavailable,
 * a node drained twice, or a PodDisruptionBudget below its desired healthy Pods.
 *
 * The rollout cannot finish before the plan has run: while it runs, the workload's PodDisruptionBudgets allow
 * no disruption, so the drains of the nodes that hold its Pods wait (the drainer retrying evictions, killed
 * among the others); once the plan is done the budgets are put back and the rollout completes. Timing alone
 * did not hold: on this 2-core machine a rollout took 29 to 59 s, and the plan's pause alone 12 to 25 s.
 *
 * The randomness is seeded and the seed printed: `KINDLING_CHAOS_SEED=<seed>` replays the same plan (the same
 * victims in the same order, after the same delays; the rollout's own timing still varies).
 */
import { after, before, describe, it, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { randomInt } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as k8s from '#k8s';
import { ANNOTATIONS } from '../../api/src/keys.js';
import { AvailabilityWatcher } from '../../inplace-upgrader/testing/index.js';
import { eventually } from '../bed/src/index.js';
import { LocalEnvironment } from './environment.js';
import {
  DrainWatcher,
  PdbWatcher,
  alive,
  killRunning,
  processesOf,
  seeded,
  shuffled,
  supervision,
} from './disruption.js';

const MINUTES = 60_000;
const REPLICAS = 2;
const NODES = 6;
const MAX_UNAVAILABLE = 2;
const POOL = 'inplace';
const NEXT = '1.36.3';
/** The components whose replicas are killed; the last one, the nodepool-controller, has no part in a rollout. */
const VICTIMS = ['inplace-upgrader', 'drainer', 'ignition-server'] as const;
/**
 * Leader timings every component reads from its environment (KINDLING_<FLAG>): a killed leader's Lease frees
 * in seconds rather than 15, with a renew deadline still roomy for a loaded 2-core machine.
 */
const LEADER_ENV = {
  KINDLING_LEADER_ELECT_LEASE_DURATION: '12s',
  KINDLING_LEADER_ELECT_RENEW_DEADLINE: '8s',
  KINDLING_LEADER_ELECT_RETRY_PERIOD: '1s',
};
/** The test's own workload when the sample tenant brings none: Pods on the pool's nodes, one disruption allowed. */
const WORKLOAD = { namespace: 'default', name: 'chaos-web', replicas: 3, minAvailable: 2 };

type Step = { delayMs: number } & ({ kind: 'kill'; replica: string } | { kind: 'pause'; component: string });

/** Every victim replica killed once, in a random order, and one leader paused somewhere among the kills. */
function chaosPlan(random: () => number): Step[] {
  const kills = shuffled(
    VICTIMS.flatMap((c) => Array.from({ length: REPLICAS }, (_, i) => `${c}-${i}`)),
    random,
  );
  // The rollout waits for the plan (see the file's header); short delays keep the wait short.
  const delay = (): number => 200 + Math.floor(random() * 1300);
  const steps: Step[] = kills.map((replica) => ({ kind: 'kill', replica, delayMs: delay() }));
  const pause: Step = {
    kind: 'pause',
    component: VICTIMS[Math.floor(random() * VICTIMS.length)] as string,
    delayMs: delay(),
  };
  steps.splice(Math.floor(random() * (steps.length + 1)), 0, pause);
  return steps;
}

interface Done {
  step: Step;
  /** ms since the release changed. */
  at: number;
  pid: number;
  replica: string;
  /** For a pause: the replica that took the Lease while it was stopped. */
  takenBy?: string;
}

/** Runs the plan against the environment's processes; records what it did. */
class Chaos {
  readonly done: Done[] = [];
  #env: LocalEnvironment;
  #started = Date.now();

  constructor(env: LocalEnvironment) {
    this.#env = env;
  }

  log(): string {
    return this.done
      .map(
        (d) =>
          `  +${(d.at / 1000).toFixed(1)} s ${d.step.kind} ${d.replica} (pid ${d.pid})${d.takenBy ? `, Lease taken by ${d.takenBy}` : ''}`,
      )
      .join('\n');
  }

  async run(plan: Step[], stopEarly: () => boolean): Promise<void> {
    for (const step of plan) {
      await new Promise((r) => setTimeout(r, step.delayMs));
      if (stopEarly()) return;
      if (step.kind === 'kill') await this.#kill(step);
      else await this.#pause(step);
    }
  }

  async #kill(step: Step & { kind: 'kill' }): Promise<void> {
    const pid = await killRunning(this.#env, step.replica);
    this.done.push({ step, at: Date.now() - this.#started, pid, replica: step.replica });
  }

  #ledBy(replica: string, pid: number): boolean {
    const log = readFileSync(join(this.#env.stateDir, 'logs', `${replica}.log`), 'utf8');
    return log.split('\n').some((l) => l.includes(`"pid":${pid},`) && l.includes('"Started leading"'));
  }

  async #pause(step: Step & { kind: 'pause' }): Promise<void> {
    // A leader that knows it leads: the Lease may name a replica whose acquire it has not seen answered yet.
    const leader = await eventually(
      `a leader of ${step.component}`,
      async () => {
        const l = await this.#env.leaderOf(step.component, REPLICAS);
        return l && alive(l.pid) && this.#ledBy(l.replica, l.pid) ? l : undefined;
      },
      60_000,
      200,
    );
    process.kill(leader.pid, 'SIGSTOP');
    const record: Done = { step, at: Date.now() - this.#started, pid: leader.pid, replica: leader.replica };
    this.done.push(record);
    try {
      const next = await eventually(
        `the peer of the paused ${leader.replica} to take the Lease`,
        async () => {
          const l = await this.#env.leaderOf(step.component, REPLICAS);
          return l && l.replica !== leader.replica ? l : undefined;
        },
        2 * MINUTES,
        200,
      );
      record.takenBy = next.replica;
    } finally {
      process.kill(leader.pid, 'SIGCONT');
    }
    // Resumed, it finds its renew deadline passed and exits on its own: the supervisor starts it again.
    await eventually(`the resumed ${leader.replica} to exit`, async () => !alive(leader.pid), MINUTES, 100);
  }
}

const merge = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch);
const keyOf = (o: k8s.KubernetesObject): string => `${o.metadata?.namespace ?? ''}/${o.metadata?.name ?? ''}`;
const selectorOf = (pdb: k8s.V1PodDisruptionBudget): string =>
  Object.entries(pdb.spec?.selector?.matchLabels ?? {})
    .map(([k, v]) => `${k}=${v}`)
    .join(',');

/** Satisfied with room to spare: its Pods run, and one may be evicted. */
function satisfied(pdb: k8s.V1PodDisruptionBudget): boolean {
  const { expectedPods = 0, currentHealthy = 0, desiredHealthy = 0, disruptionsAllowed = 0 } = pdb.status ?? {};
  return expectedPods > 0 && currentHealthy >= desiredHealthy && disruptionsAllowed > 0;
}

type Pdbs = { pdbs: k8s.V1PodDisruptionBudget[]; pods: Set<string> } | { absent: string };

/** The pods each PDB selects, by namespace/name. */
async function podsUnder(guest: k8s.KubeConfig, pdbs: k8s.V1PodDisruptionBudget[]): Promise<Set<string>> {
  const core = guest.makeApiClient(k8s.CoreV1Api);
  const names = new Set<string>();
  for (const pdb of pdbs) {
    const pods = await core.listNamespacedPod({
      namespace: pdb.metadata?.namespace ?? '',
      labelSelector: selectorOf(pdb),
    });
    for (const p of pods.items) names.add(keyOf(p));
  }
  return names;
}

/**
 * The guest's PodDisruptionBudgets once each is satisfied: the sample tenant's if it has any, otherwise the
 * test's own Deployment and PDB on the pool's nodes. Pods land only if the guest runs a scheduler; without one
 * the PDB check cannot be made, and says so (`absent`) rather than pretend.
 */
async function workloadUnderPdb(guest: k8s.KubeConfig): Promise<Pdbs> {
  const policy = guest.makeApiClient(k8s.PolicyV1Api);
  const pdbs = (await policy.listPodDisruptionBudgetForAllNamespaces()).items;
  if (pdbs.length === 0) {
    const { namespace, name, replicas, minAvailable } = WORKLOAD;
    const labels = { app: name };
    await guest.makeApiClient(k8s.AppsV1Api).createNamespacedDeployment({
      namespace,
      body: {
        metadata: { name },
        spec: {
          replicas,
          selector: { matchLabels: labels },
          template: {
            metadata: { labels },
            spec: {
              nodeSelector: { 'kindling.dev/pool': POOL },
              containers: [{ name: 'web', image: 'registry.k8s.io/pause:3.10' }],
            },
          },
        },
      },
    });
    await policy.createNamespacedPodDisruptionBudget({
      namespace,
      body: { metadata: { name }, spec: { minAvailable, selector: { matchLabels: labels } } },
    });
    const core = guest.makeApiClient(k8s.CoreV1Api);
    const scheduled = await eventually(
      'a Pod of the workload to be scheduled',
      async () => {
        const pods = await core.listNamespacedPod({ namespace, labelSelector: `app=${name}` });
        return pods.items.some((p) => p.spec?.nodeName) ? true : undefined;
      },
      45_000,
      500,
    ).catch(() => false);
    if (!scheduled)
      return {
        absent: `the guest runs no scheduler: no Pod of ${namespace}/${name} got a node within 45 s, and the sample tenant has no PodDisruptionBudget`,
      };
  }
  const ready = await eventually(
    'every PodDisruptionBudget satisfied with its Pods running',
    async () => {
      const list = (await policy.listPodDisruptionBudgetForAllNamespaces()).items;
      return list.every(satisfied) ? list : undefined;
    },
    2 * MINUTES,
    1000,
  );
  return { pdbs: ready, pods: await podsUnder(guest, ready) };
}

/** The pool's conditions and each Node's version, state and configs: what a stalled rollout is waiting on. */
async function rolloutState(env: LocalEnvironment): Promise<string> {
  const pool = await env.pool(POOL);
  const conditions = (pool.status?.conditions ?? []).map((c) => `${c.type}=${c.status} ${c.reason}: ${c.message}`);
  const nodes = (await env.nodes(POOL)).map((n) => {
    const a = (key: string): string => n.metadata?.annotations?.[key] ?? '-';
    const taints = (n.spec?.taints ?? []).map((t) => t.key).join(',');
    return `${n.metadata?.name} ${n.status?.nodeInfo?.kubeletVersion} state=${a(ANNOTATIONS.state)} current=${a(ANNOTATIONS.currentConfig)} desired=${a(ANNOTATIONS.desiredConfig)} unschedulable=${n.spec?.unschedulable === true} taints=${taints}`;
  });
  return [`pool ${POOL}:`, ...conditions, 'nodes:', ...nodes].join('\n  ');
}

/** Each of the pool's Nodes on the new release: the agent at the desired config, the kubelet reporting the new version. */
async function rolledOut(env: LocalEnvironment): Promise<boolean> {
  const nodes = await env.nodes(POOL);
  const hosts = await env.hosts(POOL);
  const files = await Promise.all(hosts.map((h) => env.hostFile(h, 'etc/kindling/os-release')));
  return (
    nodes.length === NODES &&
    nodes.every(
      (n) =>
        n.status?.nodeInfo?.kubeletVersion === `v${NEXT}` &&
        n.metadata?.annotations?.[ANNOTATIONS.currentConfig] === n.metadata?.annotations?.[ANNOTATIONS.desiredConfig],
    ) &&
    files.length === NODES &&
    files.every((f) => f === `Kindling Linux ${NEXT}\n`)
  );
}

async function poolUpToDate(env: LocalEnvironment): Promise<boolean> {
  const conditions = (await env.pool(POOL)).status?.conditions ?? [];
  const is = (type: string, status: string): boolean => conditions.some((c) => c.type === type && c.status === status);
  return is('Ready', 'True') && is('UpdatingVersion', 'False') && is('UpdatingConfig', 'False');
}

/** Scales the pool to NODES with maxUnavailable 2, every Node Ready and the pool Ready; the workload under a PDB meanwhile. */
async function scaleOut(env: LocalEnvironment): Promise<Pdbs> {
  await env.patchPool(POOL, {
    spec: { replicas: NODES, management: { inPlace: { maxUnavailable: MAX_UNAVAILABLE } } },
  });
  const [workload] = await Promise.all([
    workloadUnderPdb(env.guest),
    eventually(`${NODES} ${POOL} members`, () => env.agrees(POOL, NODES), 5 * MINUTES, 1000),
  ]);
  const allReady = async (): Promise<boolean> =>
    (await env.nodes(POOL)).every((n) => n.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True'));
  await eventually(
    `the ${POOL} pool Ready with ${NODES} Ready Nodes`,
    async () => (await poolUpToDate(env)) && (await allReady()),
    3 * MINUTES,
    1000,
  );
  return workload;
}

interface Watchers {
  availability: AvailabilityWatcher;
  drains: DrainWatcher;
  pdbs: PdbWatcher;
}

/**
 * Lets the workload's PodDisruptionBudgets allow no disruption (maxUnavailable 0); resolves with what puts
 * each back as it was. Nothing to hold when the PDB check could not be made.
 */
async function holdDisruptions(env: LocalEnvironment, workload: Pdbs): Promise<() => Promise<void>> {
  if (!('pdbs' in workload)) return async () => {};
  const policy = env.guest.makeApiClient(k8s.PolicyV1Api);
  const patch = (
    pdb: k8s.V1PodDisruptionBudget,
    spec: { minAvailable: unknown; maxUnavailable: unknown },
  ): Promise<unknown> =>
    policy.patchNamespacedPodDisruptionBudget(
      { namespace: pdb.metadata?.namespace ?? '', name: pdb.metadata?.name ?? '', body: { spec } },
      merge,
    );
  await Promise.all(workload.pdbs.map((pdb) => patch(pdb, { minAvailable: null, maxUnavailable: 0 })));
  return async () => {
    await Promise.all(
      workload.pdbs.map((pdb) =>
        patch(pdb, { minAvailable: pdb.spec?.minAvailable ?? null, maxUnavailable: pdb.spec?.maxUnavailable ?? null }),
      ),
    );
  };
}

/**
 * Moves the pool to the next release and runs the plan, the workload's budgets allowing no disruption until
 * the plan is done; resolves with when the pool rolled out (ms).
 */
async function chaoticRollout(env: LocalEnvironment, chaos: Chaos, plan: Step[], workload: Pdbs): Promise<number> {
  let completedAt: number | undefined;
  const release = await holdDisruptions(env, workload);
  const started = Date.now();
  const next = (await env.pool(POOL)).spec.release.image.replace(/:[^:]+$/, `:${NEXT}`);
  await env.patchPool(POOL, { spec: { release: { image: next } } });
  // Within the runner's 10 minutes per test, so that a rollout that never ends says where it stands.
  const rollout = eventually(`every ${POOL} Node on ${NEXT}`, () => rolledOut(env), 8 * MINUTES, 1000).then(
    () => (completedAt = Date.now() - started),
    async (err: unknown) => {
      throw new Error(`${(err as Error).message}\n${await rolloutState(env)}`, { cause: err });
    },
  );
  const planDone = chaos.run(plan, () => completedAt !== undefined).then(release);
  await Promise.all([planDone, rollout]);
  await eventually(`the ${POOL} pool up to date (Ready, not updating)`, () => poolUpToDate(env), 3 * MINUTES, 1000);
  return completedAt ?? NaN;
}

const ALL_REPLICAS = [...VICTIMS, 'nodepool-controller'].flatMap((c) =>
  Array.from({ length: REPLICAS }, (_, i) => `${c}-${i}`),
);

/** Each step ran during the rollout; every process killed or paused was reported and is back as a new process. */
async function assertChaosRan(
  env: LocalEnvironment,
  chaos: Chaos,
  { plan, completedAt }: { plan: Step[]; completedAt: number },
  context: string,
): Promise<void> {
  assert.equal(chaos.done.length, plan.length, `every step of the plan ran before the rollout completed ${context}`);
  assert.ok(
    chaos.done.every((d) => d.at < completedAt),
    `every step happened during the rollout ${context}`,
  );
  assert.ok(
    chaos.done.find((d) => d.step.kind === 'pause')?.takenBy,
    `the paused leader's peer took the Lease ${context}`,
  );
  for (const d of chaos.done) {
    const how = d.step.kind === 'kill' ? 'code 137 \\(SIGKILL\\)' : 'code 1,';
    assert.match(env.output, new RegExp(`${d.replica} exited, ${how}`), `${d.replica}'s exit was reported ${context}`);
  }
  for (const replica of ALL_REPLICAS) {
    const pid = await eventually(
      `${replica} running`,
      async () => {
        const p = await env.pidOf(replica);
        return p !== undefined && alive(p) ? p : undefined;
      },
      MINUTES,
      200,
    );
    assert.ok(
      chaos.done.every((d) => d.replica !== replica || d.pid !== pid),
      `${replica} runs as a new process ${context}`,
    );
  }
}

function assertBounds(w: Watchers, nodes: string[], context: string): void {
  assert.ok(
    w.availability.max >= 1,
    `the watcher saw a node unavailable (${w.availability.events} events): the bound below was measured ${context}`,
  );
  assert.ok(
    w.availability.max <= MAX_UNAVAILABLE,
    `at most ${MAX_UNAVAILABLE} unavailable, saw ${w.availability.max} ${context}`,
  );
  assert.ok(
    w.drains.maxDraining >= 1 && w.drains.maxDraining <= MAX_UNAVAILABLE,
    `drains at once: ${w.drains.maxDraining} ${context}`,
  );
  for (const node of nodes) {
    assert.equal(w.drains.cordons.get(node), 1, `${node} cordoned once ${context}`);
    assert.equal(
      w.drains.drains.get(node)?.length,
      1,
      `${node} drained once: ${(w.drains.drains.get(node) ?? []).join(', ')} ${context}`,
    );
  }
}

async function assertPdbsHeld(env: LocalEnvironment, workload: Pdbs, w: Watchers, context: string): Promise<void> {
  if (!('pdbs' in workload)) return;
  const now = await podsUnder(env.guest, workload.pdbs);
  const evicted = [...workload.pods].filter((p) => !now.has(p));
  assert.ok(evicted.length > 0, `a Pod under a PodDisruptionBudget was evicted: the PDB was in play ${context}`);
  assert.ok(w.pdbs.events > 0, 'the PDB watcher saw the PDBs');
  assert.deepEqual(w.pdbs.violations, [], `PodDisruptionBudgets violated ${context}`);
}

describe(
  'chaos: components killed and a leader paused during an in-place rollout (npm start --replicas 2)',
  { timeout: 20 * MINUTES },
  () => {
    let env: LocalEnvironment;
    let stateDir: string;

    before(async () => {
      stateDir = await mkdtemp(join(tmpdir(), 'kindling-chaos-'));
      env = new LocalEnvironment(stateDir);
      await env.start({ replicas: REPLICAS, env: LEADER_ENV });
    });

    after(async () => {
      const code = await env.stop();
      assert.equal(code, 0, env.output.slice(-3000));
      assert.match(env.output, /Stopped; nothing left running\./);
      assert.deepEqual(processesOf(stateDir), [], 'no process of the environment is left, restarted ones included');
      await rm(stateDir, { recursive: true, force: true });
    });

    it('when each upgrader, drainer and ignition-server replica is SIGKILLed and a leader paused mid-rollout, the rollout should complete with never more than 2 unavailable, no node drained twice, no PDB violated', async (t: TestContext) => {
      const seed = Number(process.env.KINDLING_CHAOS_SEED ?? randomInt(2 ** 31));
      const plan = chaosPlan(seeded(seed));
      const say = (line: string): void => {
        t.diagnostic(line);
        process.stderr.write(`chaos: ${line}\n`);
      };
      say(
        `seed ${seed} (replay with KINDLING_CHAOS_SEED=${seed}); plan: ${plan.map((s) => `${s.kind === 'kill' ? `kill ${s.replica}` : `pause the ${s.component} leader`} after ${s.delayMs} ms`).join(', ')}`,
      );

      const workload = await scaleOut(env);
      if ('absent' in workload)
        say(`PodDisruptionBudget check NOT made, and the rollout not held open for the plan: ${workload.absent}`);
      const nodes = (await env.nodes(POOL)).map((n) => n.metadata?.name ?? '');
      const watchers: Watchers = {
        availability: new AvailabilityWatcher(env.guest, nodes),
        drains: new DrainWatcher(env.guest, nodes),
        pdbs: new PdbWatcher(env.guest),
      };
      await Promise.all([watchers.availability.start(), watchers.drains.start(), watchers.pdbs.start()]);
      const chaos = new Chaos(env);
      let completedAt = NaN;
      try {
        completedAt = await chaoticRollout(env, chaos, plan, workload);
      } finally {
        watchers.availability.stop();
        watchers.drains.stop();
        watchers.pdbs.stop();
        say(`rollout complete after ${(completedAt / 1000).toFixed(1)} s; chaos:\n${chaos.log()}`);
        say(`the environment's supervision:\n${supervision(env.output)}`);
      }
      const context = `(seed ${seed})\n${chaos.log()}`;
      await assertChaosRan(env, chaos, { plan, completedAt }, context);
      assertBounds(watchers, nodes, context);
      await assertPdbsHeld(env, workload, watchers, context);
    });
  },
);
