import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import request from 'supertest';
import type { KindlingConfig } from '../../../api/src/bootstrap.js';
import type { Machine } from '../../../api/src/capi.js';
import { ANNOTATIONS, LABELS } from '../../../api/src/keys.js';
import type { NodePool } from '../../../api/src/nodepool.js';
import { NotReadyError } from '../../../support/src/errors.js';
import { createLogger } from '../../../support/src/logger.js';
import { inPlaceBlockers } from '../../../support/src/ignition/ignition.js';
import { createApp, MAX_BODY_BYTES, payloadSummaries, type ExtensionDeps } from './app.js';
import type { PayloadSummary } from './decide.js';
import { handlerPath, HANDLERS, type JsonObject, type JsonPatchOperation, type Patch } from './hooks.js';
import type { ExtensionCache, UpdateTarget } from './update-check.js';
import type { UpdateOutcome } from './update-answer.js';

const log = createLogger({ name: 'extension-test', level: 'silent' });
const POOL = 'workers';
const never = <T>(): Promise<T> => new Promise<T>(() => undefined);

function machineSet(name: string, hash: string, version: string): JsonObject {
  return {
    apiVersion: 'cluster.x-k8s.io/v1beta2',
    kind: 'MachineSet',
    metadata: { name, namespace: 'tenants', labels: { [LABELS.nodePool]: POOL } },
    spec: {
      clusterName: 'guest',
      template: {
        metadata: { labels: { [LABELS.nodePool]: POOL } },
        spec: {
          clusterName: 'guest',
          bootstrap: {
            configRef: { apiGroup: 'bootstrap.kindling.dev', kind: 'KindlingConfigTemplate', name: `${POOL}-${hash}` },
          },
          infrastructureRef: { kind: 'LocalMachineTemplate', name: 'small' },
          version,
        },
      },
    },
  };
}

/** Kindling's bootstrap template of the pool at a hash (the ClusterAPI in-place engine). */
const bootstrapTemplate = (hash: string): JsonObject => ({
  apiVersion: 'bootstrap.kindling.dev/v1beta1',
  kind: 'KindlingConfigTemplate',
  metadata: { name: `${POOL}-${hash}` },
  spec: { template: { spec: { nodePool: POOL, configHash: hash } } },
});

const template = {
  apiVersion: 'infrastructure.kindling.dev/v1alpha1',
  kind: 'LocalMachineTemplate',
  metadata: { name: 'small' },
  spec: { template: { spec: {} } },
};

const upgradeRequest = {
  apiVersion: 'hooks.runtime.cluster.x-k8s.io/v1alpha1',
  kind: 'CanUpdateMachineSetRequest',
  current: {
    machineSet: machineSet('workers-a', 'aaaa', 'v1.36.2'),
    infrastructureMachineTemplate: template,
    bootstrapConfigTemplate: bootstrapTemplate('aaaa'),
  },
  desired: {
    machineSet: machineSet('workers-b', 'bbbb', 'v1.36.3'),
    infrastructureMachineTemplate: template,
    bootstrapConfigTemplate: bootstrapTemplate('bbbb'),
  },
};

function updateRequest(secret = `user-data-${POOL}-bbbb`): object {
  return {
    desired: {
      machine: {
        apiVersion: 'cluster.x-k8s.io/v1beta2',
        kind: 'Machine',
        metadata: { name: 'workers-b-x1', namespace: 'tenants', labels: { [LABELS.nodePool]: POOL } },
        spec: { clusterName: 'guest', bootstrap: { dataSecretName: secret } },
      },
      infrastructureMachine: { kind: 'LocalMachine', metadata: { name: 'workers-b-x1' }, spec: {} },
    },
  };
}

