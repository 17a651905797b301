/**
 * `kindling plan` and `kindling status` on the real test bed: a management cluster with the Kindling and
 * real Cluster API CRDs, the real NodePool controller (in-process) and ignition server (its own process, minting
 * the tokens and generating the payload of a real release image), Machines with
 * nodeRefs as Cluster API leaves them, and a KWOK guest cluster whose Nodes carry the upgrader's annotations.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as k8s from '#k8s';
import { stringify } from 'yaml';
import { installCapiCrds, installKindlingCrds, startCluster, type Cluster } from '../../test/bed/src/index.js';
import { eventually } from '../../test/bed/src/eventually.js';
import { createTestMachine, createTestNode } from '../../drainer/testing/index.js';
import { ANNOTATIONS, LABELS } from '../../api/src/keys.js';
import { CAPI_GROUP } from '../../api/src/capi.js';
import type { NodePool } from '../../api/src/nodepool.js';
import { nodePoolFixture } from '../../api/testing/nodepool.js';
import { createLogger } from '../../support/src/logger.js';
import { createNodePoolController, type NodePoolController } from '../../nodepool-controller/src/controller.js';
import { runIgnitionServer, type IgnitionServer } from '../../ignition-server/testing/index.js';
import { KUBELET_CONFIG } from '../../api/testing/nodepool.js';
import { main } from './main.js';
import { runStatus } from './status-watch.js';
import { validate, type Schema } from '../testing/json-schema.js';
import type { Plan } from './plan.js';

const NS = 'default';
const POOL = 'ops';
const NODES = ['ops-0', 'ops-1', 'ops-2'];
/** A release `plan` is asked about: plan reads only its tag, never the image. */
const IMAGE = (v: string): string => `registry.local:5000/kindling/release:${v}`;
const MERGE = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch);
const SCHEMA = JSON.parse(
  readFileSync(fileURLToPath(new URL('../../../cli/plan.schema.json', import.meta.url)), 'utf8'),
) as Schema;

async function run(argv: string[]): Promise<{ code: number; out: string; err: string }> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await main(argv, { out: (t) => void out.push(t), err: (t) => void err.push(t), env: {} });
  return { code, out: out.join(''), err: err.join('') };
}

