/**
 * A Replace pool's maintenance window end to end on the local environment (`npm start`), in a file of its own
 * (each e2e file keeps within the per-file time budget): Cluster API creates no Machine of a release patched
 * outside the window, starts when it opens, and once it closes mid-rollout (the MachineDeployment paused)
 * finishes the Machine under way and creates no other. The test moves the window, never the clock.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Machine as CapiMachine, MachineDeployment } from '../../api/src/capi.js';
import type { MaintenanceWindow } from '../../api/src/nodepool.js';
import { eventually } from '../bed/src/index.js';
import { LocalEnvironment, NS } from './environment.js';

const MINUTES = 60_000;
const CLOSED: MaintenanceWindow = { schedule: `0 ${(new Date().getUTCHours() + 12) % 24} * * *`, duration: '1h' };
const OPEN: MaintenanceWindow = { schedule: '* * * * *', duration: '1h' };
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
/** The user-data Secret a Machine boots (the environment's Machine type leaves its spec out). */
const userDataOf = (m: object): string | undefined => (m as CapiMachine).spec.bootstrap.dataSecretName;

describe("a Replace pool's maintenance window on the local environment", { timeout: 40 * MINUTES }, () => {
  let env: LocalEnvironment;
  let stateDir: string;

  before(async () => {
    stateDir = await mkdtemp(join(tmpdir(), 'kindling-e2e-replace-window-'));
    env = new LocalEnvironment(stateDir);
    await env.start();
  });

  after(async () => {
    const code = await env.stop();
    assert.equal(code, 0, env.output.slice(-3000));
    await rm(stateDir, { recursive: true, force: true });
  });

  const machineDeployment = async (): Promise<MachineDeployment> =>
    (await env.custom.getNamespacedCustomObject({
      group: 'cluster.x-k8s.io',
      version: 'v1beta2',
      namespace: NS,
      plural: 'machinedeployments',
      name: 'replace',
    })) as MachineDeployment;
  const userData = async (): Promise<string | undefined> =>
    (await machineDeployment()).spec.template.spec.bootstrap.dataSecretName;
  /** The replace Machines booting `secret`, by name. */
  const booting = async (secret: string): Promise<string[]> =>
    (await env.machines('replace'))
      .filter((m) => !m.metadata.deletionTimestamp && userDataOf(m) === secret)
      .map((m) => m.metadata.name ?? '')
      .sort();
  const rolloutAllowed = async (): Promise<{ status: string; reason: string; message: string } | undefined> =>
    (await env.pool('replace')).status?.conditions?.find((c) => c.type === 'RolloutAllowed');
  const holdsFor = async (ms: number, check: () => Promise<void>): Promise<void> => {
    for (const end = Date.now() + ms; Date.now() < end; await sleep(3000)) await check();
  };

  it('when a release upgrade is patched outside the window, it should create no Machine; the window opened, it should start; closed mid-rollout, it should finish the Machine under way and create no other; opened again, it should complete', async () => {
    const old = await userData();
    assert.ok(old);
    const oldMachines = await booting(old);
    const image = (await env.pool('replace')).spec.release.image.replace(/:1\.36\.2$/, ':1.36.3');
    await env.patchPool('replace', { spec: { release: { image }, management: { maintenanceWindow: CLOSED } } });
    const held = await eventually(
      'RolloutAllowed False: waiting for the maintenance window',
      async () => {
        const c = await rolloutAllowed();
        return c?.reason === 'WaitingForMaintenanceWindow' && c.status === 'False' ? c : undefined;
      },
      2 * MINUTES,
      1000,
    );
    assert.match(held.message, /^waiting for the maintenance window \(opens \d{4}-\d\d-\d\dT\d\d:00Z\)$/);
    await holdsFor(60_000, async () => {
      assert.equal(await userData(), old, 'the MachineDeployment moved to the new release outside the window');
      assert.deepEqual(await booting(old), oldMachines, 'a Machine was created or deleted outside the window');
    });

    await env.patchPool('replace', { spec: { management: { maintenanceWindow: OPEN } } });
    const next = await eventually(
      'a Machine of the new release created in the window',
      async () => {
        const secret = await userData();
        return secret !== old && secret !== undefined && (await booting(secret)).length > 0 ? secret : undefined;
      },
      3 * MINUTES,
      500,
    );
    await env.patchPool('replace', { spec: { management: { maintenanceWindow: CLOSED } } });
    await eventually(
      'the MachineDeployment paused',
      async () => (await machineDeployment()).spec.paused === true,
      MINUTES,
      500,
    );
    const underWay = await booting(next);
    assert.ok(underWay.length < oldMachines.length, 'the window closed before every Machine was replaced');
    await eventually(
      'the Machine under way joined with the window closed',
      async () => {
        const machines = await env.machines('replace');
        return underWay.every((name) => machines.some((m) => m.metadata.name === name && m.status?.nodeRef?.name));
      },
      6 * MINUTES,
      2000,
    );
    await holdsFor(60_000, async () =>
      assert.deepEqual(await booting(next), underWay, 'a Machine created after the window closed'),
    );

    await env.patchPool('replace', { spec: { management: { maintenanceWindow: OPEN } } });
    await eventually(
      'every replace Machine at 1.36.3, with its node, once the window opened again',
      async () => {
        const alive = (await env.machines('replace')).filter((m) => !m.metadata.deletionTimestamp);
        const done = alive.filter((m) => userDataOf(m) === next && m.status?.nodeRef?.name);
        return alive.length === oldMachines.length && done.length === alive.length;
      },
      12 * MINUTES,
      2000,
    );
    assert.equal((await machineDeployment()).spec.paused, undefined, 'the pause is lifted');
    await env.patchPool('replace', { spec: { management: { maintenanceWindow: null } } });
  });
});