/** What the upgrader's caches hold: Machine workers-b-x1 of the ClusterAPI-engine pool, being updated to bbbb. */
function cache(machine: (m: Machine) => void = () => undefined, engine = 'ClusterAPI'): ExtensionCache {
  const m: Machine = {
    apiVersion: 'cluster.x-k8s.io/v1beta2',
    kind: 'Machine',
    metadata: {
      name: 'workers-b-x1',
      namespace: 'tenants',
      labels: { [LABELS.nodePool]: POOL },
      annotations: { [ANNOTATIONS.capiUpdateInProgress]: '' },
    },
    spec: {
      clusterName: 'guest',
      bootstrap: { configRef: { apiGroup: 'bootstrap.kindling.dev', kind: 'KindlingConfig', name: 'workers-b-x1' } },
      infrastructureRef: { apiGroup: 'infrastructure.kindling.dev', kind: 'LocalMachine', name: 'workers-b-x1' },
    },
  };
  machine(m);
  const config = {
    metadata: { name: 'workers-b-x1', namespace: 'tenants' },
    spec: { nodePool: POOL, configHash: 'bbbb' },
  } as KindlingConfig;
  const pool = {
    metadata: { name: POOL, namespace: 'tenants' },
    spec: { clusterName: 'guest', management: { upgradeType: 'InPlace', inPlace: { engine } } },
  } as NodePool;
  const at =
    <T>(obj: T & { metadata: { name: string; namespace?: string } }) =>
    (ns: string, name: string) =>
      obj.metadata.namespace === ns && obj.metadata.name === name ? obj : undefined;
  return { machine: at(m), kindlingConfig: at(config), nodePool: at(pool) };
}

function deps(
  over: {
    payloads?: ExtensionDeps['payloads'];
    update?: (t: UpdateTarget) => Promise<UpdateOutcome>;
    cache?: ExtensionCache;
  } = {},
): ExtensionDeps & { asked: UpdateTarget[] } {
  const asked: UpdateTarget[] = [];
  return {
    log,
    asked,
    cache: over.cache ?? cache(),
    answerWithinMs: 200,
    payloads:
      over.payloads ??
      ((req): Promise<PayloadSummary> => Promise.resolve({ pool: req.pool, hash: req.hash, blockers: [] })),
    machines: {
      update: (t) => {
        asked.push(t);
        return over.update ? over.update(t) : Promise.resolve({ state: 'in-progress', message: 'draining' });
      },
    },
  };
}

interface Answer {
  apiVersion: string;
  kind: string;
  status: string;
  message: string;
  retryAfterSeconds?: number;
  machineSetPatch?: Patch;
  infrastructureMachineTemplatePatch?: Patch;
  bootstrapConfigTemplatePatch?: Patch;
  handlers?: {
    name: string;
    requestHook: { hook: string; apiVersion: string };
    failurePolicy: string;
    timeoutSeconds: number;
  }[];
}

/** POSTs a hook request (a string is sent as it is) and reads the answer. */
async function call(
  app: ReturnType<typeof createApp>,
  path: string,
  body: unknown,
): Promise<{ status: number; body: Answer }> {
  const res = await request(app)
    .post(path)
    .set('content-type', 'application/json')
    .send(typeof body === 'string' ? body : JSON.stringify(body));
  return { status: res.status, body: res.body as Answer };
}

/** POSTs raw bytes over HTTP with the headers as given (none unless `type`), as the manager's Go client does. */
async function post(
  app: ReturnType<typeof createApp>,
  path: string,
  body: string,
  type?: string,
): Promise<{ status: number; body: Answer }> {
  const server = app.listen(0, '127.0.0.1');
  await once(server, 'listening');
  try {
    const { port } = server.address() as AddressInfo;
    const res = await fetch(`http://127.0.0.1:${port}${path}`, {
      method: 'POST',
      // Bytes, so fetch adds no Content-Type of its own.
      body: new TextEncoder().encode(body),
      headers: type ? { 'content-type': type } : {},
    });
    return { status: res.status, body: (await res.json()) as Answer };
  } finally {
    server.close();
  }
}

const decodePatch = (p: Patch | undefined): JsonPatchOperation[] =>
  p ? (JSON.parse(Buffer.from(p.patch, 'base64').toString()) as JsonPatchOperation[]) : [];
const CAN_UPDATE_SET = handlerPath('CanUpdateMachineSet');
const UPDATE = handlerPath('UpdateMachine');
const TARGET: UpdateTarget = {
  namespace: 'tenants',
  machine: 'workers-b-x1',
  cluster: 'guest',
  pool: POOL,
  hash: 'bbbb',
};