describe('kindling plan and status on the real test bed', () => {
  let mgmt: Cluster;
  let guest: Cluster;
  let controller: NodePoolController;
  let ignition: IgnitionServer;
  let dir: string;
  let custom: k8s.CustomObjectsApi;
  let guestCore: k8s.CoreV1Api;
  let hash: string;
  const log = createLogger({ name: 'operator-test', level: 'warn' });

  const readPool = async (): Promise<NodePool> =>
    (await custom.getNamespacedCustomObject({
      group: 'kindling.dev',
      version: 'v1beta1',
      namespace: NS,
      plural: 'nodepools',
      name: POOL,
    })) as NodePool;
  const annotateSet = (annotations: Record<string, string>): Promise<unknown> =>
    custom.patchNamespacedCustomObject(
      {
        group: CAPI_GROUP,
        version: 'v1beta2',
        namespace: NS,
        plural: 'machinesets',
        name: POOL,
        body: { metadata: { annotations } },
      },
      MERGE,
    );
  const annotateNode = (name: string, annotations: Record<string, string>): Promise<unknown> =>
    guestCore.patchNode({ name, body: { metadata: { annotations } } }, MERGE);

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'kindling-cli-'));
    mgmt = await startCluster({ name: 'mgmt', controllerManager: false });
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
    custom = mgmt.kubeConfig.makeApiClient(k8s.CustomObjectsApi);
    guestCore = guest.kubeConfig.makeApiClient(k8s.CoreV1Api);
    await mgmt.kubeConfig.makeApiClient(k8s.CoreV1Api).createNamespacedConfigMap({
      namespace: NS,
      body: { metadata: { name: 'kubelet-config' }, data: { config: KUBELET_CONFIG } },
    });
    ignition = await runIgnitionServer({
      kubeconfigPath: mgmt.kubeconfigPath,
      dir: join(dir, 'ignition-server'),
      namespace: NS,
      releases: ['1.36.3'],
    });
    controller = createNodePoolController({
      kubeConfig: mgmt.kubeConfig,
      namespaces: [NS],
      log,
      config: {
        ignition: { endpoint: ignition.endpoint, caPem: ignition.caPem },
        tokenGraceMs: 3_600_000,
        maxSkewMinors: 3,
      },
      workers: 2,
    });
    await controller.start();
    const pool = nodePoolFixture(POOL, NS, (p) => {
      p.spec.release.image = ignition.releases['1.36.3'] ?? '';
      p.spec.replicas = NODES.length;
      p.spec.config = [{ name: 'kubelet-config' }];
      p.spec.management = { upgradeType: 'InPlace', inPlace: { maxUnavailable: 1 } };
    });
    await k8s.KubernetesObjectApi.makeApiClient(mgmt.kubeConfig).create(pool);
    hash =
      (await eventually('the pool to get its config hash', async () => (await readPool()).status?.configHash)) ?? '';
    // What Cluster API, the hosts and the upgrader leave behind: Machines with Nodes, all at the hash.
    for (const [i, node] of NODES.entries()) {
      await createTestNode(guest.kubeConfig, node, { [LABELS.zone]: `zone-${i % 2}` });
      await createTestMachine(mgmt.kubeConfig, {
        name: `${POOL}-m${i}`,
        namespace: NS,
        cluster: 'guest',
        machineSet: POOL,
        node,
      });
      await annotateNode(node, { [ANNOTATIONS.currentConfig]: hash, [ANNOTATIONS.state]: 'Done' });
    }
    await annotateSet({ [ANNOTATIONS.currentConfigHash]: hash });
    await controller.queue.drained();
  });
  after(async () => {
    await controller?.stop();
    await ignition?.stop();
    await Promise.all([guest?.stop(), mgmt?.stop()]);
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('when the pool is converged, plan should find nothing to do and status should show the pool at its hash', async () => {
    const plan = await run(['plan', `${NS}/${POOL}`, '--kubeconfig', mgmt.kubeconfigPath]);
    assert.equal(plan.code, 0, plan.err);
    assert.match(plan.out, /Control plane:\s+v1\.36\.3/);
    assert.match(plan.out, /Action: NONE/);
    const status = await run(['status', '-n', NS, '--kubeconfig', mgmt.kubeconfigPath]);
    assert.equal(status.code, 0, status.err);
    assert.match(status.out, new RegExp(`${NS}\\s+${POOL}\\s+InPlace\\s+3\\s+0\\s+0\\s+v1\\.36\\.3\\s+${hash}`));
  });

  it('when a release is planned, it should read the guest Nodes and batch them one at a time, print JSON of the schema, and write nothing', async () => {
    const before = (await readPool()).metadata.resourceVersion;
    const text = await run([
      'plan',
      `${NS}/${POOL}`,
      '--release',
      // The same version under another tag: a new release image, and no downgrade for the version policy.
      IMAGE('v1.36.3'),
      '--kubeconfig',
      mgmt.kubeconfigPath,
    ]);
    assert.equal(text.code, 0, text.err);
    assert.match(text.out, /Action: UPDATE IN PLACE: the upgrader moves 3 nodes/);
    assert.match(text.out, /3 nodes in 3 batches, at most 1 unavailable/);
    const json = await run([
      'plan',
      `${NS}/${POOL}`,
      '--release',
      IMAGE('v1.36.3'),
      '-o',
      'json',
      '--kubeconfig',
      mgmt.kubeconfigPath,
    ]);
    const plan = JSON.parse(json.out) as Plan;
    assert.deepEqual(validate(SCHEMA, plan), []);
    assert.deepEqual(
      plan.inPlace?.batches.map((b) => b.length),
      [1, 1, 1],
    );
    assert.deepEqual(plan.inPlace?.batches.flat().sort(), NODES);
    assert.equal((await readPool()).metadata.resourceVersion, before);
  });

  it('when the planned release is newer than the control plane, it should exit 3 naming the policy', async () => {
    const r = await run(['plan', `${NS}/${POOL}`, '--release', IMAGE('1.37.0'), '--kubeconfig', mgmt.kubeconfigPath]);
    assert.equal(r.code, 3);
    assert.match(r.out, /\[FAIL\]\s+Nodes are never newer than the control plane/);
  });

  it('when a file adds node labels, it should plan propagation to the Machines and Nodes only', async () => {
    const pool = await readPool();
    const file = join(dir, 'nodepool.yaml');
    await writeFile(
      file,
      stringify({
        apiVersion: pool.apiVersion,
        kind: pool.kind,
        metadata: { name: POOL, namespace: NS },
        spec: { ...pool.spec, nodeLabels: { tier: 'gold' } },
      }),
    );
    const r = await run(['plan', '-f', file, '--kubeconfig', mgmt.kubeconfigPath]);
    assert.equal(r.code, 0, r.err);
    assert.match(r.out, /reach 3 Machines and 3 Nodes in place/);
    assert.match(r.out, /Action: PROPAGATE IN PLACE/);
  });

  it('when an in-place rollout moves on, status --watch should redraw its progress from watch events', async () => {
    await annotateSet({ [ANNOTATIONS.currentConfigHash]: 'older' });
    await annotateNode('ops-0', { [ANNOTATIONS.currentConfig]: 'older' });
    await annotateNode('ops-1', {
      [ANNOTATIONS.currentConfig]: 'older',
      [ANNOTATIONS.desiredConfig]: hash,
      [ANNOTATIONS.state]: 'Working',
      [ANNOTATIONS.desiredDrain]: `drain-${hash}`,
    });
    const frames: string[] = [];
    const stop = new AbortController();
    const io = { out: (t: string) => void frames.push(t), err: () => {}, env: {} };
    const watching = runStatus({
      kubeConfig: mgmt.kubeConfig,
      scope: { namespace: NS, pool: POOL },
      watch: true,
      io,
      signal: stop.signal,
    });
    try {
      await eventually('a frame with the rollout', async () =>
        frames.some((f) => /1 of 3 updated/.test(f) && /ops-1\s+draining/.test(f) && /ops-0\s+waiting/.test(f)),
      );
      await annotateNode('ops-1', {
        [ANNOTATIONS.currentConfig]: hash,
        [ANNOTATIONS.state]: 'Done',
        [ANNOTATIONS.lastAppliedDrain]: `drain-${hash}`,
        [ANNOTATIONS.desiredDrain]: `uncordon-${hash}`,
      });
      await annotateNode('ops-1', { [ANNOTATIONS.lastAppliedDrain]: `uncordon-${hash}` });
      await eventually('a redrawn frame', async () =>
        frames.some((f) => /2 of 3 updated/.test(f) && /ops-1\s+done/.test(f)),
      );
    } finally {
      stop.abort();
      await watching;
    }
    assert.match(frames[0] ?? '', /\[#{7}-{13}\]\s+1 of 3 updated/);
  });
});
