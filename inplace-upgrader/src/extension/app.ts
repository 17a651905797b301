/**
 * The Runtime Extension's HTTP app (served over HTTPS by support/https.ts): discovery and the in-place
 * hooks at the paths the Cluster API manager calls. Every answer to a request Cluster API could have sent is
 * a 200 with the hook's response, also when the request is malformed or something failed: then status
 * Failure and a message a person can act on (a non-200 would read as an unreachable extension). A body no
 * manager sends (too large, not JSON) is refused with 413/415 before it is read. What a request names is
 * checked against the upgrader's caches before anything is fetched or written (update-check.ts). Each answer
 * comes within answerWithinMs: work that takes longer (fetching a payload, writing to a guest cluster) carries
 * on in the background and the next call, which Cluster API makes anyway, picks up its result.
 */
import express, { type NextFunction, type Request, type Response } from 'express';
import { NotReadyError } from '../../../support/src/errors.js';
import type { Logger } from '../../../support/src/logger.js';
import type { PayloadRequest, PayloadSource } from '../payload.js';
import {
  changedUserData,
  decide,
  payloadTarget,
  type Decision,
  type DecisionInput,
  type PayloadSummary,
} from './decide.js';
import {
  HANDLERS,
  handlerPath,
  hookPath,
  jsonPatch,
  response,
  type CanUpdateMachineResponse,
  type CanUpdateMachineSetResponse,
  type CommonResponse,
  type DiscoveryResponse,
  type HookName,
  type JsonObject,
  type UpdateMachineResponse,
} from './hooks.js';
import { checkUpdateMachine, clusterApiPool, type ExtensionCache, type UpdateRequest } from './update-check.js';
import type { MachineUpdates } from './update-machine.js';
import { answerFor, type UpdateOutcome } from './update-answer.js';

/**
 * The largest request body read. The biggest request, CanUpdateMachineSet, holds two MachineSets and four
 * templates (tens of KiB); anything near this is not Cluster API, and is refused before it is read.
 */
export const MAX_BODY_BYTES = 2 * 1024 * 1024;

export interface ExtensionDeps {
  log: Logger;
  /** The summary of a pool's payload at a hash (see inPlaceBlockers); NotReadyError while it cannot be had. */
  payloads: (req: PayloadRequest) => Promise<PayloadSummary>;
  machines: MachineUpdates;
  /** The upgrader's caches: what every hook trusts instead of the request (update-check.ts). */
  cache: ExtensionCache;
  /** Longest wait for work before answering (default 500 ms, so the answer leaves within 1 s on a loaded machine; the manager's own timeout is the handler's 5 s). */
  answerWithinMs?: number;
  /** retryAfterSeconds while an update is in progress (default 5); the first of a halted one's backoff (update-answer.ts). */
  retryAfterSeconds?: number;
  metrics?: { request(hook: HookName, status: string): void };
}

/**
 * Payload summaries from where the upgrader gets payloads (the ignition server, as a host asks it), checked
 * with the agent's own rules (`inspect`: inPlaceBlockers, on the thread of blockers.ts), so the decision and
 * the agent never disagree.
 */
export function payloadSummaries(
  source: PayloadSource,
  inspect: (payload: Buffer) => Promise<string[]>,
): ExtensionDeps['payloads'] {
  return async (req) => ({ pool: req.pool, hash: req.hash, blockers: await inspect(await source.fetch(req)) });
}

/** A request that does not hold what the hook needs. */
class MalformedRequestError extends Error {
  override readonly name = 'MalformedRequestError';
}

const isObject = (v: unknown): v is JsonObject => typeof v === 'object' && v !== null && !Array.isArray(v);

function valueAt(body: unknown, path: string): unknown {
  let v: unknown = body;
  for (const key of path.split('.')) v = isObject(v) ? v[key] : undefined;
  return v;
}

/** body.<path> as an object; `where` names the body in the refusal. */
function requiredObject(body: unknown, path: string, where = 'request'): JsonObject {
  const v = valueAt(body, path);
  if (isObject(v)) return v;
  throw new MalformedRequestError(`${where}.${path} is ${v === undefined ? 'missing' : 'not an object'}`);
}

