import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type * as k8s from '#k8s';
import {
  ANNOTATIONS,
  LABELS,
  NODEPOOL_FINALIZER,
  SECRET_KEYS,
  tokenSecretName,
  userDataSecretName,
} from '../../api/src/keys.js';
import type { NodePool } from '../../api/src/nodepool.js';
import { nodePoolFixture } from '../../api/testing/nodepool.js';
import { NotReadyError, RefusedError } from '../../support/src/errors.js';
import { createLogger } from '../../support/src/logger.js';
import { realClock } from '../../support/src/timers.js';
import { Caches } from './caches.js';
import type { CacheSource, Writer } from './store.js';
import { parseVersion, tagVersionResolver } from './release.js';
import { NodePoolReconciler } from './reconciler.js';
import { normaliseConfig } from './hash.js';
import { MintProgress } from './mint-progress.js';
import type { ControlPlaneVersions } from './guest.js';
import type { GuestNodes } from './nodes.js';

/** An in-memory management cluster: one map per kind, and a writer that stamps creation times from the test's clock. */
function world(
  pool: NodePool,
  opts: { refuse?: readonly string[]; versions?: ControlPlaneVersions; nodes?: GuestNodes } = {},
): {
  reconciler: NodePoolReconciler;
  statuses: NodePool['status'][];
  /** The patches and deletes, in order: "patch Kind/name" and "delete Kind/name". */
  writes: string[];
  secrets: Map<string, k8s.KubernetesObject>;
  store: (kind: string) => Map<string, k8s.KubernetesObject>;
  clock: { at: number };
  mints: MintProgress;
} {
  const clock = { at: Date.parse('2026-11-24T00:00:00Z') };
  const stores = new Map<string, Map<string, k8s.KubernetesObject>>();
  const store = (kind: string): Map<string, k8s.KubernetesObject> => {
    const found = stores.get(kind) ?? new Map<string, k8s.KubernetesObject>();
    stores.set(kind, found);
    return found;
  };
  const source = <T extends k8s.KubernetesObject>(kind: string): CacheSource<T> => ({
    get: ({ name }) => store(kind).get(name) as T | undefined,
    list: () => [...store(kind).values()] as T[],
  });
  store('NodePool').set(pool.metadata.name, pool);
  const statuses: NodePool['status'][] = [];
  const writes: string[] = [];
  const put = <T extends k8s.KubernetesObject>(desired: T): T => {
    const kind = desired.kind ?? '';
    const name = desired.metadata?.name ?? '';
    const old = store(kind).get(name);
    const created = old?.metadata?.creationTimestamp ?? new Date(clock.at).toISOString();
    const kept = keptByOthers(old, desired);
    const metadata = { ...old?.metadata, ...desired.metadata, ...kept.metadata, creationTimestamp: created };
    const live = { ...old, ...desired, ...kept, metadata } as T;
    store(kind).set(name, live);
    return live;
  };
  const writer: Writer = {
    count: 0,
    apply: (desired) => {
      if (opts.refuse?.includes(desired.kind ?? '') === true)
        return Promise.reject(
          new RefusedError({
            kind: desired.kind ?? '',
            key: `${desired.metadata?.namespace}/${desired.metadata?.name}`,
            code: 422,
            message: 'denied by a webhook',
          }),
        );
      return Promise.resolve(put(desired));
    },
    applyStatus: (desired) => {
      statuses.push((desired as unknown as NodePool).status);
      return Promise.resolve(put(desired));
    },
    mergePatch: (target, patch) => {
      writes.push(`patch ${target.kind}/${target.metadata?.name}`);
      const live = store(target.kind ?? '').get(target.metadata?.name ?? '') ?? target;
      const annotations = withAnnotations(live.metadata?.annotations, patch);
      const patched = { ...live, metadata: { ...live.metadata, annotations } } as typeof target;
      store(target.kind ?? '').set(target.metadata?.name ?? '', patched);
      return Promise.resolve(patched);
    },
    remove: (live) => {
      writes.push(`delete ${live.kind}/${live.metadata?.name}`);
      return Promise.resolve();
    },
  };
  const caches = new Caches({
    nodePools: source('NodePool'),
    configMaps: source('ConfigMap'),
    secrets: source('Secret'),
    machineSets: source('MachineSet'),
    machineDeployments: source('MachineDeployment'),
    healthChecks: source('MachineHealthCheck'),
    machines: source('Machine'),
  });
  const version = parseVersion('1.36.3');
  assert.ok(version);
  const mints = new MintProgress();
  const reconciler = new NodePoolReconciler({
    caches,
    writer,
    versions: opts.versions ?? { versionOf: () => Promise.resolve(version) },
    releases: tagVersionResolver,
    mints,
    ...(opts.nodes ? { nodes: opts.nodes } : {}),
    clock: { ...realClock, now: () => clock.at },
    config: { ignition: { endpoint: 'https://ignition.example', caPem: '' }, tokenGraceMs: 0, maxSkewMinors: 3 },
    log: createLogger({ name: 'test', level: 'silent' }),
  });
  return { reconciler, statuses, writes, secrets: store('Secret'), store, clock, mints };
}

/** Annotations after a merge patch of `metadata.annotations` (null removes one). */
function withAnnotations(annotations: Record<string, string> | undefined, patch: object): Record<string, string> {
  const changes = (patch as { metadata?: { annotations?: Record<string, string | null> } }).metadata?.annotations;
  const out = { ...annotations };
  for (const [k, v] of Object.entries(changes ?? {})) {
    if (v === null) delete out[k];
    else out[k] = v;
  }
  return out;
}

