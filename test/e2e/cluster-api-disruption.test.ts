/**
 * End to end on the local environment (`npm start`): the sample pool `capi` (ClusterAPI in-place engine, 2
 * Machines, maxUnavailable 1) disturbed during an in-place update that Cluster API drives through Kindling's
 * extension. Paused mid-update (spec.pausedUntil): no further Machine is handed its payload until the pause
 * clears, and the pool's status says where the update stopped, as on the MachineSet engine. SIGKILLs of the
 * upgrader (the process that hosts the extension) and the drainer at random points of an update: it
 * completes, with a workload of the test's own under a PodDisruptionBudget on the pool's nodes and
 * independent watchers of the nodes, the pods and the budgets. The kills are seeded:
 * `KINDLING_CHAOS_SEED=<seed>` replays the plan.
 */
import { after, before, describe, it, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { randomInt } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { NODE_STATES } from '../../api/src/keys.js';
import { eventually } from '../bed/src/index.js';
import { CapiPool, POOL, assertHeld, stopWatchers } from './cluster-api.js';
import { killRunning, seeded, shuffled, supervision } from './disruption.js';
import { LocalEnvironment } from './environment.js';

const MINUTES = 60_000;
/**
 * Leader timings every component reads from its environment (KINDLING_<FLAG>): a SIGKILLed leader's Lease
 * frees in half a minute, with a renew deadline roomy enough for a machine shared by many suites (at the
 * defaults a leader whose apiserver answers its renewal after 10 s exits, seen at load 45).
 */
const LEADER_ENV = {
  KINDLING_LEADER_ELECT_LEASE_DURATION: '30s',
  KINDLING_LEADER_ELECT_RENEW_DEADLINE: '20s',
  KINDLING_LEADER_ELECT_RETRY_PERIOD: '2s',
};
/** Components SIGKILLed during an update, twice each: the upgrader hosts the extension (one process, replicas 1). */
const VICTIMS = ['inplace-upgrader', 'inplace-upgrader', 'drainer', 'drainer'];
const SIGKILLED = /\n(inplace-upgrader|drainer) exited, code 137 \(SIGKILL\)/g;

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

describe(
  'a NodePool on the ClusterAPI in-place engine, paused and its components killed mid-update, end to end',
  { timeout: 30 * MINUTES },
  () => {
    let env: LocalEnvironment;
    let stateDir: string;
    let pool: CapiPool;

    before(async () => {
      stateDir = await mkdtemp(join(tmpdir(), 'kindling-e2e-capi-disruption-'));
      env = new LocalEnvironment(stateDir);
      pool = new CapiPool(env);
      await env.start({ timeoutMs: 15 * MINUTES, env: LEADER_ENV });
      await pool.startWorkload();
    });

    after(async () => {
      const code = await env.stop();
      assert.equal(code, 0, env.output.slice(-3000));
      await rm(stateDir, { recursive: true, force: true });
    });

    it('when pausedUntil is set mid-update, no further Machine should be handed its payload until it clears, the status should say where the update stopped, and then the update should complete', async () => {
      const before = await pool.uids();
      const from = (await env.pool(POOL)).status?.configHash ?? '';
      await pool.setExtra('paused');
      // Paused as soon as the first node is handed the payload: the rest of its update (drain, apply, reboot,
      // health gate) and Cluster API's move to the next Machine take far longer than this.
      const first = await pool.handedOut(from);
      const target = first.desired ?? '';
      await env.patchPool(POOL, { spec: { pausedUntil: 'true' } });
      await eventually('the MachineDeployment paused', () => pool.deploymentPaused(), MINUTES, 200);
      const handed = (await pool.nodeConfigs()).filter((n) => n.desired === target).map((n) => n.name);
      assert.deepEqual(handed, [first.name], 'only the first node was handed the payload when the pause took effect');
      await eventually(
        `${first.name} done at ${target}`,
        async () =>
          (await pool.nodeConfigs()).some(
            (n) => n.name === first.name && n.current === target && n.state === NODE_STATES.done,
          ),
        10 * MINUTES,
        1000,
      );
      await eventually(
        'the pool saying where the update stopped',
        async () =>
          /: 1 of 2 updated; paused at 1 of 2 by spec\.pausedUntil/.test(
            (await pool.condition('UpdatingConfig'))?.message ?? '',
          ),
        2 * MINUTES,
        1000,
      );
      // Held: while the pool stays paused, the other node is not handed the payload.
      for (const until = Date.now() + 45_000; Date.now() < until; await sleep(1000)) {
        const others = (await pool.nodeConfigs()).filter((n) => n.name !== first.name && n.desired === target);
        assert.deepEqual(
          others.map((n) => n.name),
          [],
          'no further node handed out while the pool is paused',
        );
      }
      assert.match(
        (await pool.condition('UpdatingConfig'))?.message ?? '',
        /1 of 2 updated; paused at 1 of 2/,
        'still paused at 1 of 2',
      );
      await env.patchPool(POOL, { spec: { pausedUntil: null } });
      await pool.updatedInPlace(before, 'paused');
      assert.deepEqual(await pool.uids(), before, 'no Machine was replaced');
      await eventually(
        'the pool no longer updating its config',
        async () => (await pool.condition('UpdatingConfig'))?.status === 'False',
        2 * MINUTES,
        1000,
      );
    });

    it('when the upgrader (the extension’s process) and the drainer are SIGKILLed at random points of an in-place update, it should complete: same Machines, new files, the budget and maxUnavailable held', async (t: TestContext) => {
      const seed = Number(process.env.KINDLING_CHAOS_SEED ?? randomInt(2 ** 31));
      const random = seeded(seed);
      const plan = shuffled(VICTIMS, random).map((replica) => ({
        replica,
        delayMs: 500 + Math.floor(random() * 7500),
      }));
      const say = (line: string): void => {
        t.diagnostic(line);
        process.stderr.write(`capi chaos: ${line}\n`);
      };
      say(
        `seed ${seed} (replay with KINDLING_CHAOS_SEED=${seed}); plan: ${plan.map((k) => `kill ${k.replica} after ${k.delayMs} ms`).join(', ')}`,
      );
      const before = await pool.uids();
      const from = (await env.pool(POOL)).status?.configHash ?? '';
      const exitsBefore = (env.output.match(SIGKILLED) ?? []).length;
      const kills: { replica: string; pid: number; at: number }[] = [];
      let handedAt: number | undefined;
      let completedAt: number | undefined;
      const started = Date.now();
      const watchers = await pool.startWatchers();
      try {
        await pool.setExtra('killed');
        const update = pool.updatedInPlace(before, 'killed').then(() => (completedAt = Date.now() - started));
        const chaos = (async (): Promise<void> => {
          // Counted from the first node handed the payload, so the kills fall within the update under way.
          await pool.handedOut(from);
          handedAt = Date.now() - started;
          for (const step of plan) {
            await sleep(step.delayMs);
            if (completedAt !== undefined) return;
            kills.push({ replica: step.replica, pid: await killRunning(env, step.replica), at: Date.now() - started });
          }
        })();
        await Promise.all([update, chaos]);
      } finally {
        stopWatchers(watchers);
        say(
          `first node handed the payload after ${((handedAt ?? NaN) / 1000).toFixed(1)} s, update complete after ${((completedAt ?? NaN) / 1000).toFixed(1)} s; kills: ${kills.map((k) => `+${(k.at / 1000).toFixed(1)} s ${k.replica} (pid ${k.pid})`).join(', ')}`,
        );
        say(`the environment's supervision:\n${supervision(env.output)}`);
      }
      const context = `(seed ${seed})`;
      assert.equal(kills.length, plan.length, `every kill ran before the update completed ${context}`);
      assert.ok(
        kills.every((k) => k.at > (handedAt ?? Infinity) && k.at < (completedAt ?? 0)),
        `every kill happened while the update was under way ${context}`,
      );
      const exits = (env.output.match(SIGKILLED) ?? []).length;
      assert.equal(
        exits - exitsBefore,
        kills.length,
        `each SIGKILL was reported by the environment's supervisor ${context}`,
      );
      assert.deepEqual(await pool.uids(), before, `no Machine was replaced ${context}`);
      assertHeld(watchers, context);
      const degraded = (await pool.nodeConfigs()).filter((n) => n.state === NODE_STATES.degraded);
      assert.deepEqual(degraded, [], `no node Degraded ${context}`);
    });
  },
);