/** body.<path> as an object, or nothing when it is absent (or null, as Go writes an empty RawExtension). */
function optionalObject(body: unknown, path: string): JsonObject | undefined {
  const v = valueAt(body, path);
  return v === undefined || v === null ? undefined : requiredObject(body, path);
}

const TIMED_OUT = Symbol('timed out');

async function within<T>(work: Promise<T>, ms: number): Promise<T | typeof TIMED_OUT> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<typeof TIMED_OUT>((resolve) => (timer = setTimeout(() => resolve(TIMED_OUT), ms)));
  try {
    return await Promise.race([work, deadline]);
  } finally {
    clearTimeout(timer);
  }
}

/** The summary of the desired payload, when the user-data changes to a Kindling payload; else nothing. */
async function desiredPayload(input: DecisionInput, deps: ExtensionDeps): Promise<PayloadSummary | undefined> {
  const target = payloadTarget(input.kind, input.desired);
  if (!target || !changedUserData(input)) return undefined;
  const ns = (input.desired.machine.metadata as JsonObject | undefined)?.namespace;
  // Only a ClusterAPI-engine pool's payload is ever applied in place; for any other (a Replace pool, or a
  // pool the request makes up) nothing is fetched and the decision rolls.
  const found = clusterApiPool(deps.cache, typeof ns === 'string' ? ns : '', target.pool);
  if (!('pool' in found)) return undefined;
  const { namespace = '', name: pool } = found.pool.metadata;
  const summary = await within(deps.payloads({ namespace, pool, hash: target.hash }), deps.answerWithinMs ?? 500);
  if (summary === TIMED_OUT)
    throw new NotReadyError(
      `the payload of pool ${namespace}/${pool} at ${target.hash} is still being fetched from the ignition server`,
    );
  return summary;
}

function decisionInput(kind: DecisionInput['kind'], body: unknown): DecisionInput {
  const names =
    kind === 'MachineSet'
      ? ['machineSet', 'infrastructureMachineTemplate', 'bootstrapConfigTemplate']
      : ['machine', 'infrastructureMachine', 'bootstrapConfig'];
  const side = (s: 'current' | 'desired'): DecisionInput['current'] => ({
    machine: requiredObject(body, `${s}.${names[0]}`),
    infrastructure: requiredObject(body, `${s}.${names[1]}`),
    bootstrap: optionalObject(body, `${s}.${names[2]}`),
  });
  const input: DecisionInput = { kind, current: side('current'), desired: side('desired') };
  const spec = kind === 'MachineSet' ? 'spec.template.spec' : 'spec';
  for (const s of ['current', 'desired'] as const) requiredObject(input[s].machine, spec, `request.${s}.${names[0]}`);
  return input;
}

async function decideRequest(kind: DecisionInput['kind'], body: unknown, deps: ExtensionDeps): Promise<Decision> {
  const input = decisionInput(kind, body);
  return decide({ ...input, payload: await desiredPayload(input, deps) });
}

async function canUpdateMachineSet(body: unknown, deps: ExtensionDeps): Promise<CanUpdateMachineSetResponse> {
  const d = await decideRequest('MachineSet', body, deps);
  return response<CanUpdateMachineSetResponse>('CanUpdateMachineSetResponse', 'Success', {
    message: d.message,
    machineSetPatch: jsonPatch(d.patches.machine),
    infrastructureMachineTemplatePatch: jsonPatch(d.patches.infrastructure),
    bootstrapConfigTemplatePatch: jsonPatch(d.patches.bootstrap),
  });
}

async function canUpdateMachine(body: unknown, deps: ExtensionDeps): Promise<CanUpdateMachineResponse> {
  const d = await decideRequest('Machine', body, deps);
  return response<CanUpdateMachineResponse>('CanUpdateMachineResponse', 'Success', {
    message: d.message,
    machinePatch: jsonPatch(d.patches.machine),
    infrastructureMachinePatch: jsonPatch(d.patches.infrastructure),
    bootstrapConfigPatch: jsonPatch(d.patches.bootstrap),
  });
}