/** As server-side apply does, fields of other managers stay: the token the ignition server minted, and Cluster API's
 * fields of a Machine (its spec, the pool's label) when the pool's labels and taints are applied to it. */
function keptByOthers(
  old: k8s.KubernetesObject | undefined,
  desired: k8s.KubernetesObject,
): { data?: object; spec?: object; metadata?: { labels: Record<string, string> } } {
  switch (desired.kind) {
    case 'Secret':
      return { data: { ...dataOf(old), ...dataOf(desired) } };
    case 'Machine': {
      const labels = { ...old?.metadata?.labels, ...desired.metadata?.labels };
      return { spec: { ...specOf(old), ...specOf(desired) }, metadata: { labels } };
    }
    default:
      return {};
  }
}

/** What the ignition server does to the token Secrets: mint the token, and (verdict) report the payload generated. */
function mint(secrets: Map<string, k8s.KubernetesObject>, opts: { verdict: boolean }): void {
  for (const s of secrets.values() as Iterable<k8s.V1Secret>) {
    if (s.metadata?.name?.startsWith('token-') !== true) continue;
    s.data = { ...s.data, [SECRET_KEYS.token]: Buffer.from('minted').toString('base64') };
    if (opts.verdict)
      s.metadata.annotations = {
        ...s.metadata.annotations,
        [ANNOTATIONS.payloadReason]: 'AsExpected',
        [ANNOTATIONS.payloadMessage]: 'Payload generated',
      };
  }
}