describe('Runtime Extension app', () => {
  it('when the manager discovers the extension, it should list the three in-place handlers at the paths it serves', async () => {
    const app = createApp(deps());
    const res = await call(app, '/hooks.runtime.cluster.x-k8s.io/v1alpha1/discovery?timeout=10s', {
      apiVersion: 'hooks.runtime.cluster.x-k8s.io/v1alpha1',
      kind: 'DiscoveryRequest',
    });
    assert.equal(res.status, 200);
    assert.equal(res.body.status, 'Success');
    assert.deepEqual(
      (res.body.handlers ?? []).map((h) => [
        h.name,
        h.requestHook.apiVersion,
        h.requestHook.hook,
        h.failurePolicy,
        h.timeoutSeconds,
      ]),
      [
        ['can-update-machine-set', 'hooks.runtime.cluster.x-k8s.io/v1alpha1', 'CanUpdateMachineSet', 'Fail', 5],
        ['can-update-machine', 'hooks.runtime.cluster.x-k8s.io/v1alpha1', 'CanUpdateMachine', 'Fail', 5],
        ['update-machine', 'hooks.runtime.cluster.x-k8s.io/v1alpha1', 'UpdateMachine', 'Fail', 5],
      ],
    );
    for (const h of HANDLERS) {
      const path = `/hooks.runtime.cluster.x-k8s.io/v1alpha1/${h.requestHook.hook.toLowerCase()}/${h.name}`;
      assert.notEqual((await request(app).post(path).send({})).status, 404, `${path} is not served`);
    }
  });

  it('when a MachineSet moves to a payload the agent can apply, it should answer the patches that claim the config hash and version', async () => {
    const d = deps();
    const res = await call(createApp(d), `${CAN_UPDATE_SET}?timeout=5s`, upgradeRequest);
    assert.equal(res.body.status, 'Success', res.body.message);
    assert.equal(res.body.kind, 'CanUpdateMachineSetResponse');
    assert.equal(res.body.machineSetPatch?.patchType, 'JSONPatch');
    assert.deepEqual(decodePatch(res.body.machineSetPatch), [
      { op: 'add', path: '/spec/template/spec/bootstrap/configRef/name', value: `${POOL}-bbbb` },
      { op: 'add', path: '/spec/template/spec/version', value: 'v1.36.3' },
    ]);
    assert.deepEqual(decodePatch(res.body.bootstrapConfigTemplatePatch), [
      { op: 'add', path: '/spec/template/spec/configHash', value: 'bbbb' },
    ]);
    assert.equal(res.body.infrastructureMachineTemplatePatch, undefined);
  });

  it('when the new payload holds kernel arguments, it should claim nothing and say why', async () => {
    const res = await call(
      createApp(
        deps({ payloads: (req) => Promise.resolve({ pool: req.pool, hash: req.hash, blockers: ['kernelArguments'] }) }),
      ),
      CAN_UPDATE_SET,
      upgradeRequest,
    );
    assert.equal(res.body.status, 'Success');
    assert.equal(res.body.machineSetPatch, undefined);
    assert.equal(res.body.bootstrapConfigTemplatePatch, undefined);
    assert.match(
      res.body.message,
      /must roll: bootstrap\.configRef\.name \(payload bbbb holds what the node agent cannot apply in place \(kernelArguments\)/,
    );
  });

  it('when the payload is still being fetched, it should answer Failure within the deadline, and decide once the payload is there', async () => {
    let release: (s: PayloadSummary) => void = () => undefined;
    const pending = new Promise<PayloadSummary>((r) => (release = r));
    let fetches = 0;
    const source = {
      fetch: (): Promise<Buffer> => (
        fetches++,
        pending.then(() => Buffer.from('{"ignition":{"version":"3.4.0"},"kernelArguments":{"shouldExist":["quiet"]}}'))
      ),
    };
    const app = createApp(deps({ payloads: payloadSummaries(source, async (p) => inPlaceBlockers(p)) }));
    const started = Date.now();
    const first = await call(app, CAN_UPDATE_SET, upgradeRequest);
    assert.ok(Date.now() - started < 1000, `answered after ${Date.now() - started} ms`);
    assert.equal(first.body.status, 'Failure');
    assert.match(
      first.body.message,
      /payload of pool tenants\/workers at bbbb is still being fetched.*Cluster API asks again/,
    );
    release({ pool: POOL, hash: 'bbbb', blockers: [] });
    const second = await call(app, CAN_UPDATE_SET, upgradeRequest);
    assert.equal(second.body.status, 'Success');
    assert.match(second.body.message, /kernelArguments/);
    assert.equal(
      fetches,
      2,
      'the summary source is asked each time; the payload cache (CachedPayloadSource) keeps the bytes',
    );
  });

  it('when the payload cannot be had yet, it should answer Failure with the reason', async () => {
    const res = await call(
      createApp(
        deps({
          payloads: () =>
            Promise.reject(new NotReadyError('token Secret tenants/token-workers-bbbb does not exist yet')),
        }),
      ),
      CAN_UPDATE_SET,
      upgradeRequest,
    );
    assert.equal(res.status, 200);
    assert.equal(res.body.status, 'Failure');
    assert.match(
      res.body.message,
      /token Secret tenants\/token-workers-bbbb does not exist yet; Cluster API asks again/,
    );
  });

  const malformed: [string, string | object, RegExp][] = [
    ['the body is not JSON', '{"current": ', /malformed request: .*JSON/],
    [
      'the desired MachineSet is missing',
      { current: upgradeRequest.current, desired: { infrastructureMachineTemplate: template } },
      /malformed request: request\.desired\.machineSet is missing/,
    ],
    [
      'a MachineSet has no template spec',
      {
        ...upgradeRequest,
        desired: { ...upgradeRequest.desired, machineSet: { metadata: {}, spec: { template: 'x' } } },
      },
      /request\.desired\.machineSet\.spec\.template\.spec is missing/,
    ],
    ['the body is a JSON list', [1, 2], /request\.current\.machineSet is missing/],
  ];
  for (const [what, body, message] of malformed) {
    it(`when ${what}, it should answer Failure saying what is wrong, not an HTTP error`, async () => {
      const res = await call(createApp(deps()), CAN_UPDATE_SET, body);
      assert.equal(res.status, 200);
      assert.equal(res.body.status, 'Failure');
      assert.equal(res.body.kind, 'CanUpdateMachineSetResponse');
      assert.match(res.body.message, message);
    });
  }

  const outcomes: [UpdateOutcome, string, number][] = [
    [{ state: 'in-progress', message: 'Node n1: draining (drain-bbbb)' }, 'Success', 5],
    [{ state: 'done', message: 'Node n1 is at bbbb' }, 'Success', 0],
    [{ state: 'failed', message: 'Node n1: cannot be applied in place: kernelArguments' }, 'Failure', 0],
    [{ state: 'halted', attempt: 2, message: 'Node n1: health check failed' }, 'Success', 20],
  ];
  for (const [outcome, status, retry] of outcomes) {
    it(`when the Machine's update is ${outcome.state}, it should answer ${status} with retryAfterSeconds ${retry}`, async () => {
      const d = deps({ update: () => Promise.resolve(outcome) });
      const res = await call(createApp(d), UPDATE, updateRequest());
      assert.deepEqual(res.body, {
        apiVersion: 'hooks.runtime.cluster.x-k8s.io/v1alpha1',
        kind: 'UpdateMachineResponse',
        status,
        retryAfterSeconds: retry,
        message: outcome.message,
      });
      assert.deepEqual(d.asked, [TARGET]);
    });
  }

  it('when a step takes longer than the deadline, it should answer in progress in time', async () => {
    const started = Date.now();
    const res = await call(createApp(deps({ update: never })), UPDATE, updateRequest());
    assert.ok(Date.now() - started < 1000);
    assert.equal(res.body.status, 'Success');
    assert.equal(res.body.retryAfterSeconds, 5);
    assert.match(res.body.message, /still working towards bbbb/);
  });

  it('when the Machine has a KindlingConfig, it should update towards the config’s hash, not the data Secret it first booted from', async () => {
    const d = deps();
    const body = updateRequest(`user-data-${POOL}-aaaa`) as { desired: Record<string, unknown> };
    body.desired.bootstrapConfig = {
      apiVersion: 'bootstrap.kindling.dev/v1beta1',
      kind: 'KindlingConfig',
      metadata: { name: 'workers-b-x1' },
      spec: { nodePool: POOL, configHash: 'bbbb' },
    };
    const res = await call(createApp(d), UPDATE, body);
    assert.equal(res.body.status, 'Success', res.body.message);
    assert.deepEqual(d.asked, [TARGET]);
  });

  it('when the Machine does not boot a Kindling payload, it should refuse UpdateMachine and say why', async () => {
    const d = deps();
    const res = await call(createApp(d), UPDATE, updateRequest('hand-made'));
    assert.equal(res.body.status, 'Failure');
    assert.match(
      res.body.message,
      /tenants\/workers-b-x1: neither its bootstrap config nor its bootstrap\.dataSecretName names a Kindling payload/,
    );
    assert.deepEqual(d.asked, []);
  });

  it('when an UpdateMachine request has no Machine name, it should answer Failure', async () => {
    const res = await call(createApp(deps()), UPDATE, { desired: { machine: { spec: {} } } });
    assert.equal(res.body.status, 'Failure');
    assert.equal(res.body.retryAfterSeconds, 0);
    assert.match(res.body.message, /no metadata\.name and metadata\.namespace/);
  });

  it('when a path is not a hook, or a hook is not POSTed, it should answer 404 or 405', async () => {
    const app = createApp(deps());
    assert.equal(
      (await request(app).post('/hooks.runtime.cluster.x-k8s.io/v1alpha1/beforeclustercreate/x').send({})).status,
      404,
    );
    assert.equal((await request(app).get(UPDATE)).status, 405);
  });

  const forged: [string, (b: { desired: Record<string, unknown> }) => void, ExtensionCache, RegExp][] = [
    [
      'a Machine Cluster API is not updating in place',
      () => undefined,
      cache((m) => delete m.metadata.annotations?.[ANNOTATIONS.capiUpdateInProgress]),
      /^refused \(NotUpdatingInPlace\): Machine tenants\/workers-b-x1 is not being updated in place by Cluster API/,
    ],
    [
      'another pool than the Machine’s',
      (b) =>
        (b.desired.bootstrapConfig = {
          apiVersion: 'bootstrap.kindling.dev/v1beta1',
          kind: 'KindlingConfig',
          spec: { nodePool: 'other', configHash: 'bbbb' },
        }),
      cache(),
      /^refused \(PoolMismatch\): Machine tenants\/workers-b-x1 is of pool workers, not of pool other/,
    ],
  ];
  for (const [what, forge, cached, message] of forged) {
    it(`when UpdateMachine names ${what}, it should answer Failure saying which check failed and hand out nothing`, async () => {
      const d = deps({ cache: cached });
      const body = updateRequest() as { desired: Record<string, unknown> };
      forge(body);
      const res = await call(createApp(d), UPDATE, body);
      assert.equal(res.body.status, 'Failure');
      assert.equal(res.body.retryAfterSeconds, 0);
      assert.match(res.body.message, message);
      assert.deepEqual(d.asked, []);
    });
  }

  it('when CanUpdateMachineSet names a pool that is not on the ClusterAPI engine, it should fetch no payload and claim nothing', async () => {
    const fetched: string[] = [];
    const d = deps({
      cache: cache(undefined, 'MachineSet'),
      payloads: (req) => (fetched.push(req.pool), Promise.resolve({ pool: req.pool, hash: req.hash, blockers: [] })),
    });
    const res = await call(createApp(d), CAN_UPDATE_SET, upgradeRequest);
    assert.equal(res.body.status, 'Success');
    assert.deepEqual(fetched, []);
    assert.equal(res.body.machineSetPatch, undefined);
    assert.match(res.body.message, /the payload of pool workers at bbbb is not known/);
  });

  it('when a body declares more than the limit, it should refuse it with 413 before reading it', async () => {
    const d = deps();
    const res = await post(createApp(d), UPDATE, 'x'.repeat(MAX_BODY_BYTES + 1));
    assert.equal(res.status, 413);
    assert.equal(res.body.status, 'Failure');
    assert.match(res.body.message, /request body over 2097152 bytes/);
    assert.deepEqual(d.asked, []);
  });

  it('when a body is not declared as JSON, it should refuse it with 415; with no Content-Type, as the manager sends, it should answer', async () => {
    const app = createApp(deps());
    const refused = await post(app, UPDATE, JSON.stringify(updateRequest()), 'text/plain');
    assert.equal(refused.status, 415);
    assert.match(refused.body.message, /Content-Type text\/plain is not application\/json/);
    const plain = await post(app, UPDATE, JSON.stringify(updateRequest()));
    assert.equal(plain.status, 200);
    assert.equal(plain.body.status, 'Success', plain.body.message);
  });
});