/** What an UpdateMachine request asks for, or why it asks for nothing Kindling can do. */
function updateRequestOf(body: unknown): UpdateRequest | { refusal: string } {
  const machine = requiredObject(body, 'desired.machine');
  const meta = (machine.metadata ?? {}) as JsonObject;
  const [name, namespace] = [meta.name, meta.namespace];
  if (typeof name !== 'string' || typeof namespace !== 'string')
    throw new MalformedRequestError('request.desired.machine has no metadata.name and metadata.namespace');
  // With Kindling's bootstrap provider the payload is the desired KindlingConfig's (Cluster API rewrote it for
  // this update; the Machine's dataSecretName still names the Secret it first booted from).
  const target = payloadTarget('Machine', {
    machine,
    infrastructure: {},
    bootstrap: optionalObject(body, 'desired.bootstrapConfig'),
  });
  if (!target)
    return {
      refusal: `Machine ${namespace}/${name}: neither its bootstrap config nor its bootstrap.dataSecretName names a Kindling payload, so Kindling has nothing to apply`,
    };
  return { namespace, machine: name, ...target };
}

async function updateMachine(body: unknown, deps: ExtensionDeps): Promise<UpdateMachineResponse> {
  const request = updateRequestOf(body);
  if ('refusal' in request)
    return response<UpdateMachineResponse>('UpdateMachineResponse', 'Failure', {
      retryAfterSeconds: 0,
      message: request.refusal,
    });
  const check = checkUpdateMachine(request, deps.cache);
  if (!check.allowed)
    return response<UpdateMachineResponse>('UpdateMachineResponse', 'Failure', {
      retryAfterSeconds: 0,
      message: `refused (${check.reason}): ${check.message}`,
    });
  const outcome = await within(deps.machines.update(check.target), deps.answerWithinMs ?? 500);
  const o: UpdateOutcome =
    outcome === TIMED_OUT
      ? {
          state: 'in-progress',
          message: `Machine ${check.target.namespace}/${check.target.machine}: still working towards ${check.target.hash}`,
        }
      : outcome;
  const { status, ...fields } = answerFor(o, deps.retryAfterSeconds ?? 5);
  return response<UpdateMachineResponse>('UpdateMachineResponse', status, fields);
}

function discovery(): DiscoveryResponse {
  return response<DiscoveryResponse>('DiscoveryResponse', 'Success', {
    handlers: HANDLERS.map((h) => ({ ...h, requestHook: { ...h.requestHook } })),
  });
}

interface Route {
  hook: HookName;
  kind: string;
  handle: (body: unknown, deps: ExtensionDeps) => Promise<CommonResponse> | CommonResponse;
  /** Fields a Failure of this hook carries besides status and message. */
  failure?: Record<string, unknown>;
}

const ROUTES: Record<string, Route> = {
  [hookPath('Discovery')]: { hook: 'Discovery', kind: 'DiscoveryResponse', handle: discovery },
  [handlerPath('CanUpdateMachineSet')]: {
    hook: 'CanUpdateMachineSet',
    kind: 'CanUpdateMachineSetResponse',
    handle: canUpdateMachineSet,
  },
  [handlerPath('CanUpdateMachine')]: {
    hook: 'CanUpdateMachine',
    kind: 'CanUpdateMachineResponse',
    handle: canUpdateMachine,
  },
  [handlerPath('UpdateMachine')]: {
    hook: 'UpdateMachine',
    kind: 'UpdateMachineResponse',
    handle: updateMachine,
    failure: { retryAfterSeconds: 0 },
  },
};

function failure(route: Route, err: unknown): CommonResponse {
  const why =
    err instanceof MalformedRequestError
      ? `malformed request: ${err.message}`
      : err instanceof NotReadyError
        ? `${err.message}; Cluster API asks again`
        : (err as Error).message;
  return response(route.kind, 'Failure', { ...route.failure, message: why });
}