/** Another pool's token Secret (of the same namespace) as the ignition server leaves it after a mint at `ms`. */
const issuedAt = (ms: number): k8s.V1Secret => ({
  metadata: {
    name: tokenSecretName('others', 'h0'),
    namespace: 'tenant-a',
    labels: { [LABELS.nodePool]: 'others', [LABELS.tokenSecret]: 'true' },
    annotations: { [ANNOTATIONS.tokenIssuedAt]: new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z') },
  },
});

const dataOf = (o: k8s.KubernetesObject | undefined): Record<string, string> | undefined =>
  (o as { data?: Record<string, string> } | undefined)?.data;
const specOf = (o: k8s.KubernetesObject | undefined): object | undefined => (o as { spec?: object } | undefined)?.spec;
const key = (p: NodePool): string => `${p.metadata.namespace}/${p.metadata.name}`;
const RELEASE = (v: string): string => `registry.local:5000/kindling/release:${v}`;

/** Reconciles a new pool until its children are written at its minted hash; returns the pool as stored. */
async function deploy(w: ReturnType<typeof world>, pool: NodePool): Promise<NodePool> {
  await assert.rejects(w.reconciler.reconcile(key(pool)), NotReadyError);
  mint(w.secrets, { verdict: true });
  w.clock.at += 300;
  await w.reconciler.reconcile(key(pool));
  return w.store('NodePool').get(pool.metadata.name) as NodePool;
}

/** A MachineSet Cluster API made from the pool's MachineDeployment, with Machines booting `hash`. */
const capiMachineSet = (name: string, hash: string): k8s.KubernetesObject =>
  ({
    apiVersion: 'cluster.x-k8s.io/v1beta2',
    kind: 'MachineSet',
    metadata: { name, namespace: 'tenant-a', labels: { [LABELS.nodePool]: 'workers' } },
    spec: {
      replicas: 2,
      template: {
        spec: {
          bootstrap: { dataSecretName: userDataSecretName('workers', hash) },
          infrastructureRef: { name: 'small' },
        },
      },
    },
  }) as k8s.KubernetesObject;

/** What the status says of the children: the hash and version they boot, the rollout, the nodes available. */
const ofChildren = (
  s: NodePool['status'],
): Pick<NonNullable<NodePool['status']>, 'configHash' | 'version' | 'replicas' | 'rollout'> => ({
  configHash: s?.configHash,
  version: s?.version,
  replicas: s?.replicas,
  rollout: s?.rollout,
});

const cond = (s: NodePool['status'], type: string): { status: string; reason: string; message: string } | undefined =>
  s?.conditions?.find((c) => c.type === type);

describe('NodePoolReconciler: when the status is written', () => {
  it('when a new pool only waits for the token it just asked for, it should write no status yet; when the retry finds it still not minted, it should say so', async () => {
    const pool = nodePoolFixture('workers', 'tenant-a');
    const w = world(pool);
    await assert.rejects(w.reconciler.reconcile(key(pool)), NotReadyError);
    assert.equal(w.statuses.length, 0, 'the first status waits for the mint');
    w.clock.at += 5_000;
    await assert.rejects(w.reconciler.reconcile(key(pool)), NotReadyError);
    assert.equal(w.statuses.length, 1);
    const ready = cond(w.statuses[0], 'Ready');
    assert.equal(ready?.status, 'False');
    assert.match(ready?.message ?? '', /^Waiting for the ignition server to mint the token of config hash \w+$/);
  });

  it('when the ignition server is minting other pools at the retry, it should keep the first status for the answer and write it once', async () => {
    const pool = nodePoolFixture('workers', 'tenant-a');
    const w = world(pool);
    await assert.rejects(w.reconciler.reconcile(key(pool)), NotReadyError);
    for (const late of [5_000, 120_000]) {
      w.clock.at = Date.parse('2026-11-24T00:00:00Z') + late;
      w.mints.observe(issuedAt(w.clock.at - 1_000), w.clock.at);
      await assert.rejects(w.reconciler.reconcile(key(pool)), NotReadyError);
    }
    assert.equal(w.statuses.length, 0, 'the server is answering a queue, ours in it');
    mint(w.secrets, { verdict: true });
    w.clock.at += 300;
    assert.deepEqual(await w.reconciler.reconcile(key(pool)), {});
    assert.equal(w.statuses.length, 1);
    assert.equal(cond(w.statuses[0], 'ValidGeneratedPayload')?.status, 'True');
  });

  it('when the ignition server has minted for five minutes without answering the pool, it should write the first status saying it waits', async () => {
    const pool = nodePoolFixture('workers', 'tenant-a');
    const w = world(pool);
    await assert.rejects(w.reconciler.reconcile(key(pool)), NotReadyError);
    w.clock.at += 5 * 60_000;
    w.mints.observe(issuedAt(w.clock.at - 1_000), w.clock.at);
    await assert.rejects(w.reconciler.reconcile(key(pool)), NotReadyError);
    assert.equal(w.statuses.length, 1);
    assert.match(cond(w.statuses[0], 'Ready')?.message ?? '', /^Waiting for the ignition server to mint the token/);
  });

  it('when the token is minted before the retry, it should write the first status once, with the children at the new hash', async () => {
    const pool = nodePoolFixture('workers', 'tenant-a');
    const w = world(pool);
    await assert.rejects(w.reconciler.reconcile(key(pool)), NotReadyError);
    mint(w.secrets, { verdict: true });
    w.clock.at += 300;
    assert.deepEqual(await w.reconciler.reconcile(key(pool)), {});
    assert.equal(w.statuses.length, 1);
    assert.ok(w.statuses[0]?.configHash, 'the status names the hash the children run');
    assert.equal(cond(w.statuses[0], 'ChildObjectsAccepted')?.status, 'True');
    assert.equal(cond(w.statuses[0], 'ValidGeneratedPayload')?.status, 'True');
  });

  it('when the token comes before its payload verdict, it should write the children at once and the first status with the verdict', async () => {
    const pool = nodePoolFixture('workers', 'tenant-a');
    const w = world(pool);
    await assert.rejects(w.reconciler.reconcile(key(pool)), NotReadyError);
    mint(w.secrets, { verdict: false });
    w.clock.at += 300;
    await assert.rejects(w.reconciler.reconcile(key(pool)), NotReadyError);
    assert.equal(w.statuses.length, 0, 'the first status waits for the verdict');
    assert.ok(w.store('MachineSet').size + w.store('MachineDeployment').size > 0, 'the child is written meanwhile');
    mint(w.secrets, { verdict: true });
    w.clock.at += 300;
    assert.deepEqual(await w.reconciler.reconcile(key(pool)), {});
    assert.equal(w.statuses.length, 1);
    assert.equal(cond(w.statuses[0], 'ValidGeneratedPayload')?.status, 'True');
  });

  it('when the payload verdict is still missing at the retry, it should write the first status saying the payload is awaited', async () => {
    const pool = nodePoolFixture('workers', 'tenant-a');
    const w = world(pool);
    await assert.rejects(w.reconciler.reconcile(key(pool)), NotReadyError);
    mint(w.secrets, { verdict: false });
    w.clock.at += 5_000;
    assert.deepEqual(await w.reconciler.reconcile(key(pool)), {});
    assert.equal(w.statuses.length, 1);
    assert.equal(cond(w.statuses[0], 'ValidGeneratedPayload')?.status, 'Unknown');
  });

  it("when a phase fails, it should still write the status, with the apiserver's refusal, and fail the reconcile", async () => {
    const pool = nodePoolFixture('workers', 'tenant-a');
    const w = world(pool, { refuse: ['Secret'] });
    await assert.rejects(w.reconciler.reconcile(key(pool)), RefusedError);
    assert.equal(w.statuses.length, 1);
    const accepted = cond(w.statuses[0], 'ChildObjectsAccepted');
    assert.equal(accepted?.status, 'False');
    assert.match(
      accepted?.message ?? '',
      /^The apiserver refused Secret tenant-a\/token-workers-\w+ \(422\): denied by a webhook$/,
    );
  });

  it('when a write at the decided hash fails, it should still report that hash and its version together', async () => {
    const pool = nodePoolFixture('workers', 'tenant-a');
    const w = world(pool, { refuse: ['MachineSet', 'MachineDeployment'] });
    await assert.rejects(w.reconciler.reconcile(key(pool)), NotReadyError);
    mint(w.secrets, { verdict: true });
    w.clock.at += 300;
    await assert.rejects(w.reconciler.reconcile(key(pool)), RefusedError);
    assert.equal(w.statuses.length, 1);
    assert.equal(cond(w.statuses[0], 'ChildObjectsAccepted')?.status, 'False');
    const token = [...w.secrets.keys()].find((name) => name.startsWith('token-'));
    assert.equal(
      w.statuses[0]?.configHash,
      token?.slice('token-workers-'.length),
      'the hash the children are written with',
    );
    assert.equal(w.statuses[0]?.version, 'v1.36.3', 'beside the version they are written with');
  });

  it("when a deployed pool's token Secret for a new release is refused, it should keep the deployed hash, its version, the rollout under way and the replicas beside the refusal", async () => {
    const refuse: string[] = [];
    const w = world(
      nodePoolFixture('workers', 'tenant-a', (p) => (p.spec.release.image = RELEASE('1.36.2'))),
      { refuse },
    );
    const pool = await deploy(w, w.store('NodePool').get('workers') as NodePool);
    const deployed = w.statuses.at(-1)?.configHash ?? '';
    assert.notEqual(deployed, '');
    // Cluster API still moves Machines off an older hash, and two nodes of the pool are available.
    w.store('MachineSet').set('workers-old', capiMachineSet('workers-old', 'older'));
    Object.assign(w.store('MachineDeployment').get('workers') ?? {}, { status: { availableReplicas: 2 } });
    await w.reconciler.reconcile(key(pool));
    const before = ofChildren(w.statuses.at(-1));
    assert.deepEqual(before, { configHash: deployed, version: 'v1.36.2', replicas: 2, rollout: before.rollout });
    assert.deepEqual([before.rollout?.from, before.rollout?.to], ['older', deployed]);

    pool.spec.release.image = RELEASE('1.36.3');
    refuse.push('Secret');
    const written = w.statuses.length;
    await assert.rejects(w.reconciler.reconcile(key(pool)), RefusedError);
    assert.equal(w.statuses.length, written + 1, 'the failed reconcile writes its status');
    assert.deepEqual(
      ofChildren(w.statuses.at(-1)),
      before,
      'the children still boot the deployed hash: the ignition server keeps serving its token Secret',
    );
    const accepted = cond(w.statuses.at(-1), 'ChildObjectsAccepted') ?? { status: '', message: '' };
    assert.equal(accepted.status, 'False');
    assert.match(accepted.message, /^The apiserver refused Secret tenant-a\/token-workers-\w+ \(422\)/);
    assert.doesNotMatch(accepted.message, new RegExp(deployed), "the refused Secret is the new hash's");
  });
});

/** A config ConfigMap whose one MachineConfig writes /etc/motd. */
const motd = (text: string): k8s.V1ConfigMap => ({
  apiVersion: 'v1',
  kind: 'ConfigMap',
  metadata: { name: 'motd', namespace: 'tenant-a' },
  data: {
    config: [
      'apiVersion: machineconfiguration.openshift.io/v1',
      'kind: MachineConfig',
      'metadata: { name: 99-motd }',
      'spec:',
      '  config:',
      '    ignition: { version: 3.2.0 }',
      `    storage: { files: [{ path: /etc/motd, mode: 420, contents: { source: "data:,${text}" } }] }`,
    ].join('\n'),
  },
});

describe('NodePoolReconciler: the maintenance window', () => {
  /** A pool at release 1.36.2 whose children exist and token is minted; its window (02:00Z for 1h) is closed. */
  async function deployed(
    upgradeType: 'Replace' | 'InPlace',
    setup: (p: NodePool) => void = () => undefined,
  ): Promise<ReturnType<typeof world> & { pool: NodePool }> {
    const pool = nodePoolFixture('workers', 'tenant-a', (p) => {
      p.spec.release.image = 'registry.local:5000/kindling/release:1.36.2';
      p.spec.management = { upgradeType, maintenanceWindow: { schedule: '0 2 * * *', duration: '1h' } };
      setup(p);
    });
    const w = world(pool);
    w.store('ConfigMap').set('motd', motd('Welcome'));
    await assert.rejects(w.reconciler.reconcile(key(pool)), NotReadyError);
    mint(w.secrets, { verdict: true });
    w.clock.at += 300;
    await w.reconciler.reconcile(key(pool));
    return { ...w, pool: w.store('NodePool').get('workers') as NodePool };
  }
  const childOf = (w: ReturnType<typeof world>, kind: string): Record<string, unknown> & k8s.KubernetesObject =>
    w.store(kind).get('workers') as Record<string, unknown> & k8s.KubernetesObject;
  const bootstrapOf = (child: object): string =>
    JSON.stringify((child as { spec: { template: { spec: { bootstrap: unknown } } } }).spec.template.spec.bootstrap);

  it('when the release of a Replace pool changes outside the window, it should keep the MachineDeployment at the deployed hash, apply the labels at once, say when the window opens and look again then; inside it, it should roll', async () => {
    const w = await deployed('Replace');
    const before = bootstrapOf(childOf(w, 'MachineDeployment'));
    w.pool.spec.release.image = 'registry.local:5000/kindling/release:1.36.3';
    w.pool.spec.nodeLabels = { team: 'blue' };
    const result = await w.reconciler.reconcile(key(w.pool));
    const md = childOf(w, 'MachineDeployment') as {
      spec: { template: { metadata: { labels: Record<string, string> } } };
    };
    assert.equal(bootstrapOf(md), before, 'the template is held');
    assert.equal(md.spec.template.metadata.labels.team, 'blue', 'labels are not held');
    assert.equal([...w.secrets.keys()].filter((n) => n.startsWith('token-')).length, 1, 'no token for the held hash');
    const allowed = cond(w.statuses.at(-1), 'RolloutAllowed');
    assert.deepEqual(
      [allowed?.status, allowed?.reason, allowed?.message],
      ['False', 'WaitingForMaintenanceWindow', 'waiting for the maintenance window (opens 2026-11-24T02:00Z)'],
    );
    assert.ok(Math.abs((result.requeueAfterMs ?? 0) - (Date.parse('2026-11-24T02:00:00Z') - w.clock.at)) < 1000);

    w.clock.at = Date.parse('2026-11-24T02:00:30Z');
    await assert.rejects(w.reconciler.reconcile(key(w.pool)), NotReadyError);
    mint(w.secrets, { verdict: true });
    w.clock.at += 300;
    await w.reconciler.reconcile(key(w.pool));
    assert.notEqual(bootstrapOf(childOf(w, 'MachineDeployment')), before, 'the rollout starts in the window');
  });

  it('when the window closes while an InPlace rollout is under way, it should hold the MachineSet (no node handed out) and release it when the window opens', async () => {
    const w = await deployed('InPlace');
    w.clock.at = Date.parse('2026-11-24T02:10:00Z');
    w.pool.spec.release.image = 'registry.local:5000/kindling/release:1.36.3';
    const annotation = (k: string): string | undefined => childOf(w, 'MachineSet').metadata?.annotations?.[k];
    const from = annotation(ANNOTATIONS.targetConfigHash) ?? '';
    await assert.rejects(w.reconciler.reconcile(key(w.pool)), NotReadyError);
    mint(w.secrets, { verdict: true });
    w.clock.at += 300;
    await w.reconciler.reconcile(key(w.pool));
    const to = annotation(ANNOTATIONS.targetConfigHash) ?? '';
    assert.notEqual(to, from, 'the rollout started in the window');
    assert.equal(annotation(ANNOTATIONS.rolloutHold), undefined);
    // The nodes still at the old hash: the status records the rollout under way, as the upgrader's annotations show it.
    const underWay = (): void => {
      const stored = w.store('NodePool').get('workers') as NodePool;
      stored.status = { ...stored.status, rollout: { from, to, since: '2026-11-24T02:10:00Z', changes: [] } };
    };

    underWay();
    w.clock.at = Date.parse('2026-11-24T03:00:00Z');
    await w.reconciler.reconcile(key(w.pool));
    assert.equal(annotation(ANNOTATIONS.rolloutHold), 'waiting for the maintenance window (opens 2026-11-25T02:00Z)');
    assert.equal(annotation(ANNOTATIONS.targetConfigHash), to, 'the target is not taken back');
    underWay();
    w.clock.at = Date.parse('2026-11-25T02:00:00Z');
    await w.reconciler.reconcile(key(w.pool));
    assert.equal(annotation(ANNOTATIONS.rolloutHold), undefined);
  });

  it('when a config change the disruption policy applies without a drain or a reboot comes outside the window, it should roll it out at once; one that reboots should wait', async () => {
    const w = await deployed('InPlace', (p) => {
      p.spec.config = [{ name: 'motd' }];
      p.spec.management.inPlace = { disruptionPolicy: { files: [{ path: '/etc/motd', actions: [{ type: 'None' }] }] } };
    });
    const target = (): string | undefined =>
      childOf(w, 'MachineSet').metadata?.annotations?.[ANNOTATIONS.targetConfigHash];
    const from = target();
    w.store('ConfigMap').set('motd', motd('Quiet'));
    await assert.rejects(w.reconciler.reconcile(key(w.pool)), NotReadyError, 'the quiet change goes on to its token');
    mint(w.secrets, { verdict: true });
    w.clock.at += 300;
    await w.reconciler.reconcile(key(w.pool));
    assert.notEqual(target(), from, 'the quiet change rolls out with the window closed');
    assert.equal(childOf(w, 'MachineSet').metadata?.annotations?.[ANNOTATIONS.rolloutHold], undefined);
    assert.equal(
      childOf(w, 'MachineSet').metadata?.annotations?.[ANNOTATIONS.rolloutCeiling],
      'waiting for the maintenance window (opens 2026-11-24T02:00Z)',
      'a node whose host needs a drain or a reboot after all waits for the window',
    );
    const allowed = cond(w.statuses.at(-1), 'RolloutAllowed');
    assert.deepEqual(
      [allowed?.status, allowed?.message],
      [
        'True',
        'The change neither drains nor reboots a node (each node: none): the maintenance window does not hold it',
      ],
    );

    const quiet = target();
    w.pool.spec.management.inPlace = {};
    w.store('ConfigMap').set('motd', motd('Loud'));
    w.clock.at += 300;
    await w.reconciler.reconcile(key(w.pool));
    assert.equal(target(), quiet, 'a change that reboots waits for the window');
    assert.equal(cond(w.statuses.at(-1), 'RolloutAllowed')?.reason, 'WaitingForMaintenanceWindow');
  });

  it('when the window opens while a quiet change rolls out under the ceiling, it should lift the ceiling; when it closes again, set it again', async () => {
    const w = await deployed('InPlace', (p) => {
      p.spec.config = [{ name: 'motd' }];
      p.spec.management.inPlace = { disruptionPolicy: { files: [{ path: '/etc/motd', actions: [{ type: 'None' }] }] } };
    });
    const annotation = (k: string): string | undefined => childOf(w, 'MachineSet').metadata?.annotations?.[k];
    const ceiling = (): string | undefined => annotation(ANNOTATIONS.rolloutCeiling);
    const from = annotation(ANNOTATIONS.targetConfigHash) ?? '';
    w.store('ConfigMap').set('motd', motd('Quiet'));
    await assert.rejects(w.reconciler.reconcile(key(w.pool)), NotReadyError);
    mint(w.secrets, { verdict: true });
    w.clock.at += 300;
    await w.reconciler.reconcile(key(w.pool));
    assert.notEqual(ceiling(), undefined);
    const to = annotation(ANNOTATIONS.targetConfigHash) ?? '';
    // The nodes still at the old hash: the status records the quiet rollout under way.
    const underWay = (): void => {
      const stored = w.store('NodePool').get('workers') as NodePool;
      const disruption = { action: 'none', drain: false, reboot: false, changes: [] };
      stored.status = {
        ...stored.status,
        rollout: { from, to, since: '2026-11-23T12:00:00Z', changes: [], disruption },
      };
    };

    underWay();
    w.clock.at = Date.parse('2026-11-24T02:00:30Z');
    await w.reconciler.reconcile(key(w.pool));
    assert.equal(ceiling(), undefined, 'in the window, nodes may drain and reboot');
    underWay();
    w.clock.at = Date.parse('2026-11-24T03:00:30Z');
    await w.reconciler.reconcile(key(w.pool));
    assert.equal(ceiling(), 'waiting for the maintenance window (opens 2026-11-25T02:00Z)');
  });

  it('when the window closes while a Replace rollout is under way, it should pause the MachineDeployment at its new template and lift the pause when the window opens', async () => {
    const w = await deployed('Replace');
    const from = w.statuses.at(-1)?.configHash ?? '';
    w.clock.at = Date.parse('2026-11-24T02:10:00Z');
    w.pool.spec.release.image = 'registry.local:5000/kindling/release:1.36.3';
    await assert.rejects(w.reconciler.reconcile(key(w.pool)), NotReadyError);
    mint(w.secrets, { verdict: true });
    w.clock.at += 300;
    await w.reconciler.reconcile(key(w.pool));
    const to = w.statuses.at(-1)?.configHash ?? '';
    assert.notEqual(to, from, 'the rollout started in the window');
    const md = (): { metadata?: k8s.V1ObjectMeta; spec: { paused?: boolean } } =>
      childOf(w, 'MachineDeployment') as unknown as { metadata?: k8s.V1ObjectMeta; spec: { paused?: boolean } };
    assert.equal(md().spec.paused, undefined);
    const rolling = bootstrapOf(md());
    // Cluster API's MachineSets of both hashes have Machines: the status records the rollout under way.
    const underWay = (): void => {
      const stored = w.store('NodePool').get('workers') as NodePool;
      stored.status = { ...stored.status, rollout: { from, to, since: '2026-11-24T02:10:00Z', changes: [] } };
    };

    underWay();
    w.clock.at = Date.parse('2026-11-24T03:00:00Z');
    await w.reconciler.reconcile(key(w.pool));
    assert.equal(md().spec.paused, true, 'Cluster API creates and deletes no further Machine');
    assert.equal(bootstrapOf(md()), rolling, 'the template is not taken back (that would roll back)');
    assert.equal(
      md().metadata?.annotations?.[ANNOTATIONS.rolloutHold],
      'waiting for the maintenance window (opens 2026-11-25T02:00Z)',
    );
    assert.equal(cond(w.statuses.at(-1), 'RolloutAllowed')?.reason, 'WaitingForMaintenanceWindow');
    underWay();
    w.clock.at = Date.parse('2026-11-25T02:00:00Z');
    await w.reconciler.reconcile(key(w.pool));
    assert.equal(md().spec.paused, undefined, 'the rollout resumes in the window');
  });

  it('when a node is Degraded, it should hold a rollout from a settled pool, but not a new target that supersedes the halted rollout (the fix)', async () => {
    const w = await deployed('InPlace');
    w.clock.at = Date.parse('2026-11-24T02:10:00Z');
    const ms = childOf(w, 'MachineSet');
    const hash = ms.metadata?.annotations?.[ANNOTATIONS.targetConfigHash] ?? '';
    ms.metadata = {
      ...ms.metadata,
      annotations: { ...ms.metadata?.annotations, [ANNOTATIONS.inPlaceFailure]: 'n1: broken' },
    };
    w.pool.spec.release.image = 'registry.local:5000/kindling/release:1.36.3';
    await w.reconciler.reconcile(key(w.pool));
    const held = cond(w.statuses.at(-1), 'RolloutAllowed');
    assert.deepEqual(
      [held?.reason, held?.message],
      ['NodeDegraded', 'the health gate holds the rollout: a node is Degraded: n1: broken'],
    );

    const stored = w.store('NodePool').get('workers') as NodePool;
    stored.status = {
      ...stored.status,
      rollout: { from: 'older', to: hash, since: '2026-11-24T02:00:00Z', changes: [] },
    };
    await assert.rejects(w.reconciler.reconcile(key(w.pool)), NotReadyError, 'the new target goes on to its token');
    assert.equal(cond(w.statuses.at(-1), 'RolloutAllowed')?.reason, 'AsExpected');
  });

  it('when a node only waits for the maintenance window (its update held by the ceiling), it should not count it as Degraded for the health gate', async () => {
    const w = await deployed('InPlace');
    w.clock.at = Date.parse('2026-11-24T02:10:00Z');
    const ms = childOf(w, 'MachineSet');
    const waits = 'n1: the update needs a reboot; waiting for the maintenance window (opens 2026-11-25T02:00Z)';
    ms.metadata = { ...ms.metadata, annotations: { ...ms.metadata?.annotations, [ANNOTATIONS.inPlaceWaiting]: waits } };
    w.pool.spec.release.image = 'registry.local:5000/kindling/release:1.36.3';
    await assert.rejects(w.reconciler.reconcile(key(w.pool)), NotReadyError, 'the new target goes on to its token');
    assert.equal(cond(w.statuses.at(-1), 'RolloutAllowed')?.reason, 'AsExpected');
  });

  /** The pool's deployed token Secret, with its config replaced as a tenant that can write Secrets could. */
  function tamperDeployedConfig(w: ReturnType<typeof world>, config: string): void {
    const tokens = [...w.secrets.values()].filter((x) => x.metadata?.name?.startsWith('token-') === true);
    assert.equal(tokens.length, 1);
    const secret = tokens[0] as k8s.V1Secret;
    secret.data = { ...secret.data, [SECRET_KEYS.config]: Buffer.from(config).toString('base64') };
  }

  it('when the deployed token Secret holds a config that is not JSON, it should hold the change for the window instead of failing every reconcile', async () => {
    const w = await deployed('InPlace', (p) => {
      p.spec.config = [{ name: 'motd' }];
      p.spec.management.inPlace = { disruptionPolicy: { files: [{ path: '/etc/motd', actions: [{ type: 'None' }] }] } };
    });
    tamperDeployedConfig(w, '{ not json');
    w.store('ConfigMap').set('motd', motd('Quiet'));
    w.clock.at += 300;
    await w.reconciler.reconcile(key(w.pool));
    assert.equal(cond(w.statuses.at(-1), 'RolloutAllowed')?.reason, 'WaitingForMaintenanceWindow');
  });

  it("when the deployed token Secret's config was edited to look like the target, it should still hold a change that reboots for the window", async () => {
    const w = await deployed('InPlace', (p) => (p.spec.config = [{ name: 'motd' }]));
    const target = (): string | undefined =>
      childOf(w, 'MachineSet').metadata?.annotations?.[ANNOTATIONS.targetConfigHash];
    const from = target();
    const loud = motd('Loud');
    tamperDeployedConfig(w, normaliseConfig([{ name: 'motd', data: loud.data ?? {} }]));
    w.store('ConfigMap').set('motd', loud);
    w.clock.at += 300;
    await w.reconciler.reconcile(key(w.pool));
    assert.equal(target(), from, 'the change that reboots waits for the window');
    assert.equal(cond(w.statuses.at(-1), 'RolloutAllowed')?.reason, 'WaitingForMaintenanceWindow');
  });

  for (const engine of ['Replace', 'ClusterAPI'] as const)
    it(`when only the infrastructure template of a ${engine} pool changes outside the window, it should pause its MachineDeployment until the window opens`, async () => {
      const w = await deployed(engine === 'Replace' ? 'Replace' : 'InPlace', (p) => {
        if (engine === 'ClusterAPI') p.spec.management.inPlace = { engine };
      });
      const hash = w.statuses.at(-1)?.configHash ?? '';
      // Cluster API's MachineSet of the MachineDeployment, its Machines on the template the pool names now.
      w.store('MachineSet').set('workers-abc', capiMachineSet('workers-abc', hash));
      const md = (): { metadata?: k8s.V1ObjectMeta; spec: { paused?: boolean } } =>
        childOf(w, 'MachineDeployment') as unknown as { metadata?: k8s.V1ObjectMeta; spec: { paused?: boolean } };
      w.pool.spec.platform.infrastructureTemplateRef.name = 'large';
      await w.reconciler.reconcile(key(w.pool));
      assert.equal(md().spec.paused, true, 'Cluster API replaces no Machine outside the window');
      assert.equal(
        md().metadata?.annotations?.[ANNOTATIONS.rolloutHold],
        'waiting for the maintenance window (opens 2026-11-24T02:00Z)',
      );
      assert.equal(cond(w.statuses.at(-1), 'RolloutAllowed')?.reason, 'WaitingForMaintenanceWindow');

      w.clock.at = Date.parse('2026-11-24T02:00:30Z');
      await w.reconciler.reconcile(key(w.pool));
      assert.equal(md().spec.paused, undefined, 'the Machines are replaced in the window');
    });

  it("when the token Secret of the hash the nodes are at is edited while a rollout is under way, it should neither fail the reconcile nor report the edited config's changes", async () => {
    const w = await deployed('Replace', (p) => (p.spec.config = [{ name: 'motd' }]));
    w.clock.at = Date.parse('2026-11-24T02:10:00Z');
    const from = w.statuses.at(-1)?.configHash ?? '';
    w.store('ConfigMap').set('motd', motd('Loud'));
    await assert.rejects(w.reconciler.reconcile(key(w.pool)), NotReadyError);
    mint(w.secrets, { verdict: true });
    w.clock.at += 300;
    // Cluster API's MachineSet of the old hash still has its Machines: the rollout is under way.
    w.store('MachineSet').set('workers-old', {
      apiVersion: 'cluster.x-k8s.io/v1beta2',
      kind: 'MachineSet',
      metadata: { name: 'workers-old', namespace: 'tenant-a', labels: { [LABELS.nodePool]: 'workers' } },
      spec: {
        replicas: 2,
        template: {
          spec: {
            bootstrap: { dataSecretName: userDataSecretName('workers', from) },
            infrastructureRef: { name: 'small' },
          },
        },
      },
    } as k8s.KubernetesObject);
    const old = w.secrets.get(tokenSecretName('workers', from)) as k8s.V1Secret;
    const tamper = (config: string): void => {
      old.data = { ...old.data, [SECRET_KEYS.config]: Buffer.from(config).toString('base64') };
    };
    const recorded = (): string =>
      (w.statuses.at(-1)?.rollout?.changes ?? []).map((c) => `${c.input}: ${c.detail}`).join('; ');

    tamper('{ not json');
    await w.reconciler.reconcile(key(w.pool));
    assert.equal(w.statuses.at(-1)?.rollout?.from, from);
    assert.match(recorded(), /the inputs of \w+ are no longer known/);

    const stored = w.store('NodePool').get('workers') as NodePool;
    stored.status = { ...stored.status, rollout: undefined };
    const crafted = 'kind: MachineConfig\nmetadata: { name: 99-crafted }\n';
    tamper(normaliseConfig([{ name: 'motd', data: { ...motd('Welcome').data, crafted } }]));
    await w.reconciler.reconcile(key(w.pool));
    assert.doesNotMatch(recorded(), /99-crafted/, 'a document the nodes never had is not reported removed');
  });
});

describe('NodePoolReconciler: when the pool is deleted', () => {
  const PAUSED = { [ANNOTATIONS.capiPaused]: 'true' };
  /** A pool being deleted, paused by its spec, with its finalizer still on. */
  const deleting = (): NodePool =>
    nodePoolFixture('workers', 'tenant-a', (p) => {
      p.spec.pausedUntil = 'true';
      p.metadata = {
        ...p.metadata,
        finalizers: [NODEPOOL_FINALIZER],
        deletionTimestamp: new Date('2026-11-24T00:00:00Z'),
      };
    });
  const child = (kind: string, metadata: Partial<k8s.V1ObjectMeta>): k8s.KubernetesObject => ({
    apiVersion: 'cluster.x-k8s.io/v1beta2',
    kind,
    metadata: { name: 'workers', namespace: 'tenant-a', ...metadata },
  });

  it('when a paused pool is deleted, it should take the paused annotation off its child before deleting it, so Cluster API runs the deletion', async () => {
    const pool = deleting();
    const w = world(pool);
    w.store('MachineDeployment').set('workers', child('MachineDeployment', { annotations: { ...PAUSED, a: 'b' } }));
    assert.deepEqual(await w.reconciler.reconcile(key(pool)), { requeueAfterMs: 2_000 });
    assert.deepEqual(w.writes, ['patch MachineDeployment/workers', 'delete MachineDeployment/workers']);
    assert.deepEqual(w.store('MachineDeployment').get('workers')?.metadata?.annotations, { a: 'b' });
  });

  it('when a pool deleted while paused has a child already being deleted, it should take the paused annotation off without deleting it again', async () => {
    const pool = deleting();
    const w = world(pool);
    const since = new Date('2026-11-23T00:00:00Z');
    w.store('MachineSet').set('workers', child('MachineSet', { annotations: PAUSED, deletionTimestamp: since }));
    assert.deepEqual(await w.reconciler.reconcile(key(pool)), { requeueAfterMs: 2_000 });
    assert.deepEqual(w.writes, ['patch MachineSet/workers']);
    assert.equal(w.store('MachineSet').get('workers')?.metadata?.annotations?.[ANNOTATIONS.capiPaused], undefined);
  });

  it('when an unpaused pool is deleted, it should only delete its child', async () => {
    const pool = deleting();
    delete pool.spec.pausedUntil;
    const w = world(pool);
    w.store('MachineSet').set('workers', child('MachineSet', {}));
    assert.deepEqual(await w.reconciler.reconcile(key(pool)), { requeueAfterMs: 2_000 });
    assert.deepEqual(w.writes, ['delete MachineSet/workers']);
  });
});

describe("NodePoolReconciler: the guest's Nodes", () => {
  /** A guest whose Node writes are counted, and whose control plane answers until `down`. */
  function guest(): { versions: ControlPlaneVersions; nodes: GuestNodes; down: () => void; asked: string[][] } {
    let up = true;
    const asked: string[][] = [];
    const version = parseVersion('1.36.3');
    return {
      versions: {
        versionOf: () => (up && version ? Promise.resolve(version) : Promise.reject(new Error('connect ETIMEDOUT'))),
      },
      nodes: {
        count: 0,
        propagate: (_pool, names) => {
          asked.push([...names]);
          return Promise.resolve(0);
        },
      },
      down: () => (up = false),
      asked,
    };
  }
  const machine = (name: string, node: string): k8s.KubernetesObject =>
    ({
      apiVersion: 'cluster.x-k8s.io/v1beta2',
      kind: 'Machine',
      metadata: { name, namespace: 'tenant-a', labels: { [LABELS.nodePool]: 'workers' } },
      spec: { clusterName: 'guest', bootstrap: {}, infrastructureRef: { name } },
      status: { nodeRef: { name: node } },
    }) as k8s.KubernetesObject;

  it("when this reconcile found the guest's control plane unreachable, it should not try its Nodes and look again with the version check", async () => {
    const g = guest();
    const w = world(nodePoolFixture('workers', 'tenant-a'), g);
    const pool = await deploy(w, w.store('NodePool').get('workers') as NodePool);
    w.store('Machine').set('m1', machine('m1', 'node-1'));
    await w.reconciler.reconcile(key(pool));
    assert.deepEqual(g.asked.at(-1), ['node-1'], 'a reachable guest gets its Nodes written');
    const tries = g.asked.length;

    g.down();
    const result = await w.reconciler.reconcile(key(pool));
    assert.equal(g.asked.length, tries, 'no Node is tried on a guest that did not answer');
    assert.equal(result.requeueAfterMs, 10_000, "the version check's retry brings the Nodes back");
    assert.equal(cond(w.statuses.at(-1), 'SupportedVersionSkew')?.reason, 'ControlPlaneUnreachable');
  });
});