/** What a request is about, for the log line (never the whole object). */
function subject(body: unknown): string | undefined {
  for (const path of ['desired.machineSet.metadata', 'desired.machine.metadata']) {
    const meta = optionalObject(body, path);
    if (meta) return `${String(meta.namespace)}/${String(meta.name)}`;
  }
  return undefined;
}

async function answer(route: Route, req: Request, res: Response, deps: ExtensionDeps): Promise<void> {
  const started = performance.now();
  let out: CommonResponse;
  try {
    out = await route.handle(req.body, deps);
  } catch (err) {
    out = failure(route, err);
  }
  deps.metrics?.request(route.hook, out.status);
  const object = (() => {
    try {
      return subject(req.body);
    } catch {
      return undefined;
    }
  })();
  const line = {
    hook: route.hook,
    object,
    status: out.status,
    message: out.message,
    durationMs: Math.round(performance.now() - started),
  };
  if (out.status === 'Failure') deps.log.warn(line, 'Hook answered Failure');
  else deps.log.info(line, 'Hook answered');
  res.status(200).json(out);
}

/** A hook's Failure with an HTTP error status: the manager reads the JSON whatever the status, others the status. */
function refuseBody(
  route: Route,
  res: Response,
  deps: ExtensionDeps,
  [status, message]: [status: number, message: string],
): void {
  deps.metrics?.request(route.hook, 'Failure');
  deps.log.warn({ hook: route.hook, httpStatus: status, err: message }, 'Hook request refused before reading it');
  // The rest of the body is not read: the connection goes with the answer.
  res.set('Connection', 'close');
  res.status(status).json(response(route.kind, 'Failure', { ...route.failure, message }));
}

const TOO_LARGE = `request body over ${MAX_BODY_BYTES} bytes: a Cluster API hook request is far smaller`;

/**
 * Refuses, before reading a byte of it, a body that declares another type than JSON (the manager sends
 * JSON with no Content-Type at all) or a length over MAX_BODY_BYTES; a body without a length is cut there.
 */
function guardBody(deps: ExtensionDeps) {
  return (req: Request, res: Response, next: NextFunction): void => {
    const route = ROUTES[req.path];
    if (!route || req.method !== 'POST') return next();
    const type = req.headers['content-type']?.split(';')[0]?.trim().toLowerCase();
    if (type && type !== 'application/json')
      return refuseBody(route, res, deps, [415, `Content-Type ${type} is not application/json`]);
    if (Number(req.headers['content-length'] ?? 0) > MAX_BODY_BYTES)
      return refuseBody(route, res, deps, [413, TOO_LARGE]);
    next();
  };
}

export function createApp(deps: ExtensionDeps): express.Express {
  const app = express();
  app.disable('x-powered-by');
  app.use(guardBody(deps));
  app.use(express.json({ limit: MAX_BODY_BYTES, type: () => true }));
  app.use((req: Request, res: Response) => {
    const route = ROUTES[req.path];
    if (route && req.method === 'POST') return void answer(route, req, res, deps);
    res
      .status(route ? 405 : 404)
      .type('text/plain')
      .send(route ? 'hooks are POSTed\n' : 'no such hook\n');
  });
  // Body errors: one over the limit without a declared length is refused as above; one that is not JSON is
  // a Failure of the hook that was asked, not an HTTP error.
  app.use((err: Error & { type?: string }, req: Request, res: Response, _next: NextFunction) => {
    const route = ROUTES[req.path];
    if (!route) return void res.status(404).type('text/plain').send('no such hook\n');
    if (err.type === 'entity.too.large') return refuseBody(route, res, deps, [413, TOO_LARGE]);
    deps.metrics?.request(route.hook, 'Failure');
    deps.log.warn({ hook: route.hook, err: err.message }, 'Hook answered Failure: unreadable request');
    res
      .status(200)
      .json(response(route.kind, 'Failure', { ...route.failure, message: `malformed request: ${err.message}` }));
  });
  return app;
}
